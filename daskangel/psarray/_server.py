"""The PS server: blocks held on a Dask worker and the operations on them.

:class:`PSServer` is storage plus operations, with no Dask in it.  Operations are
plain functions registered by name with :func:`server_op` (other modules add their
own, e.g. psf execution or snapshot writing), and take and return plain values and
numpy arrays.  A server runs one operation at a time: every operation holds the
server's lock, so an increment of a block is atomic with respect to a get of it.
Updates are acknowledged once validated and applied right after, before any later
operation but another update (write-behind, :mod:`._behind`).

The built-in operations live in :mod:`._dataops`, the transports' endpoints (the
comm handler of :class:`~._endpoints.PSWorkerPlugin`, the actor) in
:mod:`._endpoints`.  Small requests run on the worker's event loop; larger ones in
the server's own thread, so heartbeats keep flowing while a big block is updated.
The first request of each kind on each array also runs in the thread: it may
compile the operation's numba kernels, which takes seconds on a cold cache (a
fresh checkout) and must not stall the worker's event loop.

Example
-------
>>> import numpy as np
>>> from daskangel.psarray._initspec import InitSpec
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

from .. import config
from ..errors import BlockMovingError, InvalidArgumentError, RolledBackError, StaleLayoutError
from ._behind import DEFERRABLE_OPS, Deferred, WriteBehind
from ._blocks import DenseBlock, SparseBlock
from ._holds import WRITE_OPS, Holds, Prepared

if TYPE_CHECKING:
    pass

__all__ = [
    "PLUGIN_NAME",
    "WRITE_OPS",
    "PSServer",
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


def op_counters() -> list[float]:
    """A fresh ``[calls, seconds, cost, bytes in, bytes out]`` of one op."""
    return [0, 0.0, 0, 0, 0]


_SCATTERED = ("csr_rows", "coo_rows", "packed")  # update parts written entry by entry


def _inline_limit(op: str, kwargs: dict[str, Any]) -> int:
    """The cost below which ``op`` runs on the event loop: gets (a gather) and
    updates made of compressed-row, coordinate or packed parts (a scatter) cost
    about a memcpy of their bytes, less than the two hops to the server's thread
    and back (each a wait for a core on a loaded machine: 5-12 ms measured for a
    10,000-row sparse increment under load 3-4, its apply 1-3 ms)."""
    if op in ("get", "get_rows"):
        return config.get_bytes("daskangel.server.inline-get-bytes")
    parts = kwargs.get("parts") if op == "update" else None
    if parts and all(any(k in p for k in _SCATTERED) for p in parts):
        return config.get_bytes("daskangel.server.inline-scatter-bytes")
    return config.get_bytes("daskangel.server.inline-bytes")


def _scattered_behind(op: str, kwargs: dict[str, Any]) -> bool:
    """True for an update made only of compressed-row, coordinate or packed parts
    while ``daskangel.server.behind-scattered`` is on: write-behind however small.
    Its scatter (an LDA-shaped 10,000 x 20 increment: ~100,000 cold lines, ~1.5 ms a
    server) then follows the reply instead of preceding it, so the caller's next
    steps overlap it; on the event loop under ``inline-scatter-bytes``, in the
    server's thread from there (as when applied before replying)."""
    parts = kwargs.get("parts") if op == "update" else None
    return bool(
        parts
        and config.get("daskangel.server.behind-scattered")
        and all(any(k in p for k in _SCATTERED) for p in parts)
    )


