"""Random-row gets in one request and one reply frame per server (``_rowget``,
the server's ``get_rows``), on the package's process cluster."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import dask
import numpy as np
import pytest
from distributed import get_worker

import daskangel as angel
from daskangel.errors import InvalidArgumentError, PSIndexError
from daskangel.psarray._initspec import InitSpec
from daskangel.psarray._meta import ArrayMeta
from daskangel.psarray._recvpool import ReceivePool
from daskangel.psarray._rowplan import plan_rows, unsorted_rows
from daskangel.psarray._server import PSServer

pytestmark = pytest.mark.timeout(180)


def _ops(a: angel.PSArray) -> dict[str, int]:
    """Calls of each server op on the array's servers so far."""
    out: dict[str, int] = {}
    for st in a._binding.run(a._stats):
        for op, counters in st["ops"].items():
            out[op] = out.get(op, 0) + int(counters[0])
    return out


def _calls(a: angel.PSArray, fn: Any) -> dict[str, int]:
    """The read calls (``get``, ``get_rows``) the servers answered during ``fn()``."""
    before = _ops(a)
    fn()
    after = _ops(a)
    return {
        op: n - before.get(op, 0)
        for op, n in after.items()
        if op in ("get", "get_rows") and n != before.get(op, 0)
    }


@pytest.mark.parametrize("dtype", ["int32", "float32", "float64", "int64"])
def test_random_rows_one_request_a_server(ps: angel.PSContext, dtype: str) -> None:
    """Unsorted rows, with duplicates, of every dtype come back in request order,
    from one ``get_rows`` request to each touched server and nothing else."""
    shape = (90, 7)
    ref = (np.arange(shape[0] * shape[1]) % 251).reshape(shape).astype(dtype)
    a = ps.zeros(f"rg-{dtype}", shape, dtype=dtype, block_shape=(11, 7))  # 9 blocks
    a.set(ref)
    assert len({b.server for b in a.blocks}) == 2
    rng = np.random.default_rng(0)
    for idx in (rng.permutation(90), rng.integers(0, 90, 200), [5, 5, 5, 0], np.array([89, 0])):
        got: list[np.ndarray] = []
        calls = _calls(
            a,
            lambda idx=idx, got=got: got.extend([a.get(rows=idx), a.get_async(rows=idx).result()]),
        )
        for g in got:
            assert g.dtype == ref.dtype and g.shape == (len(idx), 7)
            np.testing.assert_array_equal(g, ref[np.asarray(idx)])
        servers = {a.blocks[b].server for b in np.unique(np.asarray(idx) // 11)}
        assert calls == {"get_rows": 2 * len(servers)}, calls
    ps.drop(f"rg-{dtype}")


@pytest.mark.parametrize("batched", ["0", "1GiB"])
def test_requests_batched_in_one_coroutine_or_one_task_a_server(
    ps: angel.PSContext, batched: str
) -> None:
    """Whether a small get writes every request then reads the replies in turn
    (``batched-reply-bytes`` above its replies) or sends one task a server, the
    rows come back in request order, duplicates and all, in every dtype; empty
    and one-row requests take the general path."""
    rng = np.random.default_rng(11)
    with dask.config.set({"daskangel.client.batched-reply-bytes": batched}):
        for dtype in ("int32", "float64"):
            ref = rng.integers(0, 1000, (300, 9)).astype(dtype)
            a = ps.zeros(f"rb-{dtype}", ref.shape, dtype=dtype, block_shape=(40, 9))
            a.set(ref)
            for idx in (rng.integers(0, 300, 500), rng.permutation(300)[:7], [299, 0, 299]):
                got = a.get(rows=idx)
                assert got.dtype == ref.dtype
                np.testing.assert_array_equal(got, ref[np.asarray(idx)])
                np.testing.assert_array_equal(a.get_async(rows=idx).result(), ref[idx])
            assert a.get(rows=[]).shape == (0, 9)
            np.testing.assert_array_equal(a.get(rows=[17]), ref[[17]])
            ps.drop(f"rb-{dtype}")


def test_what_the_fast_path_leaves_alone(ps: angel.PSContext) -> None:
    """Empty, single-row, sorted, masked, column-selecting and sparse requests keep
    the general path (and their answers)."""
    ref = np.arange(40 * 6, dtype="float32").reshape(40, 6)
    a = ps.zeros("rg-left", ref.shape, dtype="float32", block_shape=(7, 6))
    a.set(ref)
    m = a.meta
    assert unsorted_rows(m, [3, 1], None) is not None
    for rows, cols in (([], None), ([3], None), ([1, 3, 3, 9], None), ([3, 1], 2), (5, None)):
        assert unsorted_rows(m, rows, cols) is None
        np.testing.assert_array_equal(
            a.get(rows=rows, cols=cols), ref[rows] if cols is None else ref[rows, cols]
        )
    assert a.get(rows=[]).shape == (0, 6)
    mask = np.zeros(40, bool)
    mask[[30, 2]] = True
    assert unsorted_rows(m, mask, None) is None  # a mask selects rows in order
    np.testing.assert_array_equal(a.get(rows=mask), ref[mask])
    z = ps.zeros("rg-sparse", (40, 6), dtype="float32", sparse=True)
    assert unsorted_rows(z.meta, [3, 1], None) is None
    np.testing.assert_array_equal(z.get(rows=[3, 1]), np.zeros((2, 6), "float32"))
    with pytest.raises(PSIndexError):
        a.get(rows=[3, 40])


@pytest.mark.parametrize("on_loop", ["0", "1GiB"])
def test_replies_scattered_on_the_loop_or_in_the_caller(ps: angel.PSContext, on_loop: str) -> None:
    """Replies read into the scratch buffer (large) or received as usual (small)
    are put in order on the event loop or handed to the caller's thread alike;
    results still held are never overwritten by later gets."""
    ref = np.arange(4000 * 40, dtype="float64").reshape(4000, 40)  # 320 bytes a row
    a = ps.zeros("rg-big", ref.shape, dtype="float64", block_shape=(700, 40))
    a.set(ref)
    rng = np.random.default_rng(5)
    with dask.config.set({"daskangel.client.loop-scatter-bytes": on_loop}):
        idx = [rng.integers(0, 4000, n) for n in (3000, 3000, 50, 3000)]
        got = [a.get(rows=i) for i in idx] + [a.get_async(rows=idx[0]).result()]
        for i, g in zip(idx + idx[:1], got, strict=True):
            np.testing.assert_array_equal(g, ref[i])
        assert not any(np.shares_memory(x, y) for k, x in enumerate(got) for y in got[k + 1 :])
    ps.drop("rg-big")


def test_a_stale_layout_falls_back_to_the_general_path(ps: angel.PSContext) -> None:
    """A request sent to the wrong servers (a layout that changed) is answered by
    the general path, which refreshes the layout (an older generation here)."""
    ref = np.arange(60 * 5, dtype="int32").reshape(60, 5)
    a = ps.zeros("rg-stale", ref.shape, dtype="int32", block_shape=(10, 5))
    a.set(ref)
    b = a._binding
    m = a.meta
    swapped = {
        s: t for s, t in zip(sorted(set(m.servers)), sorted(set(m.servers))[::-1], strict=True)
    }
    b.metas["rg-stale"] = m.with_servers(tuple(swapped[s] for s in m.servers), m.generation - 1)
    idx = np.random.default_rng(2).permutation(60)
    np.testing.assert_array_equal(a.get(rows=idx), ref[idx])
    assert b.metas["rg-stale"].servers == m.servers  # refreshed
    b.metas["rg-stale"] = m.with_servers(tuple(swapped[s] for s in m.servers), m.generation - 1)
    np.testing.assert_array_equal(a.get_async(rows=idx).result(), ref[idx])


def _in_task(name: str, idx: np.ndarray) -> tuple[np.ndarray, str]:
    return angel.PSArray(name).get(rows=idx), get_worker().address


def test_task_on_a_server_worker_reads_its_own_server_directly(
    ps: angel.PSContext,
) -> None:
    """From a task on a worker that holds one of the servers: that server's share
    is a local call (no comm), the other's a request."""
    ref = np.arange(500 * 30, dtype="float32").reshape(500, 30)
    a = ps.zeros("rg-task", ref.shape, dtype="float32", block_shape=(100, 30))
    a.set(ref)
    idx = np.random.default_rng(7).integers(0, 500, 2000)
    for w in sorted({b.server.address for b in a.blocks}):
        got, where = ps.client.submit(_in_task, "rg-task", idx, workers=[w], pure=False).result()
        assert where == w
        np.testing.assert_array_equal(got, ref[idx])


def test_a_recreated_name_is_planned_with_its_new_layout(ps: angel.PSContext) -> None:
    """What a random-row get keeps of an array's metadata between calls (row
    bounds, servers, width) follows the metadata: after the name is dropped and
    created again with another width, dtype and blocks, gets from the driver and
    from tasks on every worker read the new array."""
    rng = np.random.default_rng(3)
    old = rng.standard_normal((60, 4)).astype("float32")
    a = ps.zeros("rg-again", old.shape, dtype="float32", block_shape=(10, 4))
    a.set(old)
    idx = np.array([59, 3, 3, 21, 40])
    np.testing.assert_array_equal(a.get(rows=idx), old[idx])
    workers = sorted({b.server.address for b in a.blocks})
    for w in workers:
        np.testing.assert_array_equal(
            ps.client.submit(_in_task, "rg-again", idx, workers=[w], pure=False).result()[0],
            old[idx],
        )
    ps.drop("rg-again")
    new = rng.integers(-50, 50, (80, 9)).astype("int64")
    b = ps.zeros("rg-again", new.shape, dtype="int64", block_shape=(30, 9))
    b.set(new)
    idx = np.array([79, 0, 45, 45, 31, 2])
    np.testing.assert_array_equal(b.get(rows=idx), new[idx])
    for w in workers:
        got = ps.client.submit(_in_task, "rg-again", idx, workers=[w], pure=False).result()[0]
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got, new[idx])
    ps.drop("rg-again")


def test_plan_groups_rows_by_server_then_block() -> None:
    from daskangel.psarray._layout import Layout
    from daskangel.psarray._meta import ServerId

    s0, s1 = ServerId("tcp://a", 0), ServerId("tcp://b", 0)
    lay = Layout((12, 3), (0, 3, 6, 9, 12), "range", (0, 3), 1)
    m = ArrayMeta(
        "w", (12, 3), 2, np.dtype("int32"), False, lay, InitSpec(), servers=(s1, s0, s1, s0)
    )
    rows = np.array([11, 0, 4, 4, 7, 2, 10, 5])
    p = plan_rows(m, rows)
    assert p is not None
    assert [(s, blocks, counts, run) for s, blocks, counts, run in p.requests] == [
        (s0, [1, 3], [3, 2], (0, 5)),
        (s1, [0, 2], [2, 1], (5, 8)),
    ]
    # each run keeps the request order; local rows are block-relative
    np.testing.assert_array_equal(rows[p.order], [4, 4, 5, 11, 10, 0, 2, 7])
    np.testing.assert_array_equal(p.local, [1, 1, 2, 2, 1, 0, 2, 1])
    lost = ArrayMeta(
        "w",
        (12, 3),
        2,
        np.dtype("int32"),
        False,
        lay,
        InitSpec(),
        servers=(s1, s0, s1, s0),
        lost=frozenset({2}),
    )
    assert plan_rows(lost, rows) is None  # the general path waits for the recovery
    assert plan_rows(lost, np.array([0, 4])) is not None


def test_server_get_rows_checks_its_request() -> None:
    s = PSServer("local", 0)
    spec = {
        "kind": "dense",
        "dtype": "float32",
        "init": InitSpec().to_dict(),
        "col0": 0,
        "n_cols": 3,
    }
    s.dispatch(
        "create",
        array="w",
        blocks=[
            {"block": 0, **spec, "shape": (4, 3), "row0": 0},
            {"block": 2, **spec, "shape": (4, 3), "row0": 8},
        ],
    )
    s.dispatch(
        "create",
        array="z",
        blocks=[{"block": 0, **spec, "kind": "sparse", "shape": (4, 3), "row0": 0}],
    )
    for blk, base in ((0, 0), (2, 100)):
        vals = base + np.arange(12, dtype="float32").reshape(4, 3)
        s.dispatch(
            "update",
            array="w",
            add=False,
            parts=[{"block": blk, "rows": None, "cols": None, "values": vals}],
        )
    got = s.dispatch(
        "get_rows", array="w", rows=np.array([3, 0, 0, 1], np.int32), blocks=[0, 2], counts=[2, 2]
    )
    np.testing.assert_array_equal(got[:, 0], [9, 0, 100, 103])
    with pytest.raises(PSIndexError):
        s.dispatch("get_rows", array="w", rows=np.array([4], np.int32), blocks=[0], counts=[1])
    with pytest.raises(InvalidArgumentError):
        s.dispatch("get_rows", array="w", rows=np.array([1, 2], np.int32), blocks=[0], counts=[1])
    with pytest.raises(InvalidArgumentError):
        s.dispatch("get_rows", array="z", rows=[1], blocks=[0], counts=[1])
    with pytest.raises(angel.errors.StaleLayoutError):
        s.dispatch("get_rows", array="w", rows=[1], blocks=[1], counts=[1])
    with pytest.raises(InvalidArgumentError):
        s.dispatch("get_rows", array="w", rows=np.array([], np.int32), blocks=[], counts=[])
    # replies from reply-frame-bytes on are gathered into the reply pool, smaller
    # ones into new arrays; the rows are the same either way
    s.reply_pool = ReceivePool(1 << 20)
    rows = np.array([3, 0, 0, 1], np.int32)
    for limit, in_pool in (("48B", True), ("49B", False)):
        with dask.config.set({"daskangel.server.reply-frame-bytes": limit}):
            got = s.dispatch("get_rows", array="w", rows=rows, blocks=[0, 2], counts=[2, 2])
        np.testing.assert_array_equal(got[:, 0], [9, 0, 100, 103])
        assert any(got.base is b for b in s.reply_pool._bufs) is in_pool


def test_server_is_idle_only_without_lock_holders_or_queued_writes() -> None:
    s = PSServer("local", 0)
    assert s.idle()

    async def go() -> None:
        async with s.locked():
            assert not s.idle()
        assert s.idle()

    asyncio.run(go())
    s.behind = True
    assert not s.idle()


def test_reads_see_whole_increments_while_others_write(ps: angel.PSContext) -> None:
    """Random-row reads answered at once by idle servers, or queued behind writes
    (applied behind their replies, or holding the lock), each see every increment
    of their server whole: the rows one server returns agree."""
    a = ps.zeros("rg-busy", (4000, 64), dtype="float64", block_shape=(500, 64))
    owner = np.repeat([sorted({b.server for b in a.blocks}).index(b.server) for b in a.blocks], 500)
    rng = np.random.default_rng(9)
    ones = np.ones((4000, 64))  # 2 MB: applied behind the reply

    def write() -> None:
        for _ in range(30):
            a.increment(ones)

    with ThreadPoolExecutor(1) as ex:
        fut = ex.submit(write)
        n = 0
        while not fut.done() or n < 5:
            idx = rng.integers(0, 4000, 3000)
            got = a.get(rows=idx)
            assert (got == got[:, :1]).all()
            for s in (0, 1):
                vals = got[owner[idx] == s, 0]
                assert vals.shape[0] == 0 or (vals == vals[0]).all()
            n += 1
        fut.result()
    np.testing.assert_array_equal(a.get(rows=[3999, 0]), 30)


def test_get_iter_of_random_rows_is_one_get_a_chunk(ps: angel.PSContext) -> None:
    """``get_iter`` of unsorted rows (duplicates too) outside training sends one
    ``get_rows`` request a server for a chunk and yields its batches in request
    order; batches still held keep their values while later pulls run."""
    ref = np.arange(3000 * 48, dtype="float32").reshape(3000, 48)
    a = ps.zeros("rg-iter", ref.shape, dtype="float32", block_shape=(400, 48))
    a.set(ref)
    rng = np.random.default_rng(11)
    idx = rng.integers(0, 3000, 5000)
    got: list[tuple[np.ndarray, np.ndarray]] = []
    calls = _calls(a, lambda: got.extend(a.get_iter(idx, batch=700, ordered=True)))
    assert calls == {"get_rows": 2}, calls
    np.testing.assert_array_equal(np.concatenate([r for r, _ in got]), idx)
    for rows, vals in got:
        np.testing.assert_array_equal(vals, ref[rows])
    for _ in range(3):
        for rows, vals in a.get_iter(rng.integers(0, 3000, 5000), batch=700):
            np.testing.assert_array_equal(vals, ref[rows])
    for rows, vals in got:
        np.testing.assert_array_equal(vals, ref[rows])
