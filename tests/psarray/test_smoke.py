"""A first end-to-end round trip on a real 2-process LocalCluster."""

from __future__ import annotations

import numpy as np


def test_roundtrip_vector(ps):
    w = ps.zeros("w", shape=(10,), dtype="float64")
    w.increment([1.0, 2.0, 3.0], cols=[0, 7, 7])
    np.testing.assert_array_equal(w.get(), [1, 0, 0, 0, 0, 0, 0, 5, 0, 0])
    assert len({b.server for b in w.blocks}) == 2


def test_random_is_partition_independent(ps):
    a = ps.random("a", shape=(50, 9), block_shape=(7, 4), seed=3)
    b = ps.random("b", shape=(50, 9), seed=3)
    np.testing.assert_array_equal(a.get(), b.get())
    assert a.get().min() >= 0.0 and a.get().max() < 1.0


async def _start_hold(dask_worker):  # type: ignore[no-untyped-def]
    """Take PS server 0's lock on this worker (as a long operation would) and keep it
    until ``_end_hold``; return once it is held."""
    import asyncio

    server = dask_worker.plugins["daskangel-ps"].server(0)
    held, release = asyncio.Event(), asyncio.Event()

    async def hold() -> None:
        async with server.locked():
            held.set()
            await release.wait()

    dask_worker._test_hold = (asyncio.ensure_future(hold()), release)
    await held.wait()


async def _end_hold(dask_worker):  # type: ignore[no-untyped-def]
    task, release = dask_worker._test_hold
    release.set()
    await task


async def _ping(client, addr):  # type: ignore[no-untyped-def]
    return await client.rpc(addr).daskangel_ps(ps_op="ping", server=0, payload="alive")


def test_heartbeat_ping_is_answered_while_the_server_lock_is_busy(ps):  # type: ignore[no-untyped-def]
    """A busy server is alive: the liveness ping must not queue behind its operations."""
    w = ps.zeros("busy", (10,))
    addr = w.blocks[0].server.address
    c = ps.client
    c.run(_start_hold, workers=[addr])
    try:
        fut = w.get_async()  # an ordinary operation queues behind the lock ...
        reply = c.sync(_ping, c, addr, callback_timeout=10)  # ... the ping does not
        assert reply == "alive"
        assert not fut.done()
    finally:
        c.run(_end_hold, workers=[addr])
    assert fut.result().shape == (10,)
