"""A CSR increment packed in one pass (``psarray/_csrpack.py``) and its frame sent as
bare bytes after the request (``_recv.send_all_recv_into(raw=...)``): the kernels
against numpy, then on a process cluster (2 workers) exact sums from concurrent
pushers, integer values widened when they do not fit the first guess, every
refusal leaving the blocks unchanged, a fenced run refused, with the raw frames and
with follow messages.
"""

from __future__ import annotations

import concurrent.futures
import itertools
from dataclasses import replace
from typing import Any

import dask
import numpy as np
import pytest
import scipy.sparse as sp
from distributed import Client
from hypothesis import given, settings
from hypothesis import strategies as st

import daskangel as angel
from daskangel._compat import workers_info
from daskangel._recv import send_all_recv_into
from daskangel._wire import raise_if_error
from daskangel.errors import InvalidArgumentError, NonFiniteError, PSIndexError, RolledBackError
from daskangel.psarray._csrpack import (
    pack_block,
    pack_block_float,
    pack_csr,
    pack_share,
    pack_share_float,
    plan_shares,
)
from daskangel.psarray._rowpush import push_csr
from daskangel.psarray._taskclock import current_clock, current_fence, set_task_fence

pytestmark = pytest.mark.timeout(240)


# -- the kernels alone -------------------------------------------------------------


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.one_of(st.integers(0, 4), st.just(70_000)), min_size=1, max_size=120),
    st.lists(st.integers(0, 120), max_size=6),
    st.integers(0, 2**31 - 1),
    st.sampled_from([np.int32, np.int64]),
    st.booleans(),
    st.booleans(),
)
def test_plan_shares_lays_out_each_servers_touched_blocks(
    lens: list[int], cuts: list[int], seed: int, itype: type, narrow: bool, malformed: bool
) -> None:
    """Against numpy: status 1 for a negative row length, 2 for a touched block
    that may not be packed (owner -1); else every touched block once, share by
    share, with its touched rows and entries, its fields 64-byte aligned and
    disjoint inside its share's range, and 2-byte counts only when narrowed and
    every row is shorter than 2**16."""
    n = len(lens)
    rng = np.random.default_rng(seed)
    indptr = np.concatenate([[0], np.cumsum(lens)]).astype(itype)
    if malformed and n > 1:
        i = int(rng.integers(1, n))
        indptr[i] = indptr[i + 1] + 1  # a row of negative length
    bounds = np.unique(np.array([0, n, *[min(c, n) for c in cuts]], np.int64))
    n_shares = 3
    owner = rng.integers(-1 if rng.random() < 0.3 else 0, n_shares, bounds.size - 1)
    sizes = np.array([2, 0, 2, 1], np.int64)  # (the counts' size is the kernel's choice)
    status, blocks, nrow, keys, offs, starts, len_size = plan_shares(
        indptr, bounds, owner, n_shares, sizes, narrow
    )
    ln = np.diff(indptr.astype(np.int64))
    rows = np.array([(ln[bounds[g] : bounds[g + 1]] != 0).sum() for g in range(bounds.size - 1)])
    touched = np.flatnonzero(rows)
    if ln.min(initial=0) < 0:
        assert status == 1
        return
    if (owner[touched] < 0).any():
        assert status == 2
        return
    assert status == 0
    assert len_size == (2 if narrow and ln.max(initial=0) < 2**16 else 4)
    want = sorted(touched.tolist(), key=lambda g: (owner[g], g))
    assert blocks.tolist() == want
    assert nrow.tolist() == rows[want].tolist()
    assert keys.tolist() == [int(indptr[bounds[g + 1]] - indptr[bounds[g]]) for g in want]
    assert (offs % 64 == 0).all() and (starts % 64 == 0).all() and (np.diff(starts) >= 0).all()
    items = [sizes[0], len_size, sizes[2], sizes[3]]
    spans = []
    for i, g in enumerate(want):
        for f in range(4):
            lo = int(offs[i, f])
            spans.append((lo, lo + int((nrow if f < 2 else keys)[i]) * int(items[f])))
            assert starts[owner[g]] <= lo and spans[-1][1] <= starts[owner[g] + 1]
    spans.sort()
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans))


