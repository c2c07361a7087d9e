"""daskangel._recv follows private pieces of Dask's TCP reader: these tests fail
loudly when a Dask upgrade moves them, and check the fallback to the public path.

They use real TCP comms (``distributed.comm.listen`` / ``connect``), with Dask's
own ``TCP.write`` producing the bytes ``read_into_targets`` reads.
"""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Callable
from typing import Any

import distributed.comm.tcp
import numpy as np
import pytest
from distributed.comm import connect, listen
from distributed.protocol import to_serialize

from daskangel import _recv
from daskangel._recv import landed, read_into_targets, tcp_internals

pytestmark = pytest.mark.timeout(60)


def _roundtrip(
    reply: list[np.ndarray], targets: Callable[[list[np.ndarray]], list[np.ndarray | None]]
) -> tuple[Any, list[np.ndarray | None]]:
    """Serve ``reply`` from a real TCP listener; read it with read_into_targets."""

    async def run() -> tuple[Any, list[np.ndarray | None]]:
        async def handler(comm: Any) -> None:
            await comm.read()
            await comm.write([to_serialize(a) for a in reply])
            await comm.close()

        listener = listen("tcp://127.0.0.1:0", handler)
        await listener.start()
        try:
            comm = await connect(listener.contact_address)
            try:
                await comm.write({"op": "give"})
                tg = targets(reply)
                sizes = [a.nbytes if t is not None else 0 for a, t in zip(reply, tg, strict=True)]
                got = await read_into_targets(comm, sizes, tg)
            finally:
                await comm.close()
        finally:
            listener.stop()
        return got, tg

    return asyncio.run(run())


def _arrays() -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [
        rng.random(300_000),  # 2.4 MB: a frame of its own
        np.arange(3, dtype="int32"),  # tiny: inside the header frames
        rng.integers(0, 9, (1000, 70), dtype="int32"),
    ]


def test_dask_tcp_internals_this_module_follows_are_present() -> None:
    tcp_internals.cache_clear()
    tcp = tcp_internals()
    assert tcp is not None, (
        "distributed.comm.tcp changed: daskangel._recv falls back to comm.read(); "
        "update _recv.read_into_targets to the new reader"
    )
    assert tcp.TCP is distributed.comm.tcp.TCP


def test_frames_land_in_their_targets_and_match_what_dask_wrote() -> None:
    got, targets = _roundtrip(
        _arrays(), lambda arrs: [np.empty_like(arrs[0]), None, np.empty_like(arrs[2])]
    )
    want = _arrays()
    assert len(got) == 3
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)
    assert landed(got[0], targets[0]), "the large float frame was copied, not read in place"
    assert landed(got[2], targets[2]), "the int32 frame was copied, not read in place"
    assert not landed(got[1], np.empty(3, "int32"))


def test_without_targets_the_reply_is_read_as_dask_would() -> None:
    got, _ = _roundtrip(_arrays(), lambda arrs: [None] * len(arrs))
    for g, w in zip(got, _arrays(), strict=True):
        np.testing.assert_array_equal(g, w)


def test_a_size_that_matches_no_frame_reads_everything_as_usual() -> None:
    async def run() -> list[np.ndarray]:
        async def handler(comm: Any) -> None:
            await comm.read()
            await comm.write([to_serialize(np.ones(50_000))])
            await comm.close()

        listener = listen("tcp://127.0.0.1:0", handler)
        await listener.start()
        comm = await connect(listener.contact_address)
        await comm.write({"op": "give"})
        target = np.empty(123_456, "uint8")
        got = await read_into_targets(comm, [target.nbytes], [target])
        await comm.close()
        listener.stop()
        return got

    got = asyncio.run(run())
    np.testing.assert_array_equal(got[0], np.ones(50_000))


