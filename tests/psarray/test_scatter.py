"""The prefetching scatter kernels (``psarray/_scatter.py``) against NumPy: any mix
of row lengths (empty rows, rows shorter and longer than the prefetch distance),
duplicate entries, adds and sets, and the dtypes blocks hold."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daskangel.psarray._scatter import AHEAD, scatter_coo, scatter_csr

pytestmark = pytest.mark.timeout(120)


@settings(max_examples=60, deadline=None)
@given(
    shape=st.tuples(st.integers(1, 40), st.integers(1, 30)),
    lens=st.lists(st.integers(0, 2 * AHEAD), min_size=0, max_size=25),
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
    n=st.integers(0, 4 * AHEAD),
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
