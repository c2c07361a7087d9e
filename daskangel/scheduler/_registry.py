"""The array registry: which arrays exist, their layout and which server holds each block.

This is the master's partition metadata in Angel's terms.  It lives on the
scheduler, inside :class:`~daskangel.scheduler.DaskAngelSchedulerPlugin`, and is
reached through comm handlers whose payloads are plain values only.  Array
metadata is a plain dict built by the client (see ``daskangel.psarray._meta``);
the registry adds ``servers`` (one ``[address, index]`` pair per block),
``generation`` (bumped whenever blocks move) and ``ctx``.

Example
-------
A client opens a context, creates an array, and reads its metadata back::

    servers = await scheduler.daskangel_open(ctx="c1", servers_per_worker=1)
    meta = await scheduler.daskangel_create(ctx="c1", meta={...}, blocks=[...])
    meta = await scheduler.daskangel_meta(name="w")
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from dask.utils import format_bytes
from distributed.comm.core import CommClosedError
from distributed.protocol import Serialized, deserialize

from .. import config
from .._wire import call_server
from ..errors import (
    ArrayExistsError,
    ArrayNotFoundError,
    ContextClosedError,
    DaskAngelError,
    InvalidArgumentError,
    ServerLostError,
    ServerMemoryError,
)
from ._membership import ServerMembershipMixin
from ._placement import place_blocks

if TYPE_CHECKING:
    from distributed.scheduler import Scheduler

__all__ = ["ArrayRegistry"]


logger = logging.getLogger(__name__)

ServerId = tuple[str, int]
_CLOSED_MEMORY = 10_000


class ArrayRegistry(ServerMembershipMixin):
    """Array metadata and block placement, owned by the scheduler plugin."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        # {ctx_id: [(worker_address, server_index), ...]}
        self.ctx_servers: dict[str, list[ServerId]] = {}
        # {ctx_id: "handlers" | "actors"}
        self.ctx_transport: dict[str, str] = {}
        # {array_name: meta dict, with "servers", "generation", "ctx", "blocks"}
        self.arrays: dict[str, dict[str, Any]] = {}
        # {array_name: ctx_id} for arrays freed by a closed context (bounded memory)
        self.closed: OrderedDict[str, str] = OrderedDict()
        # {array_name: asyncio.Event} set when a pending create finishes
        self._pending: dict[str, asyncio.Event] = {}
        # {ctx_id: {"workers", "servers_per_worker", "resource"}} how servers were chosen
        self.ctx_select: dict[str, dict[str, Any]] = {}
        # callbacks run when a context closes (other services forget it)
        self.on_close: list[Callable[[str], None]] = []
        # awaited with an array's name before its blocks are freed (the snapshot
        # service lets a snapshot writing it finish)
        self.before_drop: list[Callable[[str], Awaitable[None]]] = []
        # events of callers in wait_meta, set on every metadata change
        self._waiters: set[asyncio.Event] = set()
        # the plugin's Lifecycle (not imported: it imports this module): is the
        # cluster closing?  None outside the plugin
        self.lifecycle: Any = None
        scheduler.handlers.update(
            {
                "daskangel_open": self.open,
                "daskangel_close": self.close,
                "daskangel_create": self.create,
                "daskangel_drop": self.drop,
                "daskangel_meta": self.meta,
                "daskangel_list": self.list_arrays,
                "daskangel_wait_meta": self.wait_meta,
                "daskangel_servers": self.servers,
            }
        )

    # -- contexts -----------------------------------------------------------

    async def open(
        self,
        ctx: str,
        workers: list[str] | None = None,
        servers_per_worker: int = 1,
        resource: str | None = None,
        transport: str = "handlers",
    ) -> list[list[Any]]:
        """Choose the PS servers of a new context and start them (by pinging)."""
        if servers_per_worker < 1:
            raise InvalidArgumentError(
                f"servers_per_worker: expected >= 1, got {servers_per_worker}"
            )
        known = self.scheduler.workers
        if workers:
            missing = [w for w in workers if w not in known]
            if missing:
                raise InvalidArgumentError(f"workers: not workers of this cluster: {missing}")
            chosen = list(workers)
        elif resource:
            chosen = [a for a, ws in known.items() if ws.resources.get(resource, 0) > 0]
            if not chosen:
                raise InvalidArgumentError(f"resource: no worker carries the resource {resource!r}")
        else:
            chosen = sorted(known)
        if not chosen:
            raise InvalidArgumentError("client: the cluster has no workers to run PS servers on")
        servers = [(a, i) for a in chosen for i in range(servers_per_worker)]
        if transport == "handlers":  # actors are started by the client afterwards
            await asyncio.gather(*(self.call(s, "ping", transport) for s in servers))
        self.ctx_servers[ctx] = servers
        self.ctx_transport[ctx] = transport
        self.ctx_select[ctx] = {
            "workers": workers,
            "servers_per_worker": servers_per_worker,
            "resource": resource,
        }
        return [list(s) for s in servers]

    async def close(self, ctx: str) -> list[str]:
        """Free every array of a context; later use of them says the context closed."""
        names = [n for n, m in self.arrays.items() if m["ctx"] == ctx]
        await asyncio.gather(*(self.drop(n, forget=False) for n in names), return_exceptions=True)
        await self.forget_everywhere(names)
        for n in names:
            self.closed[n] = ctx
        while len(self.closed) > _CLOSED_MEMORY:
            self.closed.popitem(last=False)
        self.ctx_servers.pop(ctx, None)
        self.ctx_transport.pop(ctx, None)
        self.ctx_select.pop(ctx, None)
        for cb in self.on_close:
            cb(ctx)
        return names

    # -- arrays -------------------------------------------------------------

    def load(self) -> dict[ServerId, int]:
        """Bytes placed on each server so far: ``{server: bytes}``."""
        out: dict[ServerId, int] = {}
        for m in self.arrays.values():
            for s, b in zip(m["servers"], m["blocks"], strict=True):
                key = (s[0], s[1])
                out[key] = out.get(key, 0) + int(b["bytes"])
        return out

    async def create(
        self, ctx: str, meta: dict[str, Any], blocks: list[dict[str, Any]], like: str | None = None
    ) -> dict[str, Any]:
        """Place and create an array's blocks; return its full metadata.

        With ``like``, block ``b`` goes to the server holding block ``b`` of that
        array (co-partitioning, which binary psfs require).
        """
        name = meta["name"]
        if ctx not in self.ctx_servers:
            raise ContextClosedError(f"ctx: PSContext {ctx!r} is not open")
        if name in self.arrays or name in self._pending:
            raise ArrayExistsError(
                f"name: an array named {name!r} already exists; pick another name or drop it first"
            )
        event = self._pending[name] = asyncio.Event()
        # this creation's identity: caches of an earlier array of the same name
        # (handles, worker processes, requests in flight) are told apart by it
        uid = uuid.uuid4().hex[:16]
        blocks = [{**b, "uid": uid} for b in blocks]
        try:
            servers = self.ctx_servers[ctx]
            if like is not None:
                other = await self.meta(like)
                if len(other["servers"]) != len(blocks):
                    raise InvalidArgumentError(
                        f"like: array {like!r} has a different number of blocks"
                    )
                placed = [(s[0], int(s[1])) for s in other["servers"]]
            else:
                placed = place_blocks([int(b["bytes"]) for b in blocks], servers, self.load())
            self._check_memory(name, blocks, placed)
            per_server: dict[ServerId, list[dict[str, Any]]] = {}
            for b, s in zip(blocks, placed, strict=True):
                per_server.setdefault(s, []).append(b)
            results = await asyncio.gather(
                *(
                    self.call(s, "create", meta["transport"], array=name, blocks=bl)
                    for s, bl in per_server.items()
                ),
                return_exceptions=True,
            )
            errors = [r for r in results if isinstance(r, BaseException)]
            if errors:
                await self._drop_blocks(name, list(per_server), meta["transport"])
                raise errors[0]
            full = dict(meta)
            full.update(
                servers=[list(s) for s in placed],
                generation=1,
                uid=uid,
                ctx=ctx,
                blocks=blocks,
            )
            self.arrays[name] = full
            self.closed.pop(name, None)
            return full
        finally:
            del self._pending[name]
            event.set()

    def _check_memory(
        self, name: str, blocks: list[dict[str, Any]], placed: list[ServerId]
    ) -> None:
        """Refuse dense blocks that would push a worker past its share of memory
        (``daskangel.server.max-memory-fraction`` of its memory limit): Dask would
        restart it, losing the blocks of every array it holds."""
        new: dict[str, int] = {}
        for b, s in zip(blocks, placed, strict=True):
            if b["kind"] == "dense":
                new[s[0]] = new.get(s[0], 0) + int(b["bytes"])
        if not new:
            return
        over = self.memory_overruns(new)
        if over:
            total = sum(new.values())
            raise ServerMemoryError(
                f"name: array {name!r} needs {format_bytes(total)} of dense blocks, more than "
                f"the PS servers' memory allows: {'; '.join(over)} "
                "(daskangel.server.max-memory-fraction of each worker's memory limit). "
                "Nothing was created: use a sparse array, a smaller dtype, more workers or "
                "more memory per worker"
            )

    def memory_overruns(self, new: dict[str, int]) -> list[str]:
        """One line a worker that ``new`` more bytes of dense blocks would push past
        ``daskangel.server.max-memory-fraction`` of its memory limit, counting the
        dense blocks it holds already; ``[]`` when everything fits.

        ``new`` is ``{worker_address: bytes}``.  Creating an array and moving blocks
        off leaving workers both refuse with these lines.
        """
        frac = float(config.get("daskangel.server.max-memory-fraction"))
        held: dict[str, int] = {}  # {worker_address: bytes of dense blocks held now}
        for m in self.arrays.values():
            for b, s in zip(m["blocks"], m["servers"], strict=True):
                if b["kind"] == "dense":
                    held[s[0]] = held.get(s[0], 0) + int(b["bytes"])
        over = []
        for addr, add in sorted(new.items()):
            ws = self.scheduler.workers.get(addr)
            limit = int(getattr(ws, "memory_limit", 0) or 0)
            now = held.get(addr, 0)
            if limit and now + add > frac * limit:
                over.append(
                    f"worker {addr} would hold {format_bytes(now + add)} of dense blocks "
                    f"({format_bytes(add)} more, {format_bytes(now)} held already) where "
                    f"its memory limit {format_bytes(limit)} x {frac} allows "
                    f"{format_bytes(int(frac * limit))}"
                )
        return over

    async def drop(self, name: str, forget: bool = True) -> bool:
        """Free an array's blocks and forget it, here and in every worker process."""
        meta = self.arrays.pop(name, None)
        if meta is None:
            return False
        for wait in self.before_drop:
            await wait(name)
        lost = set(meta.get("lost", ()))
        servers = {(s[0], s[1]) for b, s in enumerate(meta["servers"]) if b not in lost}
        await self._drop_blocks(name, list(servers), meta["transport"])
        if forget:
            await self.forget_everywhere([name])
        return True

    async def forget_everywhere(self, names: list[str]) -> None:
        """Tell every worker process to forget what it cached of the freed arrays
        (metadata, pulled rows, key lists, buffered increments), so a new array of
        the same name is used with its own shape and dtype from the next task on.
        Workers without the PS plugin, or leaving, are skipped."""
        if not names or not self.scheduler.workers:
            return
        if getattr(self.scheduler.status, "name", "running") != "running":
            return  # the scheduler is closing: the workers go with their caches

        async def send(addr: str) -> None:
            # not Scheduler.broadcast: it logs an ERROR for every worker it cannot
            # reach, even with on_error="ignore", which a clean shutdown hit
            with contextlib.suppress(Exception):
                await self.scheduler.rpc(addr=addr).daskangel_forget(names=names)

        with contextlib.suppress(Exception):
            await asyncio.wait_for(
                asyncio.gather(*(send(a) for a in list(self.scheduler.workers))),
                config.get_seconds("daskangel.context.start-timeout"),
            )

    async def meta(self, name: str) -> dict[str, Any]:
        """Metadata of an array; waits for a create in flight."""
        event = self._pending.get(name)
        if event is not None:
            await event.wait()
        try:
            return self.arrays[name]
        except KeyError:
            if name in self.closed:
                raise ContextClosedError(
                    f"name: array {name!r} was freed when its PSContext closed"
                ) from None
            raise ArrayNotFoundError(
                f"name: no array named {name!r}; known arrays: {sorted(self.arrays)[:20]}"
            ) from None

    def list_arrays(self, ctx: str | None = None, created: bool = False) -> list[str]:
        """Array names, sorted (``created``: in creation order)."""
        names = [n for n, m in self.arrays.items() if ctx is None or m["ctx"] == ctx]
        return names if created else sorted(names)

    # -- waiting for changes -------------------------------------------------

    def notify(self) -> None:
        """Wake callers waiting in :meth:`wait_meta` (an array's metadata changed)."""
        for event in self._waiters:
            event.set()

    async def wait_meta(self, name: str, generation: int, timeout: float) -> dict[str, Any]:
        """Metadata of ``name`` once its generation passes ``generation`` and no
        recovery is running, or after ``timeout`` seconds, whichever is first."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        event = asyncio.Event()
        self._waiters.add(event)
        try:
            while True:
                m = self.arrays.get(name)
                if m is None or (m["generation"] > generation and not m.get("recovering")):
                    break
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                event.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(event.wait(), remaining)
        finally:
            self._waiters.discard(event)
        return await self.meta(name)

    # -- server calls -------------------------------------------------------

    async def call(self, server: ServerId, op: str, transport: str, **kwargs: Any) -> Any:
        """Run an operation on a PS server from the scheduler (a server on a worker
        that has left fails at once instead of waiting out a connect timeout)."""
        addr, index = server
        if addr not in self.scheduler.workers:
            raise ServerLostError(f"PS server {addr}#{index} has left the cluster")
        try:
            reply = await call_server(self.scheduler.rpc, addr, index, op, transport, 0, kwargs)
        except (OSError, CommClosedError) as e:
            if isinstance(e, DaskAngelError):
                raise
            # a CommClosedError escaping a scheduler handler would make Dask drop the
            # *caller's* connection too; report the lost server as such instead
            raise ServerLostError(f"PS server {addr}#{index} is unreachable: {e!r}") from e
        if isinstance(reply, Serialized):
            # an actor's reply reaches the scheduler still serialised (it deserialises
            # nothing it is sent); the status service reads the stats dict in it
            reply = deserialize(reply.header, reply.frames)
        return reply

    async def _drop_blocks(self, name: str, servers: list[ServerId], transport: str) -> None:
        results = await asyncio.gather(
            *(self.call(s, "drop", transport, array=name) for s in servers),
            return_exceptions=True,
        )
        for s, r in zip(servers, results, strict=True):
            if isinstance(r, BaseException) and not isinstance(r, DaskAngelError):
                logger.info("daskangel: could not free %s on %s: %s", name, s, r)
