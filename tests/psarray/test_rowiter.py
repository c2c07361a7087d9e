"""get_iter's pacing (``psarray/_rowiter.py``): chunks that cover every row once,
few large requests for a caller that only pulls, small ones kept ahead for a
caller that computes, growing when the caller has to wait (process cluster)."""

from __future__ import annotations

import concurrent.futures
from typing import Any

import dask
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import daskangel as angel
from daskangel.errors import PSIndexError
from daskangel.psarray._agent import agent_of
from daskangel.psarray._rowiter import RowIter
from daskangel.psarray._rowpace import PaceBook, Pacer, chunk_batches

pytestmark = pytest.mark.timeout(180)

MIN = "daskangel.agent.pipeline-min-request-bytes"
REQ = "daskangel.agent.pipeline-request-bytes"
SHARE = "daskangel.agent.pipeline-compute-share"


# -- the pacer (pure) -----------------------------------------------------------------------------


@settings(deadline=None, max_examples=200)
@given(
    n=st.integers(0, 400),
    batch=st.integers(1, 30),
    row_bytes=st.integers(1, 64),
    request=st.integers(1, 5000),
    min_request=st.integers(1, 5000),
    growth=st.sampled_from([1.0, 2.0, 4.0]),
    pipelined=st.booleans(),
    waits=st.lists(st.booleans(), max_size=400),
)
def test_pacer_takes_every_row_once_in_whole_batches(
    n, batch, row_bytes, request, min_request, growth, pipelined, waits
):
    p = Pacer(
        n,
        batch,
        row_bytes,
        request_bytes=request,
        min_request_bytes=min_request,
        growth=growth,
        pipelined=pipelined,
    )
    chunks = []
    while (c := p.take()) is not None:
        chunks.append(c)
        if waits and waits.pop():
            p.waited()
    k = max(1, request // (batch * row_bytes))  # batches a request may hold
    if n == 0:
        assert chunks == []
        return
    assert (chunks[0][0], chunks[-1][1]) == (0, n)
    assert [s for s, _ in chunks[1:]] == [e for _, e in chunks[:-1]]  # contiguous, once
    for s, e in chunks:
        assert s % batch == 0 and 0 < e - s <= k * batch
        assert e == n or (e - s) % batch == 0
    if not pipelined:  # a caller that only pulls: as few requests as hold the rows
        assert chunks == chunk_batches(n, batch, row_bytes, request)


def test_pacer_keeps_small_chunks_until_the_caller_waits():
    # 8-byte batches, chunks from 2 batches, at most 16, x4 after a wait
    p = Pacer(200, 1, 8, request_bytes=128, min_request_bytes=16, growth=4, pipelined=True)
    assert [p.take(), p.take(), p.take()] == [(0, 2), (2, 4), (4, 6)]  # computing: small
    p.waited()  # the caller was back before its chunk: the pull is the bottleneck
    assert p.take() == (6, 14)
    p.waited()
    assert p.take() == (14, 30)  # capped at 16 batches
    assert p.take() == (30, 46)  # and it stays there
    q = Pacer(10, 1, 8, request_bytes=128, min_request_bytes=16, growth=1, pipelined=True)
    q.take()
    q.waited()  # growth 1 still grows by a batch
    assert q.take() == (2, 5)


def test_pace_book_averages_and_forgets():
    book = PaceBook()
    assert book.share("w", 10) is None
    book.record("w", 10, 0.8)
    book.record("w", 10, 0.0)
    book.record("v", 10, 0.5)
    assert book.share("w", 10) == pytest.approx(0.4)  # halves the older pulls' weight
    assert book.share("w", 5) is None
    book.forget({"w"})
    assert book.share("w", 10) is None and book.share("v", 10) == 0.5


def test_pace_book_tries_both_ways_then_keeps_the_faster():
    book = PaceBook()
    assert not book.pipelined("w", 10, 0.25, 4)  # a first pull: few requests
    book.record("w", 10, 0.01)  # its caller only pulled
    assert not book.pipelined("w", 10, 0.25, 4)
    book.record("w", 10, 0.9, False, 2.0)  # now it computes: (0.01 + 0.9) / 2 >= 0.25
    assert book.pipelined("w", 10, 0.25, 4)  # pulls 1: pipelining not tried yet
    book.record("w", 10, 0.9, True, 3.0)  # slower for this caller
    assert [book.pipelined("w", 10, 0.25, 4) for _ in range(4)] == [False, False, True, False]
    book.record("w", 10, 0.9, True, 0.5)  # (3 + 0.5) / 2 = 1.75 < 2: now the faster
    assert [book.pipelined("w", 10, 0.25, 4) for _ in range(3)] == [True, True, False]
    assert [book.pipelined("w", 10, 0.25, 0) for _ in range(8)] == [True] * 8  # no probes
    assert not book.pipelined("w", 10, 0.95, 4)  # a caller below the share only pulls


# -- on the process cluster ------------------------------------------------------------------------


def _matrix(ps: angel.PSContext, name: str, shape: tuple[int, int], dtype: str) -> np.ndarray:
    ref = (np.arange(shape[0] * shape[1]).reshape(shape) % 1000).astype(dtype)
    a = ps.zeros(name, shape, dtype=dtype, block_shape=(7, shape[1]))
    a.set(ref)
    return ref


@pytest.mark.parametrize("pipelined", [False, True])
def test_every_row_once_in_either_pace(ps: angel.PSContext, pipelined: bool) -> None:
    """Random rows with duplicates, a sorted key list, an empty list; in request
    order with ``ordered=True``; whichever way the chunks are cut."""
    rng = np.random.default_rng(3)
    for dtype in ("int32", "float64"):
        name = f"every-{dtype}-{pipelined}"
        ref = _matrix(ps, name, (90, 12), dtype)
        a = ps.get_array(name)
        agent = agent_of(a._binding)
        per = 5 * 12 * np.dtype(dtype).itemsize  # bytes of a batch of 5 rows
        cases = [
            np.concatenate([rng.permutation(90), [7, 7, 0]]),  # duplicates
            np.arange(3, 90, 2),  # a task's sorted key list
            np.array([], np.int64),
        ]
        cfg = {REQ: 4 * per, MIN: per, SHARE: 0.0 if pipelined else 2.0}
        with dask.config.set(cfg):
            for rows in cases:
                for ordered in (True, False):
                    agent.pace.record(name, 5, 1.0)  # as if an earlier pull had computed
                    got = list(a.get_iter(rows, batch=5, ordered=ordered))
                    ids = np.concatenate([r for r, _ in got]) if got else np.array([], np.int64)
                    if ordered:
                        np.testing.assert_array_equal(ids, rows)
                        assert [r.shape[0] for r, _ in got][:-1] == [5] * (len(got) - 1)
                    else:
                        assert sorted(ids.tolist()) == sorted(rows.tolist())
                    for rb, vals in got:
                        assert vals.dtype == np.dtype(dtype) and vals.shape == (rb.shape[0], 12)
                        np.testing.assert_array_equal(vals, ref[rb])


def test_unordered_batches_come_as_the_replies_landed(ps: angel.PSContext) -> None:
    """Without ``ordered``, a chunk's large replies are cut into batches as they
    landed (no scatter into request order): every row once, duplicates too, each
    batch's values those of its row ids; ``ordered=True`` keeps request order."""
    ref = _matrix(ps, "landed", (300, 16), "float32")
    a = ps.get_array("landed")
    rows = np.concatenate([np.random.default_rng(5).permutation(300), [5, 5, 299]])
    large = {  # every reply handed to the caller's thread, read into scratch
        "daskangel.client.loop-scatter-bytes": 1,
        "daskangel.client.direct-read-bytes": 1,
        SHARE: 2.0,
    }
    with dask.config.set(large):
        got = list(a.get_iter(rows, batch=32))
        kept = list(a.get_iter(rows, batch=32, ordered=True))
    ids = np.concatenate([r for r, _ in got])
    assert sorted(ids.tolist()) == sorted(rows.tolist())
    assert not np.array_equal(ids, rows)  # the servers' order, not the request's
    assert max(r.shape[0] for r, _ in got) <= 32
    for rb, vals in got + kept:
        np.testing.assert_array_equal(vals, ref[rb])
    np.testing.assert_array_equal(np.concatenate([r for r, _ in kept]), rows)


def test_unordered_large_replies_are_never_scattered(ps: angel.PSContext) -> None:
    """With the default settings, a reply read into the scratch buffer (at least
    ``reply-frame-bytes``) is cut into batches as it landed even when the loop
    would have scattered it (below ``loop-scatter-bytes``): the batches are in
    the servers' order, writable, and each row's values are its own."""
    ref = _matrix(ps, "kept", (1200, 128), "float32")  # 512 B a row: replies >= 128 KiB
    a = ps.get_array("kept")
    rows = np.concatenate([np.random.default_rng(8).permutation(1200), [9, 9]])
    with dask.config.set({SHARE: 2.0}):
        got = list(a.get_iter(rows, batch=100))
        kept = list(a.get_iter(rows, batch=100, ordered=True))
    ids = np.concatenate([r for r, _ in got])
    assert sorted(ids.tolist()) == sorted(rows.tolist())
    assert not np.array_equal(ids, rows)  # as the replies landed, no scatter
    for rb, vals in got + kept:
        assert vals.flags.writeable and vals.shape == (rb.shape[0], 128)
        np.testing.assert_array_equal(vals, ref[rb])
    np.testing.assert_array_equal(np.concatenate([r for r, _ in kept]), rows)


def test_unordered_replies_inside_the_message_are_put_in_place(ps: angel.PSContext) -> None:
    """A reply the servers sent as bytes inside the message (read-only) is put
    in place, never handed to the caller, even when this process would keep
    replies of that size (its ``reply-frame-bytes`` below the servers')."""
    ref = _matrix(ps, "inmsg", (90, 12), "float64")
    a = ps.get_array("inmsg")
    rows = np.random.default_rng(9).permutation(90)
    low = {
        "daskangel.client.direct-read-bytes": 1,
        "daskangel.server.reply-frame-bytes": 1,
        "daskangel.client.batched-reply-bytes": 0,
        SHARE: 2.0,
    }
    with dask.config.set(low):
        got = list(a.get_iter(rows, batch=16))
    assert sorted(np.concatenate([r for r, _ in got]).tolist()) == sorted(rows.tolist())
    for rb, vals in got:
        assert vals.flags.writeable
        np.testing.assert_array_equal(vals, ref[rb])


def test_a_whole_pull_requested_at_once_checks_its_rows(ps: angel.PSContext) -> None:
    """Random rows that one request holds leave when ``get_iter`` is called (int32
    ids too), and an id out of range is refused there as by ``get``, naming it."""
    ref = _matrix(ps, "whole", (60, 8), "int32")
    a = ps.get_array("whole")
    rows = np.random.default_rng(4).permutation(60).astype(np.int32)
    it = a.get_iter(rows, batch=7)
    assert len(it.in_flight()) == 1  # requested before the first next()
    got = list(it)
    assert sorted(np.concatenate([r for r, _ in got]).tolist()) == list(range(60))
    for rb, vals in got:
        np.testing.assert_array_equal(vals, ref[rb])
    bad = np.array([5, 3, 60, 1])
    with pytest.raises(PSIndexError, match=r"rows: index 60 \(at position 2\) is out of range"):
        a.get_iter(bad, batch=2)


def _slow(a: Any, it: RowIter) -> list[np.ndarray]:
    """A caller that computes longer than its pull: a round trip of its own per
    batch, and the chunks requested ahead have landed before it asks again."""
    seen = []
    for rb, vals in it:
        a.get(rows=[0])
        concurrent.futures.wait(it.in_flight())
        seen.append(rb)
        assert vals.shape == (rb.shape[0], a.shape[1])
    return seen


async def _hold(dask_worker: Any) -> None:
    """Take this worker's PS server's lock (a long operation would) until ``_release``."""
    import asyncio

    server = dask_worker.plugins["daskangel-ps"].server(0)
    held, release = asyncio.Event(), asyncio.Event()

    async def hold() -> None:
        async with server.locked():
            held.set()
            await release.wait()

    dask_worker._test_iter_hold = (asyncio.ensure_future(hold()), release)
    await held.wait()


async def _release(dask_worker: Any) -> None:
    task, release = dask_worker._test_iter_hold
    release.set()
    await task


def test_the_pace_follows_the_consumer(ps: angel.PSContext) -> None:
    """A caller that only pulls gets as few requests as hold its rows; once a pull
    saw it compute, the next one tries small chunks kept ahead, which grow when
    the caller has to wait for one (its servers held busy)."""
    ref = _matrix(ps, "pace", (90, 12), "float32")
    a = ps.get_array("pace")
    agent = agent_of(a._binding)
    per = 5 * 12 * 4
    rows = np.random.default_rng(4).permutation(90)  # 18 batches of 5
    with dask.config.set({REQ: 16 * per, MIN: per, "daskangel.agent.pipeline-growth": 4}):
        for _ in range(2):  # pull-bound: 2 requests of at most 16 batches
            r0 = agent.requests
            got = list(a.get_iter(rows, batch=5, ordered=True))
            assert agent.requests - r0 == 2
            np.testing.assert_array_equal(np.concatenate([r for r, _ in got]), rows)
            assert agent.pace.share("pace", 5) < 0.25
        # a computing caller: learnt during one pull, then chunks of one batch
        seen = _slow(a, a.get_iter(rows, batch=5))
        assert sorted(np.concatenate(seen).tolist()) == list(range(90))
        assert agent.pace.share("pace", 5) >= 0.25
        r0 = agent.requests
        seen = _slow(a, a.get_iter(rows, batch=5, ordered=True))  # pipelining tried
        assert agent.requests - r0 == 18  # never waited: the chunks stay small
        np.testing.assert_array_equal(np.concatenate(seen), rows)
        # the caller waits for a chunk (its servers held): the next chunks grow
        for _ in range(4):  # pipelining is the faster way for this caller
            agent.pace.record("pace", 5, 1.0, True, 0.0)
        with dask.config.set(
            {"daskangel.agent.pipeline-depth": 1, "daskangel.agent.pipeline-probe-every": 0}
        ):
            r0 = agent.requests
            it = a.get_iter(rows, batch=5, ordered=True)
            concurrent.futures.wait(it.in_flight())
            addrs = sorted({blk.server.address for blk in a.blocks})
            ps.client.run(_hold, workers=addrs)
            first = next(it)  # hands the landed chunk, requests the next (held)
            assert not any(f.done() for f in it.in_flight())
            ps.client.run(_release, workers=addrs, wait=False)
            got = [first, *it]
            assert agent.requests - r0 < 18
            sizes = [r.shape[0] for r, _ in got]
            assert sizes == [5] * 18
        np.testing.assert_array_equal(np.concatenate([r for r, _ in got]), rows)
        for rb, vals in got:
            np.testing.assert_array_equal(vals, ref[rb])
