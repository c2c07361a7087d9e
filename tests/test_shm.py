"""Packed sparse increments handed to same-machine servers through shared memory
(:mod:`daskangel._shm`).

* :class:`ShmBuffers` and :class:`ShmMaps` on their own: a buffer is reused only
  once released, a retired one never, the limit holds; a mapping is made only when
  the buffer's nonce matches (another process's same fd, a replaced buffer, a
  wrong nonce or pid: refused);
* on a process cluster (2 workers): sparse vector increments through the shared
  buffers equal a NumPy model, the servers really mapped them, concurrent callers
  (the client's threads and tasks on both workers) sum exactly, and servers that
  refuse to map answer before applying anything: the caller resends over the
  socket and nothing is added twice.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator

import dask
import numpy as np
import pytest
from distributed import Client
from hypothesis import given, settings
from hypothesis import strategies as st

import daskangel as angel
from daskangel._compat import workers_info
from daskangel._shm import HEADER, ShmBuffers, ShmMaps, place, span, supported
from daskangel.psarray._binding import get_binding

pytestmark = [
    pytest.mark.timeout(240),
    pytest.mark.skipif(not supported(), reason="no memfd / /proc here"),
]

WIDTH = 10**8  # 4 blocks of 25 M columns on 2 servers


# -- buffers and mappings (no cluster) --------------------------------------------------


def test_buffers_are_reused_once_released_and_never_once_retired() -> None:
    bufs = ShmBuffers(limit=8 << 20)
    a = bufs.take(3 << 20)
    b = bufs.take(1000)
    assert a is not None and b is not None and a is not b
    assert bufs.take(5 << 20) is None  # 4 + 1 MiB held, 5 more would pass the limit
    bufs.release(b)
    assert bufs.take(500) is b  # released: handed out again
    bufs.retire(a)  # its call failed: the server may still read it
    c = bufs.take(3 << 20)
    assert c is not None and c is not a
    bufs.release(c)
    bufs.release(b)
    d = bufs.take(7 << 20)  # room made by dropping idle buffers
    assert d is not None and bufs.nbytes <= 8 << 20


def test_a_lease_is_busy_while_viewed_and_located_only_inside() -> None:
    bufs = ShmBuffers(limit=8 << 20)
    arr = bufs.lease(3 << 20)
    assert arr is not None and arr.dtype == np.uint8 and arr.size == 3 << 20
    (seg,) = bufs._segs
    assert seg.busy
    packed = arr[: 1 << 20].view(np.int64)
    packed[:] = np.arange(packed.size)
    a, b = packed[10:1000], packed[5000:9000]
    found = bufs.locate([a, b])
    assert found is not None and found[0] is seg and found[1] == [80, 40_000]
    np.testing.assert_array_equal(seg.view(80, a.nbytes).view(np.int64), a)
    assert bufs.locate([a, np.arange(10)]) is None  # one frame elsewhere
    assert bufs.locate([packed[::2]]) is None  # not contiguous
    del arr, packed
    assert seg.busy  # the views a and b still hold it
    del a, b, found
    gc.collect()
    assert not seg.busy and bufs.take(1000) is seg  # released: handed out again
    bufs.release(seg)
    arr = bufs.lease(1000)
    assert arr is not None
    bufs.retire(seg)  # its call failed while the lease lived
    del arr
    gc.collect()
    assert seg not in bufs._segs and bufs.take(1000) is not seg


@settings(max_examples=20, deadline=None)
@given(st.lists(st.integers(1, 300_000), min_size=1, max_size=4), st.integers(0, 2**31 - 1))
def test_placed_frames_read_back_through_a_mapping(sizes: list[int], seed: int) -> None:
    rng = np.random.default_rng(seed)
    frames = [rng.integers(0, 256, n).astype(np.uint8) for n in sizes]
    bufs = ShmBuffers(limit=64 << 20)
    seg = bufs.take(span(frames))
    assert seg is not None
    at = place(seg, frames)
    there = ShmMaps(4).attach(seg.desc(span(frames)))
    assert there is not None
    for f, a in zip(frames, at, strict=True):
        assert a % 64 == 0
        np.testing.assert_array_equal(there[HEADER + a : HEADER + a + f.size], f)


def test_a_mapping_needs_the_buffers_nonce() -> None:
    bufs = ShmBuffers(limit=4 << 20)
    seg = bufs.take(100)
    assert seg is not None
    maps = ShmMaps(1)
    pid, fd, nonce, size = seg.desc(100)
    wrong = ("00" * 16) if nonce != "00" * 16 else ("11" * 16)
    assert maps.attach([pid, fd, wrong, size]) is None
    assert maps.attach([pid, fd, nonce[:-2], size]) is None  # not 16 bytes
    assert maps.attach([pid, 10**6, nonce, size]) is None  # no such fd
    assert maps.attach([2**22 + 12345, fd, nonce, size]) is None  # no such process
    assert maps.attach([pid, fd, nonce, 1 << 30]) is None  # larger than the buffer
    assert maps.attach(["x", fd, nonce, size]) is None
    assert len(maps) == 0
    got = maps.attach([pid, fd, nonce, size])
    assert got is not None and len(maps) == 1
    other = bufs.take(100)
    assert other is not None
    assert maps.attach(other.desc(100)) is not None and len(maps) == 1  # the limit


# -- on a process cluster ---------------------------------------------------------------


@pytest.fixture
def clean_refusals(ps: angel.PSContext, client: Client) -> Iterator[None]:
    yield
    shm = get_binding(client).shm_buffers()
    assert shm is not None
    shm.refused.clear()


def _shared(dask_worker) -> int:  # type: ignore[no-untyped-def]
    """Requests this worker's servers read from a caller's shared buffer."""
    return int(dask_worker.plugins["daskangel-ps"].shm_requests)


def _model(cols: np.ndarray, vals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    u, inv = np.unique(cols, return_inverse=True)
    return u, np.bincount(inv, weights=vals)


@pytest.mark.parametrize("pack", [True, False])
def test_increments_through_shared_buffers_equal_numpy(
    ps: angel.PSContext, client: Client, pack: bool
) -> None:
    """New keys, then the same keys and more (duplicates within a request): the
    servers map the client's buffers and every key ends with its exact sum, the
    entries packed straight into a shared buffer (``shm-pack``) or copied there."""
    v = ps.zeros(f"shv{pack}", (WIDTH,), dtype="float32", sparse=True)
    before = client.run(_shared)
    rng = np.random.default_rng(7)
    cols = rng.integers(0, WIDTH, 400_000)  # ~1.6 MB of packed entries a server
    vals = rng.integers(1, 4, cols.size).astype(np.float32)
    more = np.concatenate([cols, rng.integers(0, 1000, 100_000)])
    more_vals = rng.integers(1, 4, more.size).astype(np.float32)
    with dask.config.set({"daskangel.client.shm-pack": pack}):
        v.increment(vals, cols=cols)
        v.increment(more_vals, cols=more)
    gc.collect()
    shm = get_binding(client).shm_buffers()
    assert shm is not None and not any(seg.busy for seg in shm._segs)  # all released
    after = client.run(_shared)
    assert all(after[w] >= before[w] + 2 for w in after)  # the shared way, both calls
    u, s = _model(np.concatenate([cols, more]), np.concatenate([vals, more_vals]))
    np.testing.assert_array_equal(v.get(cols=u), s.astype(np.float32))
    untouched = np.setdiff1d(np.arange(0, WIDTH, 99_991), u)
    assert not v.get(cols=untouched).any()


def _push(name: str, seed: int, rounds: int) -> float:
    rng = np.random.default_rng(seed)
    arr = angel.PSArray(name)
    total = 0.0
    for _ in range(rounds):
        cols = rng.integers(0, WIDTH, 300_000)
        vals = rng.integers(1, 4, cols.size).astype(np.int32)
        arr.increment(vals, cols=cols)
        total += float(vals.sum())
    return total


def _pushed(seeds: list[int], rounds: int) -> tuple[np.ndarray, np.ndarray]:
    cols, vals = [], []
    for seed in seeds:
        rng = np.random.default_rng(seed)
        for _ in range(rounds):
            c = rng.integers(0, WIDTH, 300_000)
            cols.append(c)
            vals.append(rng.integers(1, 4, c.size).astype(np.int32))
    return _model(np.concatenate(cols), np.concatenate(vals).astype(np.float64))


def test_concurrent_callers_sum_exactly(ps: angel.PSContext, client: Client) -> None:
    """Tasks on both workers (each with a server of its own process) and two of
    the client's threads push at once, every call with a buffer of its own."""
    ps.zeros("shc", (WIDTH,), dtype="int32", sparse=True)
    workers = sorted(workers_info(client))
    futs = [
        client.submit(_push, "shc", s, 2, workers=[workers[i % 2]], pure=False)
        for i, s in enumerate([21, 22])
    ]
    done: list[float] = []
    threads = [
        threading.Thread(target=lambda s=s: done.append(_push("shc", s, 2))) for s in (23, 24)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    total = sum(done) + sum(f.result() for f in futs)
    u, s = _pushed([21, 22, 23, 24], 2)
    got = ps.get_array("shc").get(cols=u)
    np.testing.assert_array_equal(got, s.astype(np.int32))
    assert float(got.astype(np.int64).sum()) == total
    shm = get_binding(client).shm_buffers()
    assert shm is not None and not any(seg.busy for seg in shm._segs)  # all released


def test_servers_that_cannot_map_answer_first_and_the_socket_follows(
    ps: angel.PSContext, client: Client, clean_refusals: None
) -> None:
    """With ``daskangel.server.shm`` off the servers answer before applying
    anything; the caller resends over the socket (exact sums: nothing twice) and
    does not offer those servers its buffers again."""
    v = ps.zeros("shr", (WIDTH,), dtype="float32", sparse=True)
    rng = np.random.default_rng(9)
    cols = rng.integers(0, WIDTH, 400_000)
    vals = np.ones(cols.size, np.float32)
    before = client.run(_shared)
    client.run(lambda: dask.config.set({"daskangel.server.shm": False}))
    try:
        v.increment(vals, cols=cols)
        v.increment(vals, cols=cols)
    finally:
        client.run(lambda: dask.config.set({"daskangel.server.shm": True}))
    shm = get_binding(client).shm_buffers()
    assert shm is not None
    assert set(shm.refused) == {b.server.address for b in v.blocks}
    assert client.run(_shared) == before
    u, s = _model(np.concatenate([cols, cols]), np.ones(2 * cols.size))
    np.testing.assert_array_equal(v.get(cols=u), s.astype(np.float32))


def test_the_switch_and_the_threshold_keep_the_socket(ps: angel.PSContext, client: Client) -> None:
    """``daskangel.client.shm`` off, or a request under ``shm-bytes``: the socket,
    with the same sums."""
    v = ps.zeros("shs", (WIDTH,), dtype="float32", sparse=True)
    cols = np.random.default_rng(5).integers(0, WIDTH, 400_000)
    before = client.run(_shared)
    for cfg in ({"daskangel.client.shm": False}, {"daskangel.client.shm-bytes": "64MiB"}):
        with dask.config.set(cfg):
            v.increment(np.ones(cols.size, np.float32), cols=cols)
    assert client.run(_shared) == before
    u, s = _model(np.concatenate([cols, cols]), np.ones(2 * cols.size))
    np.testing.assert_array_equal(v.get(cols=u), s.astype(np.float32))
