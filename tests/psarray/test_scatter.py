"""The prefetching scatter kernels (``psarray/_scatter.py``) against NumPy: any mix
of row lengths (empty rows, rows shorter and longer than the prefetch distance),
duplicate entries, adds and sets, and the dtypes blocks hold; the servers' compiled
checks of compressed rows against the numpy checks they replaced."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daskangel.errors import InvalidArgumentError, PSIndexError, ShapeMismatchError
from daskangel.psarray._scatter import FAR, check_csr, csr_extents, scatter_coo, scatter_csr

pytestmark = pytest.mark.timeout(120)


@settings(max_examples=60, deadline=None)
@given(
    shape=st.tuples(st.integers(1, 40), st.integers(1, 30)),
    lens=st.lists(st.integers(0, FAR // 3), min_size=0, max_size=25),
    dtype=st.sampled_from(["int32", "float32", "float64", "int64"]),
    add=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_scatter_csr_matches_numpy(
    shape: tuple[int, int], lens: list[int], dtype: str, add: bool, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    rows = rng.integers(0, shape[0], len(lens))  # repeated and unsorted rows too
    lens_a = np.array(lens, np.int64)
    cols = rng.integers(0, shape[1], int(lens_a.sum()))
    vals = rng.integers(-5, 6, cols.shape[0]).astype(dtype)
    block = rng.integers(-9, 10, shape).astype(dtype)
    want = block.copy()
    rr = np.repeat(rows, lens_a)
    if add:
        np.add.at(want, (rr, cols), vals)
    else:
        for r, c, v in zip(rr, cols, vals, strict=True):  # the last write wins
            want[r, c] = v
    scatter_csr(block, rows, lens_a, cols, vals, add)
    np.testing.assert_array_equal(block, want)


@settings(max_examples=60, deadline=None)
@given(
    shape=st.tuples(st.integers(1, 40), st.integers(1, 30)),
    n=st.integers(0, 2 * FAR),
    dtype=st.sampled_from(["int32", "float32", "float64"]),
    add=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_scatter_coo_matches_numpy(
    shape: tuple[int, int], n: int, dtype: str, add: bool, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    rows = rng.integers(0, shape[0], n).astype(np.int32)
    cols = rng.integers(0, shape[1], n)
    vals = rng.integers(-5, 6, n).astype(dtype)
    block = rng.integers(-9, 10, shape).astype(dtype)
    want = block.copy()
    if add:
        np.add.at(want, (rows, cols), vals)
    else:
        for r, c, v in zip(rows, cols, vals, strict=True):
            want[r, c] = v
    scatter_coo(block, rows, cols, vals, add)
    np.testing.assert_array_equal(block, want)


def _reference_check(  # type: ignore[no-untyped-def]
    shape: tuple[int, int], dtype: np.dtype, rows, lens, cols, values
) -> type | None:
    """The checks as numpy reductions (what the server did before one compiled pass)."""
    if any(a.dtype.kind not in "iu" for a in (rows, lens, cols)):
        return InvalidArgumentError
    if values.dtype != dtype and not (
        values.dtype.kind in "iu" and np.can_cast(values.dtype, dtype, "safe")
    ):
        return InvalidArgumentError
    if rows.shape != lens.shape or (lens.shape[0] and int(lens.min()) < 0):
        return ShapeMismatchError
    if int(lens.astype(np.int64).sum()) != values.shape[0] or cols.shape[0] != values.shape[0]:
        return ShapeMismatchError
    for a, extent in ((rows, shape[0]), (cols, shape[1])):
        if a.shape[0] and (int(a.min()) < 0 or int(a.max()) >= extent):
            return PSIndexError
    return None


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.integers(-2, 6), max_size=8),
    st.lists(st.integers(-1, 4), max_size=8),
    st.lists(st.integers(-2, 7), max_size=20),
    st.integers(0, 20),
    st.sampled_from(["int8", "uint16", "int32", "int64", "float32", "uint32"]),
    st.sampled_from(["int32", "float32"]),
    st.sampled_from(["int32", "uint16", "float64"]),
)
def test_check_csr_matches_the_numpy_checks(
    rows: list[int],
    lens: list[int],
    cols: list[int],
    n_values: int,
    vtype: str,
    btype: str,
    itype: str,
) -> None:
    """The compiled extents refuse exactly what the numpy reductions refused, with
    the same error class, for any index dtype (narrowed ones too) and empty parts."""
    shape = (5, 6)
    as_idx = {"int32": np.int32, "uint16": np.uint16, "float64": np.float64}[itype]
    r = np.array([x % 65536 if itype == "uint16" else x for x in rows]).astype(as_idx)
    ln = np.array(lens, np.int32)
    c = np.array(cols, np.int32)
    v = np.ones(n_values, vtype)
    want = _reference_check(shape, np.dtype(btype), r, ln, c, v)
    if want is None:
        check_csr(shape, np.dtype(btype), r, ln, c, v)
    else:
        with pytest.raises(want):
            check_csr(shape, np.dtype(btype), r, ln, c, v)
    lo_hi = csr_extents(ln, ln, c)
    if ln.shape[0] and c.shape[0]:
        assert lo_hi[:4] == (ln.min(), ln.max(), ln.min(), ln.sum())
        assert lo_hi[4:] == (c.min(), c.max())
