"""Write-behind: servers acknowledge a dense update before applying it, and every
later operation still sees it (read-your-writes), in order, all-or-nothing."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any

import dask
import numpy as np
import pytest
from distributed import Client

import daskangel as angel
from daskangel import errors, ops
from daskangel.psarray import InitSpec, PSServer
from daskangel.psarray._blocks import DenseBlock
from daskangel.psarray._server import SERVER_OPS

KEYS = ("daskangel.server.inline-bytes", "daskangel.server.behind-thread-bytes")


def _configure(values: dict[str, Any]) -> None:
    dask.config.set(values)


@contextlib.contextmanager
def _behind_mode(client: Client, mode: str) -> Iterator[str]:
    """Every received dense update is deferred, and applied on the event loop
    (``"loop"``) or in the server's op thread (``"thread"``)."""
    defaults = {k: dask.config.get(k) for k in KEYS}
    thread = "0B" if mode == "thread" else "1TiB"
    client.run(_configure, dict(zip(KEYS, ("0B", thread), strict=True)))
    try:
        yield mode
    finally:
        client.run(_configure, defaults)


@pytest.fixture(params=["loop", "thread"])
def behind(request: pytest.FixtureRequest, client: Client) -> Iterator[str]:
    with _behind_mode(client, request.param) as mode:
        yield mode


@pytest.mark.timeout(120)
def test_every_read_sees_the_increments_before_it(ps: angel.PSContext, behind: str) -> None:
    w = ps.zeros("w", (40, 30), dtype="float64", block_shape=(10, 10))
    assert len({b.server for b in w.blocks}) == 2
    model = np.zeros((40, 30))
    rng = np.random.default_rng(0)
    for step in range(6):
        v = rng.integers(-5, 5, (40, 30)).astype("float64")
        w.increment(v)
        model += v
        np.testing.assert_array_equal(w.get(), model)
        w.increment(v[3:17], rows=slice(3, 17))
        model[3:17] += v[3:17]
        np.testing.assert_array_equal(
            w.get(rows=[3, 16, 39], cols=[0, 29]), model[[3, 16, 39]][:, [0, 29]]
        )
        w.increment(v)
        model += v
        np.testing.assert_array_equal(w.to_dask_array().compute(), model)
        w.increment(v)
        model += v
        assert w.psf(ops.Sum()) == pytest.approx(model.sum())
        if step % 2:
            w.increment(v)
            w.set(model)  # an overwrite queued behind an add wins
            w.increment(v)
            model += v
            np.testing.assert_array_equal(w.get(), model)
            w.increment(v)
            w.fill(1.0)
            model[:] = 1.0
            np.testing.assert_array_equal(w.get(), model)


def _gate_adds(dask_worker: Any) -> None:
    """Hold adds in the op thread until a later operation waits for them: the gate
    opens only from ``drain`` (so a read that did not wait would read stale data)."""
    import threading

    from daskangel.psarray import _behind, _blocks

    gate = threading.Event()
    dask_worker._wb_gate = gate
    orig_update, orig_drain = _blocks.DenseBlock.update, _behind.WriteBehind.drain

    def update(self: Any, *args: Any, **kwargs: Any) -> None:
        if threading.current_thread().name.startswith("daskangel-ps"):
            assert gate.wait(60), "no operation waited for the queued add"
        orig_update(self, *args, **kwargs)

    async def drain(self: Any) -> None:
        gate.set()
        await orig_drain(self)

    dask_worker._wb_orig = (orig_update, orig_drain)
    _blocks.DenseBlock.update = update  # type: ignore[method-assign]
    _behind.WriteBehind.drain = drain  # type: ignore[method-assign]


def _ungate(dask_worker: Any) -> bool:
    from daskangel.psarray import _behind, _blocks

    gate = dask_worker._wb_gate
    opened = gate.is_set()
    gate.set()
    _blocks.DenseBlock.update, _behind.WriteBehind.drain = dask_worker._wb_orig
    return opened


@pytest.mark.timeout(120)
def test_a_get_waits_for_a_queued_add(ps: angel.PSContext, client: Client) -> None:
    """(Adds in the op thread: the gate holds them there.)"""
    w = ps.zeros("g", (1000,), dtype="float64", block_shape=(500,))
    w.increment(np.zeros(1000))  # a first op of an array runs in the op thread, undeferred
    with _behind_mode(client, "thread"):
        client.run(_gate_adds)
        try:
            w.increment(np.arange(1000.0))  # acknowledged while its adds are held
            got = w.get()
        finally:
            opened = client.run(_ungate)
    np.testing.assert_array_equal(got, np.arange(1000.0))
    servers = {b.server.address for b in w.blocks}
    assert all(opened[a] for a in servers)  # each server's get had to wait


@pytest.mark.timeout(120)
def test_a_nan_in_the_last_block_changes_no_block(ps: angel.PSContext, behind: str) -> None:
    w = ps.random("n", (6, 4000), seed=1, dtype="float32", block_shape=(3, 1000))
    before = w.get()
    vals = np.ones((6, 4000), "float32")
    vals[5, 3999] = np.nan
    with pytest.raises(errors.NonFiniteError):
        w.increment(vals)
    vals[5, 3999] = np.inf
    with pytest.raises(errors.NonFiniteError):
        w.set(vals)
    np.testing.assert_array_equal(w.get(), before)
    vals[5, 3999] = 1.0
    w.increment(vals)
    np.testing.assert_array_equal(w.get(), before + 1)