def _entries(rng: np.random.Generator, n: int, val_t: str) -> tuple[np.ndarray, np.ndarray, bool]:
    """``n`` random columns (< 200) and values: float32 normals for a float wire
    type ``val_t``, int32 in [-100, 100) otherwise; and whether they are floats."""
    cols = rng.integers(0, 200, n).astype(np.int32)
    floating = val_t[0] == "f"
    data = (rng.standard_normal(n) if floating else rng.integers(-100, 100, n)).astype(
        np.float32 if floating else np.int32
    )
    return cols, data, floating


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(0, 5), min_size=2, max_size=80),
    st.integers(0, 2**31 - 1),
    st.sampled_from(["i1", "i2", "i4", "f4", "f8"]),
    st.sampled_from(["u1", "u2", "i4"]),
)
def test_pack_block_copies_one_blocks_rows_narrowed(
    lens: list[int], seed: int, val_t: str, col_t: str
) -> None:
    """One block (rows ``[r0, r1)``) against numpy: local rows and counts of its
    touched rows, its columns and values cast to the wire types, their extents
    (integers) or finiteness (floats, a NaN or inf found wherever it is)."""
    n = len(lens)
    rng = np.random.default_rng(seed)
    indptr = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    r0, r1 = sorted(int(x) for x in rng.integers(0, n + 1, 2))
    k0, k1 = int(indptr[r0]), int(indptr[r1])
    if k0 == k1:
        return  # a block without entries is never packed
    cols, data, floating = _entries(rng, int(indptr[-1]), val_t)
    if floating and rng.random() < 0.5:
        data[int(rng.integers(k0, k1))] = [np.nan, np.inf, -np.inf][int(rng.integers(0, 3))]
    ln = np.diff(indptr)[r0:r1]
    touched = np.flatnonzero(ln)
    out = [
        np.empty(touched.size, "u2"), np.empty(touched.size, "u2"),
        np.empty(k1 - k0, col_t), np.empty(k1 - k0, val_t),
    ]  # fmt: skip
    if floating:
        c_lo, c_hi, ok = pack_block_float(indptr, cols, data, r0, r1, *out)
        assert ok == bool(np.isfinite(data[k0:k1]).all())
    else:
        c_lo, c_hi, v_lo, v_hi = pack_block(indptr, cols, data, r0, r1, *out)
        assert (v_lo, v_hi) == (data[k0:k1].min(), data[k0:k1].max())
    assert (c_lo, c_hi) == (cols[k0:k1].min(), cols[k0:k1].max())
    np.testing.assert_array_equal(out[0], touched)
    np.testing.assert_array_equal(out[1], ln[touched])
    np.testing.assert_array_equal(out[2], cols[k0:k1].astype(col_t))
    np.testing.assert_array_equal(out[3], data[k0:k1].astype(val_t))


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(0, 4), min_size=2, max_size=120),
    st.lists(st.integers(0, 120), max_size=8),
    st.integers(0, 2**31 - 1),
    st.sampled_from(["i1", "i4", "f4"]),
    st.sampled_from(["u2", "i4"]),
)
def test_pack_share_writes_each_block_as_pack_block_does(
    lens: list[int], cuts: list[int], seed: int, val_t: str, row_t: str
) -> None:
    """Some touched blocks (any subset, in order), laid out by :func:`plan_shares`
    as one share: :func:`pack_share` writes there what :func:`pack_block` writes
    for each block alone; the extents (or finiteness) are those over the share."""
    n = len(lens)
    rng = np.random.default_rng(seed)
    indptr = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    bounds = np.unique(np.array([0, n, *[min(c, n) for c in cuts]], np.int64))
    ln = np.diff(indptr)
    touched = [g for g in range(bounds.size - 1) if ln[bounds[g] : bounds[g + 1]].any()]
    if not touched:
        return  # nothing touched: pack_csr sends nothing
    chosen = rng.choice(touched, int(rng.integers(1, len(touched) + 1)), replace=False)
    owner = np.full(bounds.size - 1, 1, np.int64)
    owner[chosen] = 0  # share 0: the chosen blocks; share 1: the rest
    cols, data, floating = _entries(rng, int(indptr[-1]), val_t)
    if floating and rng.random() < 0.5:
        data[int(rng.integers(0, cols.size))] = np.nan
    dts = [np.dtype(t) for t in (row_t, "u2", "i2", val_t)]
    sizes = np.array([d.itemsize for d in dts], np.int64)
    status, blocks, nrow, keys, offs, starts, _ = plan_shares(indptr, bounds, owner, 2, sizes, True)
    assert status == 0
    k = len(chosen)  # share 0's blocks come first
    blocks, nrow, keys, offs = blocks[:k], nrow[:k], keys[:k], offs[:k]
    frame = np.zeros(int(starts[1]), np.uint8)
    kernel = pack_share_float if floating else pack_share
    got = kernel(
        indptr, cols, data, bounds, blocks, nrow, keys, offs, *(frame.view(d) for d in dts)
    )
    for i, g in enumerate(blocks.tolist()):
        r0, r1 = int(bounds[g]), int(bounds[g + 1])
        assert nrow[i] == np.count_nonzero(ln[r0:r1]) and keys[i] == indptr[r1] - indptr[r0]
        want = [np.empty((nrow if f < 2 else keys)[i], d) for f, d in enumerate(dts)]
        (pack_block_float if floating else pack_block)(indptr, cols, data, r0, r1, *want)
        for f, d in enumerate(dts):
            have = frame[offs[i, f] : offs[i, f] + want[f].size * d.itemsize].view(d)
            np.testing.assert_array_equal(have, want[f])
    share = np.concatenate([np.arange(indptr[bounds[g]], indptr[bounds[g + 1]]) for g in blocks])
    assert (got[0], got[1]) == (cols[share].min(), cols[share].max())
    if floating:
        assert got[2] == bool(np.isfinite(data[share]).all())
    else:
        assert (got[2], got[3]) == (data[share].min(), data[share].max())