class PSServer(Holds, WriteBehind):
    """One parameter server: the blocks it holds, its statistics, its lock."""

    def __init__(self, address: str, index: int) -> None:
        self.address = address
        self.index = index
        # {(array_name, block_id): Block}
        self.blocks: dict[tuple[str, int], Block] = {}
        # {array_name: uid of the creation whose blocks this server holds}
        self.uids: dict[str, str] = {}
        # {op_name: [calls, seconds, cost, payload bytes in, payload bytes out]}: cost
        # is the caller's estimate of the work (inline vs thread), the payload bytes
        # are the arrays the requests carried and the replies returned (counted by
        # the endpoints, ``_wire.payload_nbytes``): what ``ps.status()`` reports
        self.op_stats: defaultdict[str, list[float]] = defaultdict(op_counters)
        self.waiting = 0
        # buffers a get's rows are gathered into for a reply (a ``ReceivePool`` the
        # comm handler's plugin sets; None: new arrays), reused once sent
        self.reply_pool: Any = None
        # {writer_id: OrderedDict(seq -> {(array, block) applied})}: recently applied
        # write tags, so a retried write is applied exactly once per block
        self.applied: dict[str, OrderedDict[int, set[tuple[str, int]]]] = {}
        # {job: epoch}: a job rolled back to a snapshot; its writes tagged with an older
        # epoch (runs the rollback abandoned) are refused (``check_fence``)
        self.fences: dict[str, int] = {}
        # pending consistent cut (snapshot): active?, its clock (None: "now"), and
        # {(array_name, block_id): copy of the block as of the cut} (copy-on-write)
        self.cut_active = False
        self.cut_clock: int | None = None
        self.cut_id: str | None = None
        self.shadows: dict[tuple[str, int], Block] = {}
        # {restore_token: [((array_name, block_id), Block), ...]} read, not yet installed
        self.staged: dict[str, list[tuple[tuple[str, int], Block]]] = {}
        # {(array_name, block_id): "address#index"} blocks being (or just) handed to
        # another server: requests for them wait for the new routing (_handoff_ops)
        self.moving: dict[tuple[str, int], str] = {}
        # how this server reaches another one: ``await peer(address, index, op,
        # kwargs)`` (set by the worker plugin; None outside a Dask worker)
        self.peer: Callable[[str, int, str, dict[str, Any]], Awaitable[Any]] | None = None
        self._io: ThreadPoolExecutor | None = None
        self._lock: asyncio.Lock | None = None
        self.init_holds()
        self.init_behind()
        self._executor: ThreadPoolExecutor | None = None
        # {(op, array_name)} run once here: their compiled kernels are loaded
        self._warm: set[tuple[str, Any]] = set()

    def block(self, array: str, block: int) -> Block:
        try:
            return self.blocks[(array, block)]
        except KeyError:
            to = self.moving.get((array, block)) if self.moving else None
            if to is not None:
                raise BlockMovingError(
                    f"server {self.address}#{self.index} is handing block {block} of array "
                    f"{array!r} to server {to}"
                ) from None
            raise StaleLayoutError(
                f"server {self.address}#{self.index} holds no block {block} of array {array!r}"
            ) from None

    def check_uid(self, kwargs: dict[str, Any]) -> None:
        """Refuse a request planned for another array of the same name.

        ``kwargs["uid"]`` (removed here) is the creation the caller's metadata
        describes; the caller then refreshes its metadata.
        """
        uid = kwargs.pop("uid", None)
        if uid is None:
            return
        array = kwargs.get("array")
        held = self.uids.get(array)  # type: ignore[arg-type]
        if held is not None and held != uid:
            raise StaleLayoutError(
                f"server {self.address}#{self.index}: array {array!r} was dropped and "
                "created again since the caller read its metadata"
            )

    def check_fence(self, fence: list[Any] | None, array: str) -> None:
        """Refuse a write of a training run a rollback abandoned.

        ``fence`` is the writer's ``[job, epoch]`` (``None``: not a training task's
        write).  Once the scheduler has fenced ``job`` at a newer epoch here (the
        rollback's first step, before its restore), such a write would land on the
        restored state: :class:`RolledBackError` instead, nothing applied.
        """
        if fence is None or not self.fences:
            return
        job, epoch = str(fence[0]), int(fence[1])
        now = self.fences.get(job)
        if now is not None and epoch < now:
            raise RolledBackError(
                f"fence: a write to array {array!r} by run {epoch} of job {job!r} is refused: "
                f"the job rolled back to a snapshot and runs as run {now} since"
            )

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
        the queued writes; so does an update made only of scattered parts
        (:func:`_scattered_behind`), however small.  (The lock is taken
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
            # the first run of an op on an array may compile (or load) its numba
            # kernels, seconds on a cold cache: never on the event loop, where it
            # would stall every request and heartbeat of the worker meanwhile
            warm = (op, kwargs.get("array"))
            first = warm not in self._warm
            small = not first and cost < _inline_limit(op, kwargs)
            deferrable = DEFERRABLE_OPS.get(op) if may_defer and not first else None
            scattered = deferrable is not None and _scattered_behind(op, kwargs)
            if deferrable and (self.behind or not small or scattered) and deferrable(self, kwargs):
                out = self.timed(op, cost, kwargs, defer=True)
                if not isinstance(out, Deferred):
                    return out
                return self.defer(op, cost, out, in_thread=not small if scattered else None)
            if self.behind:
                await self.drain()
            if small:
                return self.timed(op, cost, kwargs)
            loop = asyncio.get_running_loop()
            out = await loop.run_in_executor(self.executor, lambda: self.timed(op, cost, kwargs))
            self._warm.add(warm)
            return out
        finally:
            # a commit or abort may have freed blocks that writes wait for
            assert self._cond is not None
            self._cond.notify_all()
            lock.release()

    def idle(self) -> bool:
        """True when nothing holds or waits for the lock and no write is queued
        behind a reply: a read run now on the event loop (no ``await``) then sees
        every write made before it, as if it had taken the lock."""
        lock = self._lock
        return (lock is None or not lock.locked()) and not self.waiting and not self.behind

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
        self.moving.clear()
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
