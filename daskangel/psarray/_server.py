"""The PS server: blocks held on a Dask worker and the operations on them.

:class:`PSServer` is storage plus operations, with no Dask in it.  Operations are
plain functions registered by name with :func:`server_op` (other modules add their
own, e.g. psf execution or snapshot writing), and take and return plain values and
numpy arrays.  A server runs one operation at a time: every operation holds the
server's lock, so an increment of a block is atomic with respect to a get of it.
Updates are acknowledged once validated and applied right after, before any later
operation but another update (write-behind, :mod:`._behind`).

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
True
>>> s.dispatch("get", array="w", parts=[{"block": 0, "rows": None, "cols": None}])[0]
array([[0., 1., 0., 0.]], dtype=float32)
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict, defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import numpy as np
from distributed.diagnostics.plugin import WorkerPlugin

from .. import config
from .._wire import error_reply, unwrap_arrays, wrap_arrays
from ..errors import BlockBusyError, DaskAngelError, InvalidArgumentError, StaleLayoutError
from ._behind import DEFERRABLE_OPS, Deferred, WriteBehind
from ._blocks import DenseBlock, InitSpec, SparseBlock, make_block
from ._holds import WRITE_OPS, Holds, Prepared
from ._packed import PACK_SHIFT
from ._recvpool import ReceivePool, read_follow

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

# {op_name: function(server, **kwargs)}: run under the server lock
SERVER_OPS: dict[str, ServerOp] = {}
# {op_name: async function(server, **kwargs)}: manage the lock themselves (I/O)
ASYNC_OPS: dict[str, Callable[..., Awaitable[Any]]] = {}


def server_op(
    name: str,
    writes: bool = False,
    defer: Callable[[PSServer, dict[str, Any]], bool] | None = None,
) -> Callable[[ServerOp], ServerOp]:
    """Register ``fn(server, **kwargs)`` as the server operation ``name``.

    ``writes=True`` marks an op that changes blocks.  Such an op waits while a
    prepared two-phase write (see :meth:`PSServer.reserve`) holds one of the blocks
    it writes: those are ``parts[*]["block"]`` of the arrays named by the op's
    ``written`` argument, or of ``array`` when there is none.  ``defer``: a
    predicate of ``(server, kwargs)``; for the requests it accepts, the op is called
    with ``defer=True``, validates, and returns a :class:`~._behind.Deferred` whose
    ``apply`` makes the change (write-behind).
    """

    def deco(fn: ServerOp) -> ServerOp:
        SERVER_OPS[name] = fn
        if writes:
            WRITE_OPS.add(name)
        if defer is not None:
            DEFERRABLE_OPS[name] = defer
        return fn

    return deco


def server_async_op(
    name: str,
) -> Callable[[Callable[..., Awaitable[Any]]], Callable[..., Awaitable[Any]]]:
    """Register ``async fn(server, **kwargs)`` as operation ``name``.

    Async ops do slow work (file I/O) outside the server lock, taking it only
    through ``await server.run(...)`` for the parts that touch blocks.
    """

    def deco(fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        ASYNC_OPS[name] = fn
        return fn

    return deco


class PSServer(Holds, WriteBehind):
    """One parameter server: the blocks it holds, its statistics, its lock."""

    def __init__(self, address: str, index: int) -> None:
        self.address = address
        self.index = index
        # {(array_name, block_id): Block}
        self.blocks: dict[tuple[str, int], Block] = {}
        # {op_name: [calls, seconds, bytes_in_out]}
        self.op_stats: defaultdict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0])
        self.waiting = 0
        # {writer_id: OrderedDict(seq -> {(array, block) applied})}: recently applied
        # write tags, so a retried write is applied exactly once per block
        self.applied: dict[str, OrderedDict[int, set[tuple[str, int]]]] = {}
        # pending consistent cut (snapshot): active?, its clock (None: "now"), and
        # {(array_name, block_id): copy of the block as of the cut} (copy-on-write)
        self.cut_active = False
        self.cut_clock: int | None = None
        self.cut_id: str | None = None
        self.shadows: dict[tuple[str, int], Block] = {}
        # {restore_token: [((array_name, block_id), Block), ...]} read, not yet installed
        self.staged: dict[str, list[tuple[tuple[str, int], Block]]] = {}
        self._io: ThreadPoolExecutor | None = None
        self._lock: asyncio.Lock | None = None
        self.init_holds()
        self.init_behind()
        self._executor: ThreadPoolExecutor | None = None

    def block(self, array: str, block: int) -> Block:
        try:
            return self.blocks[(array, block)]
        except KeyError:
            raise StaleLayoutError(
                f"server {self.address}#{self.index} holds no block {block} of array {array!r}"
            ) from None

    def write_block(
        self, key: tuple[str, int], block: Block, clock: int | None, fn: Callable[[Block], Any]
    ) -> None:
        """Apply the write ``fn`` to a block, keeping any pending cut consistent.

        While a cut at clock ``t`` is pending, a write tagged with a later clock
        first saves a copy of the block as of the cut and then changes only the
        live block; a write of clock ``<= t`` (or untagged) changes both, so the
        copy ends up holding exactly the writes of clock ``<= t``.  A cut "now"
        (``t`` is None) treats every later write as after the cut.
        """
        if self.cut_active:
            after = self.cut_clock is None or (clock is not None and clock > self.cut_clock)
            shadow = self.shadows.get(key)
            if after:
                if shadow is None:
                    self.shadows[key] = block.copy()
            elif shadow is not None:
                fn(shadow)
        fn(block)

    @property
    def executor(self) -> ThreadPoolExecutor:  # type: ignore[override]
        """The server's op thread: large ops and every write-behind apply, in order."""
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix=f"daskangel-ps-{self.index}")
        return self._executor

    @property
    def io_executor(self) -> ThreadPoolExecutor:
        """The server's thread for file I/O (snapshots), apart from its op thread."""
        if self._io is None:
            self._io = ThreadPoolExecutor(1, thread_name_prefix=f"daskangel-io-{self.index}")
        return self._io

    def dispatch(self, op: str, **kwargs: Any) -> Any:
        """Run operation ``op`` now, in the calling thread (no locking)."""
        try:
            fn = SERVER_OPS[op]
        except KeyError:
            raise InvalidArgumentError(f"op: unknown PS server operation {op!r}") from None
        return fn(self, **kwargs)

    # -- running ops -----------------------------------------------------------

    async def run(self, op: str, cost: int = 0, *, may_defer: bool = False, **kwargs: Any) -> Any:
        """Run ``op`` under the server lock: inline when cheap, else in its thread.

        A write op first waits (without holding the lock) while a prepared
        two-phase write holds one of its blocks.  With ``may_defer`` (only for
        arguments nobody else holds: received ones, not a local caller's arrays) a
        deferrable op that is large, or arrives while writes are queued, is
        validated here and applied behind the reply; any other op first waits for
        the queued writes.  (The lock is taken
        inline, not through :meth:`locked`: this is every request's path, and a
        small get costs tens of microseconds in all.)
        """
        if self._lock is None:
            self._lock = asyncio.Lock()
            self._cond = asyncio.Condition(self._lock)
        lock = self._lock
        self.waiting += 1
        try:
            await lock.acquire()
        finally:
            self.waiting -= 1
        try:
            if self.reserved:
                await self.wait_unreserved(op, kwargs)
            small = cost < config.get_bytes("daskangel.server.inline-bytes")
            deferrable = DEFERRABLE_OPS.get(op) if may_defer else None
            if deferrable and (self.behind or not small) and deferrable(self, kwargs):
                out = self.timed(op, cost, kwargs, defer=True)
                return self.defer(op, cost, out) if isinstance(out, Deferred) else out
            if self.behind:
                await self.drain()
            if small:
                return self.timed(op, cost, kwargs)
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self.executor, lambda: self.timed(op, cost, kwargs))
        finally:
            # a commit or abort may have freed blocks that writes wait for
            assert self._cond is not None
            self._cond.notify_all()
            lock.release()

    @contextlib.asynccontextmanager
    async def locked(self) -> AsyncIterator[None]:
        """Hold the server lock, counting the callers queued for it."""
        if self._lock is None:
            self._lock = asyncio.Lock()
            self._cond = asyncio.Condition(self._lock)
        self.waiting += 1
        acquired = False
        try:
            async with self._lock:
                self.waiting -= 1
                acquired = True
                if self.behind:
                    await self.drain()
                yield
        finally:
            if not acquired:
                self.waiting -= 1

    def timed(self, op: str, cost: int, kwargs: dict[str, Any], **more: Any) -> Any:
        """Dispatch ``op`` and add its call count, seconds and bytes to the stats."""
        start = time.perf_counter()
        result = self.dispatch(op, **kwargs, **more)
        st = self.op_stats[op]
        st[0] += 1
        st[1] += time.perf_counter() - start
        st[2] += cost
        return result

    def close(self) -> None:
        self.drop_behind()
        self.blocks.clear()
        self.shadows.clear()
        self.reserved.clear()
        self.txns.clear()
        for ex in (self._executor, self._io):
            if ex is not None:
                ex.shutdown(wait=False)
        self._executor = self._io = None

    @property
    def nbytes(self) -> int:
        return sum(b.nbytes for b in self.blocks.values())


