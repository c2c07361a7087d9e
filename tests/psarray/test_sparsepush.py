"""Sparse increments on the push side (issue 14 section 1): the servers' packed-update
path with reused scratch buffers (``psarray/_scratch.py``), the one-pass radix sort
and the merge into a growing sparse store, each against a NumPy model, and on a
process cluster: exact sums under concurrent pushes, duplicates within a request,
the dtype rules and rejected requests leaving the array unchanged."""

from __future__ import annotations

import threading

import dask
import numpy as np
import pytest
from distributed import Client
from hypothesis import given, settings
from hypothesis import strategies as st

import daskangel as angel
from daskangel._compat import workers_info
from daskangel.errors import CastingError, NonFiniteError, PSIndexError
from daskangel.psarray import _packed as P
from daskangel.psarray._blocks import SparseBlock
from daskangel.psarray._scratch import scratch

pytestmark = pytest.mark.timeout(180)

WIDTH = 10**7  # columns of the test vectors: packed keys need 24 bits (three radix digits)


# -- scratch buffers and the sparse store (no cluster) ---------------------------------


def test_scratch_is_reused_per_slot_and_thread() -> None:
    a = scratch("t-a", 1000, np.int64)
    b = scratch("t-a", 500, np.float32)
    c = scratch("t-b", 1000, np.int64)
    assert a.shape == (1000,) and b.dtype == np.float32 and b.shape == (500,)
    assert np.shares_memory(a, b) and not np.shares_memory(a, c)
    assert a.ctypes.data % 8 == 0
    other: list[np.ndarray] = []
    t = threading.Thread(target=lambda: other.append(scratch("t-a", 1000, np.int64)))
    t.start()
    t.join()
    assert not np.shares_memory(a, other[0])  # another thread, another buffer
    with dask.config.set({"daskangel.server.scratch-bytes": "1KiB"}):
        big = scratch("t-a", 1000, np.int64)  # 8,000 bytes: over the limit, fresh
    assert not np.shares_memory(a, big)


@settings(max_examples=25, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(1, 12_000), st.integers(1, 2**24 - 1), st.integers(0, 2**31 - 1)),
        min_size=1,
        max_size=5,
    ),
    st.sampled_from(["int32", "float32"]),
)
def test_packed_updates_into_a_growing_store_match_numpy(
    batches: list[tuple[int, int, int]], dtype: str
) -> None:
    """Batches of new and repeated keys (some over the radix sort's 4,096-entry
    threshold, key ranges skipping digits or not): the store grows, merges in place
    and keeps every sum, though every batch reuses the same scratch buffers."""
    block = SparseBlock((1, 2**24), np.dtype(dtype))
    model: dict[int, int] = {}
    for n, top, seed in batches:
        rng = np.random.default_rng(seed)
        cols = rng.integers(0, top + 1, n)
        vals = rng.integers(-3, 4, n).astype(dtype)
        _, packed = P.pack_by_bounds(cols, vals.view(np.uint32), np.array([0, 2**24], np.int64))
        block.update_packed(0, packed)
        for c, v in zip(cols.tolist(), vals.tolist(), strict=True):
            model[c] = model.get(c, 0) + int(v)
        keys = np.array(sorted(model), np.int64)
        assert block.n == keys.shape[0]
        np.testing.assert_array_equal(block.keys[: block.n], keys)
        want = np.array([model[k] for k in keys.tolist()], dtype)
        np.testing.assert_array_equal(block.vals[: block.n], want)


# -- on a process cluster ------------------------------------------------------------


def _push(name: str, seed: int, rounds: int) -> int:
    """A task's pushes: ``rounds`` increments of 20,000 keys with duplicates
    (half drawn from 1,000 hot columns), values 1..3; returns the sum pushed."""
    rng = np.random.default_rng(seed)
    arr = angel.PSArray(name)
    total = 0
    for _ in range(rounds):
        cols = np.concatenate([rng.integers(0, WIDTH, 10_000), rng.integers(0, 1_000, 10_000)])
        vals = rng.integers(1, 4, cols.shape[0]).astype(np.int32)
        arr.increment(vals, cols=cols)
        total += int(vals.sum())
    return total


