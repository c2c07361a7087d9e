"""The merge buffer and the pull cache store on their own (pure numpy)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from daskangel.psarray._pullcache import UnitStore
from daskangel.psarray._pushbuffer import MergeBuffer, reduce_units


@settings(deadline=None, max_examples=40)
@given(
    n_units=st.integers(1, 50),
    width=st.integers(1, 4),
    batches=st.lists(st.lists(st.integers(0, 49), min_size=0, max_size=30), max_size=8),
    dense_limit=st.sampled_from([0, 10**6]),
)
def test_merge_equals_dense_sum(n_units, width, batches, dense_limit):
    buf = MergeBuffer(n_units, width, np.dtype("int64"), 8, dense_limit, merge_bytes=64)
    want = np.zeros((n_units, width), np.int64)
    rng = np.random.default_rng(len(batches))
    for keys in batches:
        k = np.array([x % n_units for x in keys], np.int64)
        v = rng.integers(-5, 6, (k.shape[0], width))
        np.add.at(want, k, v)
        buf.add(k, v)
    fmt, keys, vals = buf.take()
    got = np.zeros_like(want)
    if fmt == "dense":
        got = vals
    else:
        assert np.all(np.diff(keys) > 0)  # merged: sorted, unique
        got[keys] = vals
    np.testing.assert_array_equal(got, want)


def test_wire_format_follows_density():
    sparse = MergeBuffer(1000, 1, np.dtype("float32"), 16, dense_limit=10**6)
    sparse.add(np.array([1, 5, 5]), np.ones((3, 1), "float32"))
    fmt, keys, vals = sparse.take()
    assert fmt == "sparse" and keys.tolist() == [1, 5] and vals.ravel().tolist() == [1, 2]
    dense = MergeBuffer(1000, 1, np.dtype("float32"), 16, dense_limit=10**6)
    dense.add(np.arange(0, 1000, 3), np.ones((334, 1), "float32"))  # 1/3 of units touched
    fmt, keys, vals = dense.take()
    assert fmt == "dense" and keys is None and vals.shape == (1000, 1) and vals.sum() == 334
    no_dense = MergeBuffer(1000, 1, np.dtype("float32"), 16, dense_limit=0)
    no_dense.add(np.arange(1000), np.ones((1000, 1), "float32"))
    assert no_dense.take()[0] == "sparse"  # dense forbidden (e.g. sparse storage)


def test_switches_to_a_dense_accumulator():
    buf = MergeBuffer(100, 2, np.dtype("float64"), 8, dense_limit=10**6, merge_bytes=1)
    buf.add(np.arange(100), np.ones((100, 2)))
    assert buf.dense is not None  # merged form would exceed the dense array
    buf.add(np.array([3, 3]), np.ones((2, 2)))
    fmt, _, vals = buf.take()
    assert fmt == "dense" and vals[3].tolist() == [3.0, 3.0] and vals.sum() == 204


def test_reduce_units_rows():
    k, v = reduce_units(np.array([4, 1, 4]), np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]))
    assert k.tolist() == [1, 4] and v.tolist() == [[3.0, 4.0], [6.0, 8.0]]


def test_unit_store_keeps_the_fresher_copy_and_evicts_stale_first():
    s = UnitStore(width=1, dtype=np.dtype("float64"))
    s.insert(np.array([1, 2]), np.array([[1.0], [2.0]]), fresh=5)
    s.insert(np.array([2, 3]), np.array([[20.0], [30.0]]), fresh=3)  # older fetch for key 2
    hit, vals = s.lookup(np.array([1, 2, 3]), floor=3)
    assert hit.all() and vals.ravel().tolist() == [1.0, 2.0, 30.0]
    assert s.evict(2 * (16 + 8)) == 1  # the least fresh unit (3) goes
    assert s.keys.tolist() == [1, 2]


@settings(deadline=None, max_examples=40)
@given(
    starts=st.lists(st.integers(0, 40), min_size=1, max_size=8),
    lens=st.lists(st.integers(0, 6), min_size=8, max_size=8),
)
def test_increasing_batches_append_as_merged(starts, lens):
    # batches of increasing keys past the merged ones are appended without a sort;
    # others (overlapping, or behind) take the general merge: the sum is the same
    buf = MergeBuffer(100, 1, np.dtype("int32"), 16, 0, merge_bytes=1)
    want = np.zeros((100, 1), np.int32)
    for i, s in enumerate(starts):
        k = np.arange(s, min(100, s + lens[i]), dtype=np.int64)
        v = np.full((k.shape[0], 1), i + 1, np.int32)
        np.add.at(want, k, v)
        buf.add(k, v)
    fmt, keys, vals = buf.take()
    assert fmt == "sparse" and np.all(np.diff(keys) > 0)
    got = np.zeros_like(want)
    got[keys] = vals
    np.testing.assert_array_equal(got, want)