def test_falls_back_to_the_public_reader_when_internals_vanish(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a piece Dask no longer has (deleting a real one would break Dask's own reader)
    monkeypatch.setitem(_recv._NEEDED, "read_frames_v2", None)
    tcp_internals.cache_clear()
    try:
        with pytest.warns(RuntimeWarning, match="read_frames_v2 is gone"):
            assert tcp_internals() is None
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # warned once per process, not per read
            got, targets = _roundtrip(
                _arrays(), lambda arrs: [np.empty_like(arrs[0]), None, np.empty_like(arrs[2])]
            )
        for g, w in zip(got, _arrays(), strict=True):
            np.testing.assert_array_equal(g, w)
        assert not landed(got[0], targets[0])  # correct, one copy slower
    finally:
        monkeypatch.undo()
        tcp_internals.cache_clear()
    assert tcp_internals() is not None


def test_a_changed_signature_is_seen_as_vanished(monkeypatch: pytest.MonkeyPatch) -> None:
    def from_frames(frames: Any) -> Any:  # lost its keywords
        raise AssertionError("never called")

    monkeypatch.setattr(distributed.comm.tcp, "from_frames", from_frames)
    tcp_internals.cache_clear()
    try:
        with pytest.warns(RuntimeWarning, match="from_frames no longer takes"):
            assert tcp_internals() is None
    finally:
        monkeypatch.undo()
        tcp_internals.cache_clear()


def test_module_exports() -> None:
    assert set(_recv.__all__) >= {"read_into_targets", "send_recv_into", "tcp_internals"}


def _servers_and_pool(
    handlers: list[dict[str, Any]],
) -> Callable[[Callable[[Any, list[str]], Any]], Any]:
    """Run ``fn(pool, addresses)`` against real Dask servers (one per handler dict)."""
    from distributed.core import ConnectionPool, Server

    def run(fn: Callable[[Any, list[str]], Any]) -> Any:
        async def go() -> Any:
            servers = [Server(h) for h in handlers]
            for s in servers:
                await s.listen("tcp://127.0.0.1:0")
            pool = await ConnectionPool(limit=10)
            try:
                return await fn(pool, [s.address for s in servers])
            finally:
                await pool.close()
                for s in servers:
                    s.stop()

        return asyncio.run(go())

    return run


def test_send_all_recv_into_reads_every_reply_in_order_into_its_target() -> None:
    def give(n: int = 0) -> Any:
        return to_serialize(np.full(n // 8, float(n)))

    async def fn(pool: Any, addrs: list[str]) -> None:
        targets = [np.zeros(100_000), None]
        calls = [
            (addrs[0], "give", {"n": 800_000}, [800_000], [targets[0]]),
            (addrs[1], "give", {"n": 80}, [], []),
        ]
        for _ in range(3):  # the comms go back to the pool and are reused
            big, small = await _recv.send_all_recv_into(pool, calls)
            assert landed(big, targets[0]) and (targets[0] == 800_000.0).all()
            np.testing.assert_array_equal(small, np.full(10, 80.0))
            assert not any(pool.occupied.values())
        assert await _recv.send_all_recv_into(pool, []) == []

    _servers_and_pool([{"give": give}, {"give": give}])(fn)


def test_send_all_recv_into_raises_and_leaves_no_comm_occupied() -> None:
    def give(n: int = 0) -> Any:
        return to_serialize(np.zeros(n // 8))

    def fail(n: int = 0) -> Any:
        raise KeyError("no such block")

    async def hang_up(comm: Any, n: int = 0) -> None:
        comm.abort()

    async def fn(pool: Any, addrs: list[str]) -> None:
        ok = (addrs[0], "give", {"n": 80}, [], [])
        with pytest.raises(KeyError, match="no such block"):
            await _recv.send_all_recv_into(pool, [ok, (addrs[1], "fail", {}, [], [])])
        assert not any(pool.occupied.values())
        with pytest.raises(OSError):
            await _recv.send_all_recv_into(pool, [(addrs[1], "hang_up", {}, [], []), ok])
        assert not any(pool.occupied.values())
        assert not any(c.closed() for cs in pool.available.values() for c in cs)
        (again,) = await _recv.send_all_recv_into(pool, [ok])  # the pool still works
        assert again.shape == (10,)

    _servers_and_pool([{"give": give}, {"fail": fail, "hang_up": hang_up}])(fn)