# -- on a process cluster ----------------------------------------------------------

SHAPE = (3_000, 200)
NNZ = 40  # a 2,500-row push: ~400 KB a server, above follow-bytes


def _csr(seed: int, dtype: str, lo: int = 1, hi: int = 4) -> sp.csr_matrix:
    rng = np.random.default_rng(seed)
    rows = np.sort(rng.choice(SHAPE[0], 2_500, replace=False))
    indptr = np.zeros(SHAPE[0] + 1, np.int64)
    indptr[rows + 1] = NNZ
    cols = rng.integers(0, SHAPE[1], 2_500 * NNZ)  # repeats within rows: summed
    vals = rng.integers(lo, hi, cols.size).astype(dtype)
    return sp.csr_matrix((vals, cols, np.cumsum(indptr)), shape=SHAPE)


def _pushes(a: angel.PSArray) -> int:
    """The lean ``push`` requests the array's servers counted so far."""
    return sum(int(s["ops"].get("push", [0])[0]) for s in a._binding.run(a._stats))


def _push(name: str, seeds: list[int], dtype: str) -> None:
    arr = angel.PSArray(name)
    for s in seeds:
        arr.increment(_csr(s, dtype))


@pytest.fixture(scope="module")
def ps(client: Client) -> Any:
    with angel.PSContext(client) as ctx:
        yield ctx