def _model(seeds: list[int], rounds: int) -> tuple[np.ndarray, np.ndarray]:
    """The columns and sums the pushes of ``_push`` add up to."""
    sums: dict[int, int] = {}
    for seed in seeds:
        rng = np.random.default_rng(seed)
        for _ in range(rounds):
            cols = np.concatenate([rng.integers(0, WIDTH, 10_000), rng.integers(0, 1_000, 10_000)])
            vals = rng.integers(1, 4, cols.shape[0]).astype(np.int32)
            u, inv = np.unique(cols, return_inverse=True)
            s = np.bincount(inv, weights=vals).astype(np.int64)
            for c, v in zip(u.tolist(), s.tolist(), strict=True):
                sums[c] = sums.get(c, 0) + v
    keys = np.array(sorted(sums), np.int64)
    return keys, np.array([sums[k] for k in keys.tolist()], np.int64)


def test_concurrent_sparse_pushes_sum_exactly(ps: angel.PSContext, client: Client) -> None:
    """Four tasks on both workers and the client push duplicated keys into one
    sparse int32 vector at once; every key ends with the exact sum."""
    ps.zeros("sv", (WIDTH,), dtype="int32", sparse=True)
    workers = sorted(workers_info(client))
    seeds = [11, 12, 13, 14]
    futs = [
        client.submit(_push, "sv", s, 3, workers=[workers[i % 2]], pure=False)
        for i, s in enumerate(seeds)
    ]
    pushed = _push("sv", 15, 2) + sum(f.result() for f in futs)
    keys, sums = _model(seeds, 3)
    k2, s2 = _model([15], 2)
    all_keys = np.union1d(keys, k2)
    want = np.zeros(all_keys.shape[0], np.int64)
    want[np.searchsorted(all_keys, keys)] += sums
    want[np.searchsorted(all_keys, k2)] += s2
    arr = ps.get_array("sv")
    np.testing.assert_array_equal(arr.get(cols=all_keys), want.astype(np.int32))
    assert int(want.sum()) == pushed
    untouched = np.setdiff1d(np.arange(0, WIDTH, 997), all_keys)
    assert not arr.get(cols=untouched).any()


def test_sparse_push_dtype_rules_and_rejections_change_nothing(ps: angel.PSContext) -> None:
    """Refused requests (a cast the dtype does not allow, a float32 overflow, a NaN,
    a column out of range) leave both servers' blocks as they were; int32 sums wrap
    as NumPy's do; ``on_nonfinite='skip'`` drops only the bad entries."""
    iv = ps.zeros("iv", (WIDTH,), dtype="int32", sparse=True)
    fv = ps.zeros("fv", (WIDTH,), dtype="float32", sparse=True)
    rng = np.random.default_rng(3)
    cols = np.concatenate([rng.integers(0, WIDTH, 30_000), [0, WIDTH - 1]])
    iv.increment(np.ones(cols.shape[0], np.int32), cols=cols)
    fv.increment(np.ones(cols.shape[0], np.float32), cols=cols)
    i_before, f_before = iv.get(cols=cols), fv.get(cols=cols)
    refused = [
        (lambda: iv.increment(np.ones(cols.shape[0], np.int64), cols=cols), CastingError),
        (lambda: iv.increment(np.full(cols.shape[0], 0.5), cols=cols), CastingError),
        (
            lambda: fv.increment(np.full(cols.shape[0], 1e300), cols=cols, casting="same_kind"),
            CastingError,
        ),
        (
            lambda: fv.increment(
                np.r_[np.ones(cols.shape[0] - 1), np.nan].astype(np.float32), cols=cols
            ),
            NonFiniteError,
        ),
        (lambda: iv.increment(np.ones(3, np.int32), cols=[1, 2, WIDTH]), PSIndexError),
        (lambda: fv.increment(np.ones(3, np.float32), cols=[1, -WIDTH - 1, 2]), PSIndexError),
    ]
    for call, err in refused:
        with pytest.raises(err):
            call()
    np.testing.assert_array_equal(iv.get(cols=cols), i_before)
    np.testing.assert_array_equal(fv.get(cols=cols), f_before)
    # int32 sums wrap around as NumPy's int32 adds do
    want = iv.get(cols=[5]).copy()
    with np.errstate(over="ignore"):
        want += np.int32(2**31 - 1)
        want += np.int32(2**31 - 1)
    iv.increment(np.array([2**31 - 1, 2**31 - 1], np.int32), cols=[5, 5])
    np.testing.assert_array_equal(iv.get(cols=[5]), want)
    # skipped non-finite entries: the finite ones of the same request are added
    vals = np.ones(cols.shape[0], np.float32)
    vals[::7] = np.nan
    fv.increment(vals, cols=cols, on_nonfinite="skip")
    u, first, inv = np.unique(cols, return_index=True, return_inverse=True)
    added = np.bincount(inv, weights=np.nan_to_num(vals, nan=0.0))
    np.testing.assert_array_equal(fv.get(cols=u), (f_before[first] + added).astype(np.float32))