# -- built-in operations -------------------------------------------------------


@server_async_op("ping")
async def _ping(server: PSServer, payload: Any = None) -> Any:
    """Answered by the worker's event loop without the server lock: a server busy
    with long operations is alive (the heartbeat must not restart it), a hung
    process is not."""
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


def as_index(x: Any) -> np.ndarray | None:
    """A part's local index: callers send short ones as plain lists (no frame)."""
    if x is None or isinstance(x, np.ndarray):
        return x
    return np.asarray(x, dtype=np.int64)


def _plain_indices(parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for p in parts:
        for k in ("rows", "cols"):
            if k in p and not isinstance(p[k], np.ndarray):
                p[k] = as_index(p[k])
    return parts


@server_op("get")
def _get(
    server: PSServer, array: str, parts: list[dict[str, Any]], lend: bool = False
) -> list[np.ndarray]:
    """Read parts of blocks: new arrays, never views of live blocks.  With ``lend``
    (the comm handler, which only serialises the reply) a whole dense block is
    sent as is and copied before its next write instead (``DenseBlock.get``)."""
    parts = _plain_indices(parts)
    blocks = [server.block(array, int(p["block"])) for p in parts]
    for b, p in zip(blocks, parts, strict=True):
        b.check(p["rows"], p["cols"])
    if lend:
        return [
            b.get(p["rows"], p["cols"], lend=True)  # type: ignore[call-arg]
            if isinstance(b, DenseBlock)
            else b.get(p["rows"], p["cols"])
            for b, p in zip(blocks, parts, strict=True)
        ]
    return [b.get(p["rows"], p["cols"]) for b, p in zip(blocks, parts, strict=True)]


def seen_tag(server: PSServer, tag: list[Any] | None) -> bool:
    """True if a write with this ``[writer_id, seq]`` tag was applied here already."""
    if tag is None:
        return False
    return int(tag[1]) in server.applied.get(str(tag[0]), ())


def unapplied(
    server: PSServer, tag: list[Any] | None, array: str, parts: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The parts of a tagged write this server has not applied yet.

    Tags are remembered per block: a write resent after some of its blocks moved
    here (recovery) applies those parts even though this server applied the same
    tag to its other blocks before.
    """
    if tag is None:
        return parts
    seqs = server.applied.get(str(tag[0]))
    done = seqs.get(int(tag[1])) if seqs is not None else None
    if not done:
        return parts
    return [p for p in parts if (array, int(p["block"])) not in done]


def record_tag(
    server: PSServer,
    tag: list[Any] | None,
    array: str = "",
    parts: list[dict[str, Any]] = (),  # type: ignore[assignment]
) -> None:
    """Remember that ``parts`` of a tagged write were applied (the most recent
    ``write-tag-memory`` tags per writer are kept)."""
    if tag is None:
        return
    seqs = server.applied.setdefault(str(tag[0]), OrderedDict())
    done = seqs.setdefault(int(tag[1]), set())
    done.update((array, int(p["block"])) for p in parts)
    limit = int(config.get("daskangel.server.write-tag-memory"))
    while len(seqs) > limit:
        seqs.popitem(last=False)


def _dense_values(server: PSServer, kwargs: dict[str, Any]) -> bool:
    """Write-behind for updates of dense blocks by dense values (memory-bound adds
    and copies); packed and coordinate parts, and sparse blocks, apply in place."""
    array = kwargs["array"]
    for p in kwargs["parts"]:
        if "coo_rows" in p or "packed" in p:
            return False
        if not isinstance(server.blocks.get((array, int(p["block"]))), DenseBlock):
            return False
    return True


@server_op("update", writes=True, defer=_dense_values)
def _update(
    server: PSServer,
    array: str,
    parts: list[dict[str, Any]],
    add: bool,
    tag: list[Any] | None = None,
    clock: int | None = None,
    defer: bool = False,
) -> bool | Deferred:
    """Apply writes to blocks; ``False`` when ``tag`` shows it was applied before.

    ``clock`` is the writer's clock (``None`` outside training), for snapshot cuts.
    With ``defer``, every part is checked now and a :class:`Deferred` returned whose
    ``apply`` writes them (the tag counts as applied from now on).
    """
    parts = unapplied(server, tag, array, _plain_indices(parts))
    if not parts:
        return False
    blocks = [server.block(array, int(p["block"])) for p in parts]
    for b, p in zip(blocks, parts, strict=True):
        if "coo_rows" in p:
            b.check(p["coo_rows"], p["coo_cols"])
        elif "packed" in p:
            _check_packed(b, p, add)
        else:
            b.check(p["rows"], p["cols"])

    def apply() -> None:
        for b, p in zip(blocks, parts, strict=True):
            if "packed" in p:
                fn = lambda blk, p=p: blk.update_packed(int(p["rows"][0]), p["packed"])  # noqa: E731
            elif "coo_rows" in p:
                fn = lambda blk, p=p: blk.update_coo(p["coo_rows"], p["coo_cols"], p["values"], add)  # noqa: E731
            else:
                fn = lambda blk, p=p: blk.update(p["rows"], p["cols"], p["values"], add)  # noqa: E731
            server.write_block((array, int(p["block"])), b, clock, fn)

    if defer:
        record_tag(server, tag, array, parts)
        return Deferred(True, apply)
    apply()
    record_tag(server, tag, array, parts)
    return True


def _check_packed(b: Block, p: dict[str, Any], add: bool) -> None:
    """A packed part (one row, ``col << 32 | value bits``) is an add of 4-byte values."""
    packed = p["packed"]
    if not add or b.dtype.itemsize != 4 or len(p["rows"]) != 1:
        raise InvalidArgumentError(
            "packed: packed columns and values are for increments of one row of a 4-byte dtype"
        )
    b.check(p["rows"], None)
    if packed.shape[0]:
        lo, hi = int(packed.min()) >> PACK_SHIFT, int(packed.max()) >> PACK_SHIFT
        b.check(None, np.array([lo, hi]))


@server_op("fill", writes=True)
def _fill(
    server: PSServer, array: str, parts: list[dict[str, Any]], value: Any, clock: int | None = None
) -> None:
    found = [server.block(array, int(p["block"])) for p in parts]
    for b, p in zip(found, parts, strict=True):
        server.write_block((array, int(p["block"])), b, clock, lambda blk: blk.fill(value))


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
        self.receive_pool = ReceivePool()

    def setup(self, worker: Worker) -> None:
        self.worker = worker
        worker.handlers["daskangel_ps"] = self.handle

    def teardown(self, worker: Worker) -> None:
        # the handler stays: a request racing with the worker's shutdown then gets
        # a clean StaleLayoutError (no block here) instead of a KeyError in Dask
        for s in self.servers.values():
            s.close()
        self.servers.clear()

    def server(self, index: int) -> PSServer:
        s = self.servers.get(index)
        if s is None:
            assert self.worker is not None
            s = self.servers[index] = PSServer(self.worker.address, index)
        return s

    async def _run(
        self, ps_op: str, server: int, cost: int, kwargs: dict[str, Any], received: bool
    ) -> Any:
        srv = self.server(int(server))
        afn = ASYNC_OPS.get(ps_op)
        if afn is not None:
            return await afn(srv, **kwargs)
        return await srv.run(ps_op, cost, may_defer=received, **kwargs)

    async def handle(
        self,
        comm: Any,
        ps_op: str,
        server: int,
        cost: int = 0,
        pad: Any = None,
        follow: list[list[Any]] | None = None,
        **kwargs: Any,
    ) -> Any:
        """The ``daskangel_ps`` comm handler: run ``ps_op`` and frame its arrays.

        Replies never carry views of live blocks: Dask's TCP comm returns from
        ``write`` before the bytes leave, so a view of a block could change on the
        wire.  A whole dense block is *lent* instead of copied (``get``'s ``lend``):
        the block copies itself before its next write.  Expected errors (bad index,
        stale layout) go back to the caller without an error log on the worker.

        ``follow``: some of the parts' arrays (``[[part, field, bytes], ...]``) come
        in the next message on ``comm``, read here
        into reused buffers (:mod:`._recvpool`) before anything else happens, so a
        request that fails still leaves the comm in step.
        """
        if comm is not None:
            comm.allow_offload = False  # as the caller's side (daskangel._recv)
        if follow is not None:
            arrays = await read_follow(comm, follow, self.receive_pool)
            parts = kwargs.get("parts")
            try:
                for (i, field, _), a in zip(follow, arrays, strict=True):
                    parts[i][field] = a  # type: ignore[index]
            except (TypeError, IndexError, KeyError, ValueError):
                return error_reply(
                    InvalidArgumentError("follow: expected [[part, field, bytes], ...]")
                )
        if ps_op == "get":
            kwargs["lend"] = True
            if all(p.get("rows") is None and p.get("cols") is None for p in kwargs["parts"]):
                cost = 0  # whole dense blocks are lent, not copied: no work to offload
        try:
            reply = await self._run(ps_op, server, cost, unwrap_arrays(kwargs), True)
            return wrap_arrays(reply)
        except DaskAngelError as e:
            return error_reply(e)

    async def call_local(self, op: str, server: int, cost: int = 0, **kwargs: Any) -> Any:
        """The same call from this worker's own process: nothing is serialised (so
        nothing is applied behind the reply: the caller may reuse its arrays)."""
        return await self._run(op, server, cost, kwargs, False)


def get_worker_loop() -> Any:
    from distributed import get_worker

    return get_worker().loop


class PSServerActor:
    """A PS server as a Dask actor (the ``"actors"`` transport).

    Calls arrive through the worker's ``actor_execute`` handler and run one at a
    time in the worker's actor thread, which makes each operation atomic.
    """

    def __init__(self, index: int) -> None:
        from distributed import get_worker

        self.server = PSServer(get_worker().address, index)

    def call(self, op: str, kwargs: dict[str, Any], pad: Any = None) -> Any:
        """Run ``op``; ``pad`` is the alignment frame every call carries (``_wire``)."""
        try:
            return self._call(op, kwargs)
        except DaskAngelError as e:
            return error_reply(e)

    def _call(self, op: str, kwargs: dict[str, Any]) -> Any:
        if op in ASYNC_OPS:
            from distributed.utils import sync

            return sync(get_worker_loop(), ASYNC_OPS[op], self.server, **kwargs)
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