@pytest.mark.parametrize("raw", [True, False])
def test_packed_pushes_from_threads_and_tasks_sum_exactly(
    ps: angel.PSContext, client: Client, raw: bool
) -> None:
    """Three client threads (packed in one pass, a lean request a server) and two
    tasks (each with a server in its own process: planned) push at once: exact
    sums, and two lean requests for each of the client's pushes."""
    name = f"packed-{raw}"
    arr = ps.zeros(name, SHAPE, dtype="int32", block_shape=(400, SHAPE[1]))
    workers = sorted(workers_info(client))
    before = _pushes(arr)
    with dask.config.set({"daskangel.client.raw-follow": raw}):
        futs = [
            client.submit(_push, name, [10 + i, 20 + i], "int32", workers=[w], pure=False)
            for i, w in enumerate(workers)
        ]
        with concurrent.futures.ThreadPoolExecutor(3) as ex:
            list(ex.map(lambda t: _push(name, [30 + t, 40 + t], "int32"), range(3)))
        for f in futs:
            f.result()
    seeds = [10, 20, 11, 21, 30, 40, 31, 41, 32, 42]
    want = sum(_csr(s, "int32").toarray().astype(np.int64) for s in seeds)
    np.testing.assert_array_equal(arr.get(), np.asarray(want).astype(np.int32))
    assert _pushes(arr) - before >= 6 * 2  # the client's six pushes, both servers each


def test_integer_values_are_widened_when_they_do_not_fit(ps: angel.PSContext) -> None:
    """Counts that fit int8, then values needing int16, then int32 (the first guess
    widened and the pass made again), into int32 and int64 arrays: exact."""
    for dtype in ("int32", "int64"):
        arr = ps.zeros(f"wide-{dtype}", SHAPE, dtype=dtype, block_shape=(400, SHAPE[1]))
        want = np.zeros(SHAPE, np.int64)
        for seed, (lo, hi) in enumerate([(-1, 2), (-300, 300), (0, 200), (-(2**20), 2**20)]):
            X = _csr(seed, dtype, lo, hi)
            arr.increment(X)
            want += X.toarray()
        np.testing.assert_array_equal(arr.get(), want.astype(dtype))


def test_refused_packed_pushes_change_nothing(ps: angel.PSContext) -> None:
    """A NaN, an infinity, a column out of range: refused with the planner's own
    errors (the one-pass packing hands such input back), both servers' blocks
    unchanged; a float64 matrix into float32 goes the planned way and is refused."""
    fv = ps.zeros("refused", SHAPE, dtype="float32", block_shape=(400, SHAPE[1]))
    X = _csr(3, "float32")
    fv.increment(X)
    before = fv.get()
    for bad, err in [(np.nan, NonFiniteError), (np.inf, NonFiniteError)]:
        Y = X.copy()
        Y.data[-7] = bad
        with pytest.raises(err):
            fv.increment(Y)
    Y = X.copy()
    Y.indices[5] = SHAPE[1]
    with pytest.raises(PSIndexError, match="column 200 out of range"):
        fv.increment(Y)
    np.testing.assert_array_equal(fv.get(), before)
    fv.increment(X.astype(np.float64), casting="same_kind")  # planned: cast then sent
    np.testing.assert_array_equal(fv.get(), before + X.toarray())


def _fence(job: str, epoch: int, dask_worker: Any = None) -> bool:
    for srv in dask_worker.plugins["daskangel-ps"].servers.values():
        srv.dispatch("fence", job=job, epoch=epoch)
    return True


def test_packed_push_of_an_abandoned_run_is_refused(ps: angel.PSContext, client: Client) -> None:
    """With every server fenced at run 2 of a job, a packed push of its run 1 is
    refused (RolledBackError) and changes nothing; run 2's push applies."""
    arr = ps.zeros("fenced", SHAPE, dtype="int32", block_shape=(400, SHAPE[1]))
    X = _csr(4, "int32")
    client.run(_fence, "job-x", 2)
    try:
        set_task_fence("job-x", 1)
        with pytest.raises(RolledBackError):
            arr.increment(X)
        np.testing.assert_array_equal(arr.get(), np.zeros(SHAPE, np.int32))
        set_task_fence("job-x", 2)
        arr.increment(X)
    finally:
        set_task_fence(None)
    np.testing.assert_array_equal(arr.get(), X.toarray())


