"""The PS server: blocks held on a Dask worker and the operations on them.

:class:`PSServer` is storage plus operations, with no Dask in it.  Operations are
plain functions registered by name with :func:`server_op` (other modules add their
own, e.g. psf execution or snapshot writing), and take and return plain values and
numpy arrays.  A server runs one operation at a time: every operation holds the
server's lock, so an increment of a block is atomic with respect to a get of it.

:class:`PSWorkerPlugin` installs the servers of a worker and registers one comm
handler, ``daskangel_ps``, following the pattern of distributed's P2P shuffle
plugin.  Small requests run on the worker's event loop; larger ones in the
server's own thread, so heartbeats keep flowing while a big block is updated.

Example
-------
>>> import numpy as np
>>> from daskangel.psarray._blocks import InitSpec
>>> s = PSServer("local", 0)
>>> s.dispatch("create", array="w", blocks=[{"block": 0, "kind": "dense", "shape": (1, 4),
...     "dtype": "float32", "init": InitSpec().to_dict(), "row0": 0, "col0": 0, "n_cols": 4}])
>>> s.dispatch("update", array="w", add=True, parts=[{"block": 0, "rows": None,
...     "cols": np.array([1]), "values": np.ones((1, 1), "float32")}])
>>> s.dispatch("get", array="w", parts=[{"block": 0, "rows": None, "cols": None}])[0]
array([[0., 1., 0., 0.]], dtype=float32)
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict, defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import numpy as np
from distributed.diagnostics.plugin import WorkerPlugin

from .. import config
from .._wire import wrap_arrays
from ..errors import BlockBusyError, StaleLayoutError
from ._blocks import DenseBlock, InitSpec, SparseBlock, make_block
from ._holds import WRITE_OPS, Holds, Prepared

if TYPE_CHECKING:
    from distributed import Worker

__all__ = [
    "PLUGIN_NAME",
    "WRITE_OPS",
    "PSServer",
    "PSServerActor",
    "PSWorkerPlugin",
    "Prepared",
    "server_op",
]

PLUGIN_NAME = "daskangel-ps"

Block = DenseBlock | SparseBlock
ServerOp = Callable[..., Any]

# {op_name: function(server, **kwargs)}
SERVER_OPS: dict[str, ServerOp] = {}


def server_op(name: str, writes: bool = False) -> Callable[[ServerOp], ServerOp]:
    """Register ``fn(server, **kwargs)`` as the server operation ``name``.

    ``writes=True`` marks an op that changes blocks.  Such an op waits while a
    prepared two-phase write (see :meth:`PSServer.reserve`) holds one of the blocks
    it writes: those are ``parts[*]["block"]`` of the arrays named by the op's
    ``written`` argument, or of ``array`` when there is none.
    """

    def deco(fn: ServerOp) -> ServerOp:
        SERVER_OPS[name] = fn
        if writes:
            WRITE_OPS.add(name)
        return fn

    return deco


class PSServer(Holds):
    """One parameter server: the blocks it holds, its statistics, its lock."""

    def __init__(self, address: str, index: int) -> None:
        self.address = address
        self.index = index
        # {(array_name, block_id): Block}
        self.blocks: dict[tuple[str, int], Block] = {}
        # {op_name: [calls, seconds, bytes_in_out]}
        self.op_stats: defaultdict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0])
        self.waiting = 0
        # {writer_id: OrderedDict(seq -> None)}: recently applied write tags, so a
        # retried write is applied exactly once
        self.applied: dict[str, OrderedDict[int, None]] = {}
        self._lock: asyncio.Lock | None = None
        self.init_holds()
        self._executor: ThreadPoolExecutor | None = None

    def block(self, array: str, block: int) -> Block:
        try:
            return self.blocks[(array, block)]
        except KeyError:
            raise StaleLayoutError(
                f"server {self.address}#{self.index} holds no block {block} of array {array!r}"
            ) from None

    def dispatch(self, op: str, **kwargs: Any) -> Any:
        """Run operation ``op`` now, in the calling thread (no locking)."""
        try:
            fn = SERVER_OPS[op]
        except KeyError:
            raise ValueError(f"op: unknown PS server operation {op!r}") from None
        return fn(self, **kwargs)

    # -- running ops -----------------------------------------------------------

    async def run(self, op: str, cost: int = 0, **kwargs: Any) -> Any:
        """Run ``op`` under the server lock: inline when cheap, else in its thread.

        A write op first waits (without holding the lock) while a prepared
        two-phase write holds one of its blocks.
        """
        if self._lock is None:
            self._lock = asyncio.Lock()
            self._cond = asyncio.Condition(self._lock)
        assert self._cond is not None
        self.waiting += 1
        acquired = False
        try:
            async with self._cond:
                await self.wait_unreserved(op, kwargs)
                self.waiting -= 1
                acquired = True
                start = time.perf_counter()
                try:
                    if cost < config.get_bytes("daskangel.server.inline-bytes"):
                        result = self.dispatch(op, **kwargs)
                    else:
                        if self._executor is None:
                            self._executor = ThreadPoolExecutor(
                                1, thread_name_prefix=f"daskangel-ps-{self.index}"
                            )
                        loop = asyncio.get_running_loop()
                        result = await loop.run_in_executor(
                            self._executor, lambda: self.dispatch(op, **kwargs)
                        )
                finally:
                    # a commit or abort may have freed blocks that writes wait for
                    self._cond.notify_all()
                st = self.op_stats[op]
                st[0] += 1
                st[1] += time.perf_counter() - start
                st[2] += cost
                return result
        finally:
            if not acquired:
                self.waiting -= 1

    def close(self) -> None:
        self.blocks.clear()
        self.reserved.clear()
        self.txns.clear()
        if self._executor is not None:
            self._executor.shutdown(wait=False)
            self._executor = None

    @property
    def nbytes(self) -> int:
        return sum(b.nbytes for b in self.blocks.values())


# -- built-in operations -------------------------------------------------------


@server_op("ping")
def _ping(server: PSServer, payload: Any = None) -> Any:
    return payload


@server_op("create")
def _create(server: PSServer, array: str, blocks: list[dict[str, Any]]) -> None:
    made = {}
    for spec in blocks:
        key = (array, int(spec["block"]))
        made[key] = make_block(
            spec["kind"],
            tuple(spec["shape"]),  # type: ignore[arg-type]
            np.dtype(spec["dtype"]),
            InitSpec.from_dict(spec["init"]),
            int(spec["row0"]),
            int(spec["col0"]),
            int(spec["n_cols"]),
        )
    server.blocks.update(made)


@server_op("drop", writes=True)
def _drop(server: PSServer, array: str) -> int:
    keys = [k for k in server.blocks if k[0] == array]
    for k in keys:
        del server.blocks[k]
    return len(keys)


@server_op("get")
def _get(server: PSServer, array: str, parts: list[dict[str, Any]]) -> list[np.ndarray]:
    blocks = [server.block(array, int(p["block"])) for p in parts]
    for b, p in zip(blocks, parts, strict=True):
        b.check(p["rows"], p["cols"])
    return [b.get(p["rows"], p["cols"]) for b, p in zip(blocks, parts, strict=True)]


def seen_tag(server: PSServer, tag: list[Any] | None) -> bool:
    """True if a write with this ``[writer_id, seq]`` tag was applied already."""
    if tag is None:
        return False
    return int(tag[1]) in server.applied.get(str(tag[0]), ())


def record_tag(server: PSServer, tag: list[Any] | None) -> None:
    """Remember an applied write tag (the most recent ``write-tag-memory`` per writer)."""
    if tag is None:
        return
    seqs = server.applied.setdefault(str(tag[0]), OrderedDict())
    seqs[int(tag[1])] = None
    limit = int(config.get("daskangel.server.write-tag-memory"))
    while len(seqs) > limit:
        seqs.popitem(last=False)


@server_op("update", writes=True)
def _update(
    server: PSServer,
    array: str,
    parts: list[dict[str, Any]],
    add: bool,
    tag: list[Any] | None = None,
    clock: int | None = None,
) -> bool:
    """Apply writes to blocks; ``False`` when ``tag`` shows it was applied before.

    ``clock`` is the writer's clock (``None`` outside training), for snapshot cuts.
    """
    if seen_tag(server, tag):
        return False
    blocks = [server.block(array, int(p["block"])) for p in parts]
    for b, p in zip(blocks, parts, strict=True):
        if "coo_rows" in p:
            b.check(p["coo_rows"], p["coo_cols"])
        else:
            b.check(p["rows"], p["cols"])
    for b, p in zip(blocks, parts, strict=True):
        if "coo_rows" in p:
            b.update_coo(p["coo_rows"], p["coo_cols"], p["values"], add)
        else:
            b.update(p["rows"], p["cols"], p["values"], add)
    record_tag(server, tag)
    return True


@server_op("fill", writes=True)
def _fill(server: PSServer, array: str, parts: list[dict[str, Any]], value: Any) -> None:
    found = [server.block(array, int(p["block"])) for p in parts]
    for b in found:
        b.fill(value)


@server_op("versions")
def _versions(server: PSServer, array: str, parts: list[dict[str, Any]]) -> list[int]:
    return [server.block(array, int(p["block"])).version for p in parts]


@server_op("read_block")
def _read_block(server: PSServer, array: str, parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Whole blocks: dense data, or the stored entries of a sparse block."""
    out = []
    for p in parts:
        b = server.block(array, int(p["block"]))
        if isinstance(b, DenseBlock):
            out.append({"kind": "dense", "data": b.data.copy()})
        else:
            r, c, v = b.entries()
            out.append(
                {
                    "kind": "sparse",
                    "shape": list(b.shape),
                    "rows": r,
                    "cols": c,
                    "values": v,
                    "default": b.default.item(),
                }
            )
    return out