def _push_many(i: int, w: angel.PSArray) -> str:
    from distributed import get_worker

    for _ in range(5):
        w.increment(np.full(1 << 16, float(i + 1)))
    return get_worker().address  # type: ignore[no-any-return]


@pytest.mark.timeout(180)
def test_concurrent_increments_from_two_workers_and_the_driver(
    ps: angel.PSContext, client: Client, behind: str
) -> None:
    w = ps.zeros("c", (1 << 16,), dtype="float64", block_shape=(1 << 13,))
    futs = client.map(_push_many, range(8), w=w, pure=False)
    mine = [w.increment_async(np.full(1 << 16, 100.0)) for _ in range(10)]
    for f in mine:
        f.result()
    assert len(set(client.gather(futs))) == 2  # both workers pushed
    expected = 5 * sum(range(1, 9)) + 10 * 100.0
    np.testing.assert_array_equal(w.get(), np.full(1 << 16, expected))


# -- one server, no cluster: the queue's order ------------------------------------


def _spec(b: int, n: int) -> dict[str, Any]:
    """Block ``b`` of a (1, 2n) float64 array of two (1, n) blocks."""
    return {
        "block": b,
        "kind": "dense",
        "shape": (1, n),
        "dtype": "float64",
        "init": InitSpec().to_dict(),
        "row0": 0,
        "col0": b * n,
        "n_cols": 2 * n,
    }


def _server(n: int) -> PSServer:
    s = PSServer("local", 0)
    s.dispatch("create", array="w", blocks=[_spec(b, n) for b in range(2)])
    return s


def _part(block: int, values: np.ndarray) -> dict[str, Any]:
    return {"block": block, "rows": None, "cols": None, "values": values.reshape(1, -1)}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("where", ["loop", "thread"])
def test_queued_writes_apply_in_order_before_a_read(where: str) -> None:
    n = 1 << 16
    cfg = {KEYS[0]: "0B", KEYS[1]: "0B" if where == "thread" else "1TiB"}

    async def go() -> tuple[list[Any], np.ndarray, bool]:
        s = _server(n)
        replies = []
        for add, value in ((True, 1.0), (False, 7.0), (True, 2.0), (True, 3.0)):
            parts = [_part(b, np.full(n, value)) for b in range(2)]
            replies.append(
                await s.run("update", 8 * n, may_defer=True, array="w", parts=parts, add=add)
            )
        queued = s.behind
        got = await s.run(
            "get", 0, array="w", parts=[{"block": b, "rows": None, "cols": None} for b in range(2)]
        )
        s.close()
        return replies, np.concatenate(got, axis=1), queued

    with dask.config.set(cfg):
        replies, got, queued = asyncio.run(go())
    assert replies == [True] * 4
    assert queued  # the writes were acknowledged before they were applied
    np.testing.assert_array_equal(got, np.full((1, 2 * n), 12.0))


@pytest.mark.timeout(60)
def test_a_local_caller_is_never_deferred() -> None:
    """Arguments from this process (``call_local``) belong to the caller, who may
    change them as soon as the call returns: they are applied before replying."""
    n = 1 << 16

    async def go() -> bool:
        s = _server(n)
        v = np.ones(n)
        await s.run("update", 8 * n, may_defer=False, array="w", parts=[_part(0, v)], add=True)
        queued = s.behind
        v[:] = 100.0  # the caller reuses its buffer
        blk = s.block("w", 0)
        assert isinstance(blk, DenseBlock)
        np.testing.assert_array_equal(blk.data, np.ones((1, n)))
        s.close()
        return queued

    with dask.config.set({KEYS[0]: "0B"}):
        assert not asyncio.run(go())


@pytest.mark.timeout(60)
def test_the_first_op_on_an_array_runs_off_the_event_loop() -> None:
    """A first ``get`` (or update) of an array may compile its numba kernels —
    seconds on a cold cache — so it runs in the server's thread; later small ones
    run inline on the loop.  Nothing else changes: the replies are the same."""
    import threading

    n = 16
    seen: list[tuple[str, bool]] = []
    get = SERVER_OPS["get"]

    def spy(server: PSServer, **kwargs: Any) -> Any:
        seen.append((kwargs["array"], threading.current_thread() is threading.main_thread()))
        return get(server, **kwargs)

    async def go() -> list[np.ndarray]:
        s = _server(n)
        s.dispatch("create", array="v", blocks=[_spec(0, n)])
        parts = [{"block": 0, "rows": None, "cols": None}]
        out = [await s.run("get", 8, array=a, parts=parts) for a in ("w", "w", "v", "w", "v")]
        s.close()
        return [o[0] for o in out]

    SERVER_OPS["get"] = spy
    try:
        got = asyncio.run(go())
    finally:
        SERVER_OPS["get"] = get
    # the loop runs in the main thread here: first of each array in the op thread
    assert seen == [("w", False), ("w", True), ("v", False), ("w", True), ("v", True)]
    for g in got:
        np.testing.assert_array_equal(g, np.zeros((1, n)))