def test_packed_coo_pushes_sum_exactly_and_bad_coordinates_change_nothing(
    ps: angel.PSContext,
) -> None:
    """Unsorted COO increments with repeated coordinates (LDA's sweeps), sorted into
    rows and packed in one pass from three client threads at once: exact sums, a
    lean request a server each; a row or column out of range refused by the
    planner's own error, nothing written."""
    arr = ps.zeros("coo", SHAPE, dtype="int32", block_shape=(400, SHAPE[1]))
    coos = []
    for seed in range(6):
        X = _csr(50 + seed, "int32").tocoo()
        perm = np.random.default_rng(seed).permutation(X.nnz)
        coos.append(sp.coo_matrix((X.data[perm], (X.row[perm], X.col[perm])), shape=SHAPE))
    before = _pushes(arr)
    with concurrent.futures.ThreadPoolExecutor(3) as ex:
        list(ex.map(arr.increment, coos))
    want = sum(c.toarray().astype(np.int64) for c in coos)
    np.testing.assert_array_equal(arr.get(), np.asarray(want).astype(np.int32))
    assert _pushes(arr) - before == 6 * 2
    got = arr.get()
    for r, c in [(SHAPE[0], 3), (5, SHAPE[1]), (-1, 3)]:
        bad = coos[0].copy()
        bad.row, bad.col = bad.row.copy(), bad.col.copy()
        bad.row[7], bad.col[7] = r, c
        with pytest.raises(PSIndexError):
            arr.increment(bad)
    np.testing.assert_array_equal(arr.get(), got)


def test_packed_push_on_a_stale_layout_goes_the_general_way_once(ps: angel.PSContext) -> None:
    """A packed push sent with a stale layout (every block's server swapped): the
    servers refuse the blocks they do not hold, nothing is written, and the
    general path (the shares' frames as its parts) applies it once."""
    arr = ps.zeros("stale", SHAPE, dtype="int32", block_shape=(400, SHAPE[1]))
    m = arr.meta
    swapped = replace(m, servers=tuple(reversed(m.servers)))
    assert swapped.servers != m.servers
    X = _csr(9, "int32")
    b = arr._binding
    extra = {"add": True, "tag": b.next_tag(), "clock": current_clock(), "fence": current_fence()}
    fut = push_csr(b, "stale", swapped, X, extra)
    assert fut is not None
    fut.result(timeout=60)
    np.testing.assert_array_equal(arr.get(), X.toarray())
    arr.increment(X)
    np.testing.assert_array_equal(arr.get(), 2 * X.toarray())


def test_raw_push_with_an_unknown_field_is_refused_and_its_comm_stays_in_step(
    ps: angel.PSContext,
) -> None:
    """A lean request whose frame follows as bare bytes but carries a field the
    handler does not know: refused (InvalidArgumentError) after the bytes were
    read, nothing written; the next pushes on the same pooled comms apply."""
    arr = ps.zeros("unknown", SHAPE, dtype="int32", block_shape=(400, SHAPE[1]))
    X = _csr(8, "int32")
    b = arr._binding
    packed = pack_csr(arr.meta, X, None, b.send_buffer)
    assert packed is not None
    s, parts, follow, frame = packed[0][:4]
    msg = {"server": s.index, "array": "unknown", "parts": parts, "follow": follow,
           "tag": b.next_tag(), "uid": arr.meta.uid, "surprise": 1}  # fmt: skip

    async def send() -> list[Any]:
        pool = await b.pool()
        return await send_all_recv_into(
            pool, [(s.address, "daskangel_push", msg, [], [])], raw=[[frame]]
        )

    (reply,) = b.run(send)
    with pytest.raises(InvalidArgumentError, match="surprise"):
        raise_if_error(reply)
    np.testing.assert_array_equal(arr.get(), np.zeros(SHAPE, np.int32))
    arr.increment(X)
    arr.increment(X)
    np.testing.assert_array_equal(arr.get(), 2 * X.toarray())
