"""The compiled kernels of random-row gets (``_rowkernels``) against numpy."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daskangel.psarray._rowkernels import index_scan, plan_rows, put_rows, take_rows

pytestmark = pytest.mark.timeout(120)


@st.composite
def _layouts(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """``(rows, bounds, rank, n_servers)``: up to 40 blocks over up to 4 servers,
    rows drawn with duplicates, in any order, possibly none."""
    sizes = draw(st.lists(st.integers(1, 9), min_size=1, max_size=40))
    bounds = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    n_servers = draw(st.integers(1, 4))
    rank = np.array(
        draw(st.lists(st.integers(0, n_servers - 1), min_size=len(sizes), max_size=len(sizes))),
        np.int64,
    )
    rows = np.array(draw(st.lists(st.integers(0, int(bounds[-1]) - 1), max_size=200)), np.int64)
    return rows, bounds, rank, n_servers


@settings(deadline=None, max_examples=150)
@given(_layouts())
def test_plan_is_a_stable_grouping_by_server_then_block(
    case: tuple[np.ndarray, np.ndarray, np.ndarray, int],
) -> None:
    rows, bounds, rank, n_servers = case
    order, local, counts = plan_rows(rows, bounds, rank, n_servers)
    nb = bounds.shape[0] - 1
    blk = np.searchsorted(bounds, rows, side="right") - 1
    key = rank[blk] * nb + blk
    want = np.argsort(key, kind="stable")
    np.testing.assert_array_equal(order, want)
    assert local.dtype == np.int32
    np.testing.assert_array_equal(local, rows[want] - bounds[blk[want]])
    np.testing.assert_array_equal(counts, np.bincount(key, minlength=n_servers * nb))


@settings(deadline=None, max_examples=100)
@given(st.lists(st.integers(-(2**40), 2**40), min_size=1, max_size=50))
def test_index_scan_is_min_max_and_sortedness(xs: list[int]) -> None:
    a = np.array(xs, np.int64)
    assert index_scan(a) == (a.min(), a.max(), bool(np.all(np.diff(a) >= 0)))


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
def test_take_rows_copies_and_stops_at_a_bad_index(dtype: str) -> None:
    data = np.arange(24).reshape(6, 4).astype(dtype)
    out = np.zeros((4, 4), dtype)
    for rows in (np.array([5, 0, 0, 3], np.int32), np.array([5, 0, 0, 3], np.int64)):
        assert take_rows(data, rows, out) == -1
        np.testing.assert_array_equal(out, data[[5, 0, 0, 3]])
    assert take_rows(data, np.array([1, 6, 2], np.int32), out[:3]) == 1
    assert take_rows(data, np.array([-1], np.int64), out[:1]) == 0
    assert take_rows(data, np.array([], np.int32), out[:0]) == -1


@settings(deadline=None, max_examples=100)
@given(
    st.integers(0, 30),
    st.integers(1, 7),
    st.sampled_from(["float32", "float64", "int32", "int64"]),
    st.randoms(use_true_random=False),
)
def test_put_rows_is_numpys_fancy_assignment(n: int, width: int, dtype: str, rnd: object) -> None:
    """Any permutation prefix of positions, any of the four dtypes, a read-only
    source (a reply received as bytes): the same as ``out[pos] = src``."""
    rng = np.random.default_rng(rnd.randrange(1 << 30))  # type: ignore[attr-defined]
    total = n + int(rng.integers(0, 5))
    pos = rng.permutation(total)[:n].astype(np.int64)
    src = (rng.standard_normal((n, width)) * 100).astype(dtype)
    src.flags.writeable = False
    got = np.full((total, width), -7, dtype)
    want = got.copy()
    put_rows(got, pos, src)
    want[pos] = src
    np.testing.assert_array_equal(got, want)