@server_op("stats")
def _stats(server: PSServer) -> dict[str, Any]:
    per_array: dict[str, int] = defaultdict(int)
    for (name, _), b in server.blocks.items():
        per_array[name] += b.nbytes
    return {
        "address": server.address,
        "index": server.index,
        "n_blocks": len(server.blocks),
        "nbytes": server.nbytes,
        "arrays": dict(per_array),
        "waiting": server.waiting,
        "ops": {k: list(v) for k, v in server.op_stats.items()},
    }


class PSWorkerPlugin(WorkerPlugin):
    """Installs PS servers on a worker and the ``daskangel_ps`` comm handler.

    Servers are created on first use, one per ``server`` index the scheduler
    plugin assigns to this worker.
    """

    name = PLUGIN_NAME
    idempotent = True  # a second PSContext must not wipe the first one's state

    def __init__(self) -> None:
        # {server_index: PSServer}
        self.servers: dict[int, PSServer] = {}
        self.worker: Worker | None = None

    def setup(self, worker: Worker) -> None:
        self.worker = worker
        worker.handlers["daskangel_ps"] = self.handle

    def teardown(self, worker: Worker) -> None:
        for s in self.servers.values():
            s.close()
        self.servers.clear()
        worker.handlers.pop("daskangel_ps", None)

    def server(self, index: int) -> PSServer:
        s = self.servers.get(index)
        if s is None:
            assert self.worker is not None
            s = self.servers[index] = PSServer(self.worker.address, index)
        return s

    async def handle(self, ps_op: str, server: int, cost: int = 0, **kwargs: Any) -> Any:
        """The ``daskangel_ps`` comm handler: run ``ps_op`` and frame its arrays."""
        return wrap_arrays(await self.server(int(server)).run(ps_op, cost, **kwargs))

    async def call_local(self, op: str, server: int, cost: int = 0, **kwargs: Any) -> Any:
        """The same call from this worker's own process: nothing is serialised."""
        return await self.server(int(server)).run(op, cost, **kwargs)


class PSServerActor:
    """A PS server as a Dask actor (the ``"actors"`` transport).

    Calls arrive through the worker's ``actor_execute`` handler and run one at a
    time in the worker's actor thread, which makes each operation atomic.
    """

    def __init__(self, index: int) -> None:
        from distributed import get_worker

        self.server = PSServer(get_worker().address, index)

    def call(self, op: str, kwargs: dict[str, Any]) -> Any:
        start = time.perf_counter()
        if self.server.blocked_until(op, kwargs) is not None:
            # the actor thread runs one op at a time and cannot wait for a commit
            raise BlockBusyError(
                f"op {op!r} on array {kwargs.get('array')!r}: a block is held by a psf "
                "update in progress; with transport='actors' writes cannot wait, retry"
            )
        result = self.server.dispatch(op, **kwargs)
        st = self.server.op_stats[op]
        st[0] += 1
        st[1] += time.perf_counter() - start
        return result
