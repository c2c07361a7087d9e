"""The compiled kernels of packed sparse increments (``_packkernels``) against NumPy."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daskangel.psarray._packkernels import count_by_bounds, min_max, scatter_few, scatter_packed


def _model(idx: np.ndarray, bits: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """Entries grouped by range in request order, ``(idx - start) << 32 | bits``."""
    out = []
    for g in range(bounds.shape[0] - 1):
        mine = (idx >= bounds[g]) & (idx < bounds[g + 1])
        out.append(((idx[mine] - bounds[g]) << 32) | bits[mine].astype(np.int64))
    return np.concatenate(out)


@settings(max_examples=80, deadline=None)
@given(
    st.integers(0, 400),
    st.integers(1, 4),
    st.sampled_from([1000, 2**31, 2**33]),
    st.integers(0, 2**32 - 1),
)
def test_scatter_few_packs_each_range_in_request_order(
    n: int, n_groups: int, width: int, seed: int
) -> None:
    """At most 4 ranges, local keys up to ``2**31`` (global columns past ``2**32``)."""
    rng = np.random.default_rng(seed)
    cuts = np.unique(rng.integers(1, width, n_groups - 1))
    bounds = np.array([0, *cuts, width], dtype=np.int64)
    if np.diff(bounds).max() > 2**31:  # a local key must fit in 31 bits
        bounds = np.linspace(0, min(width, 2**31 * n_groups), n_groups + 1).astype(np.int64)
    idx = rng.integers(0, bounds[-1], n)
    bits = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    counts = count_by_bounds(idx, bounds)
    offsets = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    few = np.full(n, -1, np.int64)
    scatter_few(idx, bits, bounds, offsets, few)
    general = np.full(n, -1, np.int64)
    scatter_packed(idx, bits, bounds, offsets, general)
    want = _model(idx, bits, bounds)
    np.testing.assert_array_equal(few, want)
    np.testing.assert_array_equal(general, want)
    assert (offsets == np.concatenate([[0], np.cumsum(counts)[:-1]])).all()  # not moved


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(-(2**63), 2**63 - 1), min_size=1, max_size=200))
def test_min_max_is_numpys_min_and_max(values: list[int]) -> None:
    a = np.array(values, dtype=np.int64)
    assert min_max(a) == (a.min(), a.max())


@pytest.mark.parametrize("n", [1, 7, 4096, 100_003])
def test_min_max_of_packed_entries_gives_the_key_range(n: int) -> None:
    rng = np.random.default_rng(n)
    keys = rng.integers(0, 2**31, n)
    packed = (keys << 32) | rng.integers(0, 2**32, n)
    lo, hi = min_max(packed)
    assert (int(lo) >> 32, int(hi) >> 32) == (keys.min(), keys.max())
