"""Rebalancing: blocks move so that a context's servers hold about equal bytes.

A mixin of :class:`~daskangel.scheduler._handoff.HandoffService`: the moves use
the hand-off's protocol (freeze, copy worker to worker, switch routing; requests
in flight wait and resend), so ``ps.rebalance()`` runs online.  One move at a
time: a rebalance asked for while another one or a hand-off runs is refused
with :class:`~daskangel.errors.InvalidStateError` (nothing is queued).

With ``daskangel.ps.rebalance-on-join`` (the default), a worker joining a
context that runs servers on every worker (``cluster.scale`` up, adaptive
scaling, a nanny's replacement) starts a rebalance of that context once no
other worker has joined for ``daskangel.ps.rebalance-delay`` and the new
workers' PS servers answer; it waits for a running move instead of being
refused, and a failure is retried (``daskangel.recovery.retry-interval``,
``attempts``) then logged: the blocks stay where they are, nothing is lost.

Example
-------
``await scheduler.daskangel_rebalance(ctx="c1")`` returns ``{"blocks", "bytes",
"seconds"}`` moved and ``"deferred"``: True when a rebuild of lost blocks was
running or due, so nothing moved (the plan is made under the context's lock,
which a rebuild holds, so arrays placed alike are never split by one).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from .. import config
from ..errors import ContextClosedError, InvalidStateError
from ._moves import BlockMover
from ._placement import balance_moves

if TYPE_CHECKING:
    from ._registry import ArrayRegistry
    from ._snapshots import SnapshotService

__all__ = ["Rebalancer"]

logger = logging.getLogger(__name__)
ServerId = tuple[str, int]


class Rebalancer(BlockMover):
    """``daskangel_rebalance``: even out the bytes per server of a context."""

    registry: ArrayRegistry
    snapshots: SnapshotService
    leaving: set[str]
    stats: dict[str, Any]
    _lock: asyncio.Lock
    # joins waiting for their rebalance: contexts, workers, the debounce deadline
    _join_ctxs: set[str]
    _joined: set[str]
    _join_at: float
    _join_task: asyncio.Task[None] | None

    def _running(self, addr: str) -> bool:
        raise NotImplementedError

    async def rebalance(self, ctx: str) -> dict[str, Any]:
        """Move blocks of ``ctx`` so that its servers hold about the same bytes
        (e.g. after workers joined), online, with the hand-off's protocol.

        Raises :class:`~daskangel.errors.InvalidStateError` when a rebalance or a
        hand-off is already running (nothing is queued: call again after it).
        """
        if ctx not in self.registry.ctx_servers:
            raise ContextClosedError(f"ctx: PSContext {ctx!r} is not open")
        if self._lock.locked():
            raise InvalidStateError(
                "rebalance: a rebalance or a hand-off of leaving workers is already "
                "running; call again once it has finished"
            )
        return await self._rebalance(ctx)

    async def _rebalance(self, ctx: str) -> dict[str, Any]:
        """The move itself; waits for a running move (hand-off or rebalance)."""
        start = time.perf_counter()
        moved = {"blocks": 0, "bytes": 0}
        async with self._lock, self.snapshots._lock(ctx):
            # planned under the context's lock, which a rebuild holds: a plan made
            # while a rebuild places blocks array by array would split arrays placed
            # alike (an optimiser's state from its weights) once the rebuild is done
            deferred = self._rebuilding(ctx)
            plan = {} if deferred else self._balance_plan(ctx)
            if plan:
                await self._move_ctx(ctx, plan, moved)
        seconds = time.perf_counter() - start
        if moved["blocks"]:
            self.stats["blocks"] += moved["blocks"]
            self.stats["bytes"] += moved["bytes"]
            self.stats["seconds"] += seconds
            self.stats["moves"] += 1
        return {**moved, "seconds": seconds, "deferred": deferred}

    # -- on join -----------------------------------------------------------------------

    def add_worker(self, worker: str) -> None:
        """A worker joined (the registry already gave it servers): with
        ``daskangel.ps.rebalance-on-join``, rebalance the contexts it serves that
        hold arrays, once the joins settle."""
        if not config.get("daskangel.ps.rebalance-on-join"):
            return
        reg = self.registry
        holding = {m["ctx"] for m in reg.arrays.values()}
        ctxs = {
            ctx
            for ctx, servers in reg.ctx_servers.items()
            if ctx in holding and any(s[0] == worker for s in servers)
        }
        if not ctxs:
            return
        self._join_ctxs |= ctxs
        self._joined.add(worker)
        loop = asyncio.get_running_loop()
        self._join_at = loop.time() + config.get_seconds("daskangel.ps.rebalance-delay")
        if self._join_task is None or self._join_task.done():
            self._join_task = asyncio.ensure_future(self._rebalance_joined())

    async def _rebalance_joined(self) -> None:
        loop = asyncio.get_running_loop()
        while self._join_ctxs:
            while (wait := self._join_at - loop.time()) > 0:  # no join for the delay
                await asyncio.sleep(wait)
            ctxs, workers = sorted(self._join_ctxs), sorted(self._joined)
            self._join_ctxs, self._joined = set(), set()
            if not await self._ready(workers):
                continue
            for ctx in ctxs:
                await self._rebalance_retrying(ctx)

    async def _ready(self, workers: list[str]) -> bool:
        """Wait until every joined worker still there runs (a registering worker is
        ``init`` for a while) and its PS plugin answers."""
        attempts = int(config.get("daskangel.recovery.attempts"))
        interval = config.get_seconds("daskangel.recovery.retry-interval")
        for _ in range(attempts):
            workers = [w for w in workers if w in self.registry.scheduler.workers]
            up = [w for w in workers if self._running(w)]
            results = await asyncio.gather(
                *(self.registry.call((w, 0), "stats", "handlers") for w in up),
                return_exceptions=True,
            )
            ok = {w for w, r in zip(up, results, strict=True) if not isinstance(r, Exception)}
            workers = [w for w in workers if w not in ok]
            if not workers:
                return True
            await asyncio.sleep(interval)
        logger.warning("daskangel: joined workers %s never served; no rebalance", workers)
        return False

    async def _rebalance_retrying(self, ctx: str) -> None:
        attempts = int(config.get("daskangel.recovery.attempts"))
        interval = config.get_seconds("daskangel.recovery.retry-interval")
        for attempt in range(1, attempts + 1):
            if ctx not in self.registry.ctx_servers:
                return
            if self._rebuilding(ctx):  # a rebuild (or rollback) places blocks first
                await asyncio.sleep(interval)
                continue
            try:
                done = await self._rebalance(ctx)
                if done["deferred"]:  # a rebuild began meanwhile: after it
                    await asyncio.sleep(interval)
                    continue
            except Exception as e:  # noqa: BLE001 - retried, then logged
                logger.warning(
                    "daskangel: rebalancing %s after workers joined failed (attempt %d of %d): %r",
                    ctx,
                    attempt,
                    attempts,
                    e,
                )
                await asyncio.sleep(interval)
                continue
            if done["blocks"]:
                logger.info(
                    "daskangel: rebalanced %d blocks of %s onto joined workers in %.2fs",
                    done["blocks"],
                    ctx,
                    done["seconds"],
                )
            return

    def _rebuilding(self, ctx: str) -> bool:
        return any(t.get_name() == ctx and not t.done() for t in self.snapshots._recovering) or any(
            m["ctx"] == ctx and m.get("lost") for m in self.registry.arrays.values()
        )

    def _balance_plan(self, ctx: str) -> dict[str, dict[int, ServerId]]:
        """``{array: {block: target}}`` evening out the bytes of ``ctx``'s servers:
        greedily the largest unit that still narrows the gap goes from the fullest
        server to the emptiest; arrays placed alike (co-partitioned) move alike."""
        reg = self.registry
        servers = [
            (s[0], int(s[1]))
            for s in reg.ctx_servers.get(ctx, [])
            if s[0] not in self.leaving and self._running(s[0])
        ]
        if len(servers) < 2:
            return {}
        # units: (arrays placed alike, block) with their bytes and server
        groups: dict[tuple[Any, ...], list[str]] = {}
        for name, m in reg.arrays.items():
            if m["ctx"] != ctx or m.get("lost") or m.get("transport", "handlers") != "handlers":
                continue
            key = (tuple(tuple(x) for x in m["servers"]), repr(m["layout"]))
            groups.setdefault(key, []).append(name)
        units: list[tuple[int, tuple[str, ...], int, ServerId]] = []
        for (placed, _), names in groups.items():
            for b, s in enumerate(placed):
                nbytes = sum(int(reg.arrays[n]["blocks"][b]["bytes"]) for n in names)
                units.append((nbytes, tuple(names), b, (s[0], int(s[1]))))
        plan: dict[str, dict[int, ServerId]] = {}
        for (_, group, b, _src), target in balance_moves(units, servers):
            for n in group:
                plan.setdefault(n, {})[b] = target
        return plan
