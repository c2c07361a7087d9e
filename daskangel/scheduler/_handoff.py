"""The hand-off: a worker leaving gracefully first moves its PS blocks away.

Dask retires a worker (``client.retire_workers``, ``cluster.scale`` down,
adaptive scaling, ``Worker.close_gracefully``) through the scheduler's
``retire_workers``, whose Active Memory Manager policy (``RetireWorker``) copies
the worker's *Dask* data elsewhere before the worker goes; nothing there knows
PS blocks, and the scheduler plugin's ``remove_worker`` hook runs only once the
worker is gone.  :class:`HandoffService` therefore wraps ``retire_workers`` (the
method and its comm handler): the leaving workers' blocks are moved first, then
Dask's own retirement runs.  A worker closing without being retired
(``worker.close()``, a nanny restart, SIGTERM) asks for the same from its PS
plugin's teardown (``daskangel_handoff``), while its handlers still answer.

A move (:meth:`HandoffService.handoff`), for every context with blocks on the
leaving workers:

1. the leaving workers' servers leave the context (nothing new is placed
   there); the target of each block is chosen on the remaining running
   servers by bytes (``place_blocks``), co-partitioned arrays together, and
   refused with :class:`~daskangel.errors.HandoffError` before anything moves
   when no server remains or the targets' memory would pass
   ``daskangel.server.max-memory-fraction``;
2. under the context's snapshot lock (no snapshot is written meanwhile; a cut
   begun by training moves with the blocks), the arrays placed alike move as
   one group (``_moves``): every source hands its blocks over
   (``psarray/_handoff_ops.py``: freeze, copy, install), then the routing of
   the whole group switches at once (generation + 1), waking callers waiting
   to resend.

Nothing is lost and no snapshot is read.  A failure puts the group's blocks
back on the source, aborts the retirement (the error reaches the caller) and
readmits the workers' servers.  Contexts using the ``actors`` transport are not
handed off (their servers are Dask actors): they keep snapshot recovery.

Example
-------
``client.retire_workers([holder])`` moves ``holder``'s blocks, then retires it;
``await scheduler.daskangel_handoff(workers=[holder])`` only moves them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from dask.utils import format_bytes
from distributed.core import Status

from .. import config
from ..errors import HandoffError
from ._placement import place_blocks
from ._rebalance import Rebalancer

if TYPE_CHECKING:
    from distributed.scheduler import Scheduler

    from ._registry import ArrayRegistry
    from ._snapshots import SnapshotService

__all__ = ["HandoffService"]

logger = logging.getLogger(__name__)
ServerId = tuple[str, int]
# keyword arguments of Scheduler.retire_workers that are not workers_to_close's
_RETIRE_KW = ("close_workers", "remove", "stimulus_id")


def _report_lost(lifecycle: Any, msg: str) -> None:
    """Blocks left to go with their closing workers: a warning, unless the whole
    cluster turns out to be closing (decided after the lifecycle's grace period;
    at once without one)."""

    def report(cluster_closing: bool) -> None:
        level = logging.INFO if cluster_closing else logging.WARNING
        logger.log(level, "daskangel: %s; they are lost with the workers", msg)

    if lifecycle is None:
        report(False)
    else:
        lifecycle.later(report)


class HandoffService(Rebalancer):
    """Moves the blocks of leaving workers; wraps the scheduler's ``retire_workers``."""

    def __init__(
        self, scheduler: Scheduler, registry: ArrayRegistry, snapshots: SnapshotService
    ) -> None:
        self.scheduler = scheduler
        self.registry = registry
        self.snapshots = snapshots
        # workers whose blocks are being moved: no block is placed there meanwhile
        self.leaving: set[str] = set()
        # {worker: [(ctx, server), ...]} servers taken out of their contexts by a
        # hand-off, put back if the worker stays after all
        self.withdrawn: dict[str, list[tuple[str, ServerId]]] = {}
        self._lock = asyncio.Lock()  # one move (hand-off or rebalance) at a time
        # totals for benchmarks and status: blocks, bytes and seconds of moves
        self.stats = {"blocks": 0, "bytes": 0, "seconds": 0.0, "moves": 0}
        self._orig_retire: Callable[..., Awaitable[Any]] | None = None
        # workers joined since the last rebalance on join (Rebalancer.add_worker)
        self._join_ctxs: set[str] = set()
        self._joined: set[str] = set()
        self._join_at = 0.0
        self._join_task: asyncio.Task[None] | None = None
        scheduler.handlers["daskangel_handoff"] = self.handle
        scheduler.handlers["daskangel_handoff_stats"] = self.get_stats
        scheduler.handlers["daskangel_rebalance"] = self.rebalance

    # -- wrapping retire_workers -------------------------------------------------------

    def install(self) -> None:
        """Put :meth:`retire_workers` in front of the scheduler's own."""
        if self._orig_retire is not None:
            return
        self._orig_retire = self.scheduler.retire_workers
        self.scheduler.retire_workers = self.retire_workers  # type: ignore[method-assign]
        self.scheduler.handlers["retire_workers"] = self.retire_workers

    def uninstall(self) -> None:
        if self._join_task is not None:
            self._join_task.cancel()
        if self._orig_retire is None:
            return
        if self.scheduler.retire_workers == self.retire_workers:
            del self.scheduler.retire_workers  # back to the class's method
        self.scheduler.handlers["retire_workers"] = self.scheduler.retire_workers
        self._orig_retire = None

    async def retire_workers(
        self, workers: list[str] | None = None, *, names: list[Any] | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        """Dask's ``retire_workers``, after the workers' PS blocks were moved.

        Raises :class:`HandoffError` (nothing retired) when they cannot be.
        """
        assert self._orig_retire is not None
        orig = self._orig_retire
        sched = self.scheduler
        readmit = True
        if names is not None:
            wanted = {str(n) for n in names}
            addrs = [a for a, ws in sched.workers.items() if str(ws.name) in wanted]
        elif workers is not None:
            addrs = [a for a in workers if a in sched.workers]
            if len(addrs) < len(workers):
                # SpecCluster.scale passes worker *names* as workers=, which Dask's own
                # retire ignores before the cluster closes those workers anyway
                wanted = {str(w) for w in workers if w not in sched.workers}
                named = [a for a, ws in sched.workers.items() if str(ws.name) in wanted]
                readmit = not named
                addrs += named
        else:
            rest = {k: v for k, v in kwargs.items() if k not in _RETIRE_KW}
            addrs = list(sched.workers_to_close(**rest))
            kwargs = {k: v for k, v in kwargs.items() if k in _RETIRE_KW}
            workers = addrs
        if self.registry.workers_holding_blocks() & set(addrs):
            # a cluster closing named workers (readmit False) closes them whatever we
            # say: move what can be moved, never fail its scale-down
            await asyncio.wait_for(
                self.handoff(addrs, strict=readmit),
                config.get_seconds("daskangel.handoff.timeout"),
            )
        if names is not None:
            result = await orig(names=names, **kwargs)
        else:
            result = await orig(workers=workers, **kwargs)
        if readmit:  # workers Dask did not retire stay: their servers serve again
            back = [
                a
                for a in addrs
                if a not in result
                and a in sched.workers
                and sched.workers[a].status == Status.running
            ]
            self.readmit(back)
        return result  # type: ignore[no-any-return]

    def readmit(self, workers: list[str]) -> None:
        """Workers that stay after all (Dask did not retire them, or the hand-off
        failed): their servers serve their contexts again."""
        for addr in workers:
            for ctx, server in self.withdrawn.pop(addr, []):
                have = self.registry.ctx_servers.get(ctx)
                if have is not None and server not in have and addr in self.scheduler.workers:
                    have.append(server)

    def remove_worker(self, worker: str) -> None:
        self.withdrawn.pop(worker, None)
        self._joined.discard(worker)

    # -- moving blocks ---------------------------------------------------------------

    async def handle(self, workers: list[str], closing: bool = False) -> dict[str, Any]:
        """The ``daskangel_handoff`` handler (a closing worker's teardown asks)."""
        if self.scheduler.status != Status.running:
            return {"blocks": 0, "bytes": 0}
        return await self.handoff(workers, readmit=not closing, strict=not closing)

    def get_stats(self) -> dict[str, Any]:
        return dict(self.stats)

    async def handoff(
        self, workers: list[str], readmit: bool = True, strict: bool = True
    ) -> dict[str, Any]:
        """Move every block held on ``workers`` to the other servers of its context.

        Returns ``{"blocks", "bytes", "seconds"}`` moved.  Raises
        :class:`HandoffError` (before anything moves) when a context has no other
        running server, or the targets' memory would not hold the blocks; a move
        that fails puts that group's blocks back where they were.  With
        ``strict=False`` (the workers go whatever happens: a closing worker, a
        cluster scaling down by name) the blocks that cannot move are left, with a
        warning, to snapshot recovery, and the others move.
        """
        leaving = set(workers)
        for event in list(self.registry._pending.values()):  # creates placing blocks now
            await event.wait()
        start = time.perf_counter()
        moved = {"blocks": 0, "bytes": 0}
        async with self._lock:
            plan = self._plan(leaving, strict)  # raises before any change
            if not plan:
                return {**moved, "seconds": 0.0}
            for ctx, server in self.registry.withdraw(leaving):
                self.withdrawn.setdefault(server[0], []).append((ctx, server))
            self.leaving |= leaving
            try:
                for ctx, arrays in plan.items():
                    async with self.snapshots._lock(ctx):
                        await self._move_ctx(ctx, arrays, moved)
            except BaseException:
                if readmit:
                    self.readmit(sorted(leaving))
                raise
            finally:
                self.leaving -= leaving
        seconds = time.perf_counter() - start
        self.stats["blocks"] += moved["blocks"]
        self.stats["bytes"] += moved["bytes"]
        self.stats["seconds"] += seconds
        self.stats["moves"] += 1
        logger.info(
            "daskangel: handed %d blocks (%s) off %s in %.2fs",
            moved["blocks"],
            format_bytes(moved["bytes"]),
            sorted(leaving),
            seconds,
        )
        return {**moved, "seconds": seconds}

    def _running(self, addr: str) -> bool:
        ws = self.scheduler.workers.get(addr)
        return ws is not None and ws.status == Status.running

    def _plan(
        self, leaving: set[str], strict: bool = True
    ) -> dict[str, dict[str, dict[int, ServerId]]]:
        """``{ctx: {array: {block: target server}}}`` for the blocks on ``leaving``."""
        reg = self.registry
        by_ctx: dict[str, list[str]] = {}
        for name, m in reg.arrays.items():
            lost = set(m.get("lost", ()))
            if any(s[0] in leaving and b not in lost for b, s in enumerate(m["servers"])):
                if m.get("transport", "handlers") != "handlers":
                    logger.warning(
                        "daskangel: array %r uses the actors transport; its blocks on %s are "
                        "not handed off (snapshot recovery applies)",
                        name,
                        sorted(leaving),
                    )
                    continue
                by_ctx.setdefault(m["ctx"], []).append(name)
        load = {s: b for s, b in reg.load().items() if s[0] not in leaving}
        plan: dict[str, dict[str, dict[int, ServerId]]] = {}
        for ctx, names in by_ctx.items():
            servers = [
                (s[0], int(s[1]))
                for s in reg.ctx_servers.get(ctx, [])
                if s[0] not in leaving and s[0] not in self.leaving and self._running(s[0])
            ]
            if not servers:
                msg = (
                    f"workers: cannot retire {sorted(leaving)}: they hold blocks of arrays "
                    f"{sorted(names)} (PSContext {ctx}) and no other running PS server of that "
                    "context can take them"
                )
                if not strict:
                    _report_lost(self.registry.lifecycle, msg)
                    continue
                raise HandoffError(
                    f"{msg}; nothing was moved or retired. Add a worker first, or save and "
                    "close the context (ps.save(url); ps.close())"
                )
            plan[ctx] = self._targets(names, leaving, servers, load)
        try:
            self._check_memory(plan)
        except HandoffError as e:
            if strict:
                raise
            logger.warning("daskangel: %s", e)
        return plan

    def _targets(
        self,
        names: list[str],
        leaving: set[str],
        servers: list[ServerId],
        load: dict[ServerId, int],
    ) -> dict[str, dict[int, ServerId]]:
        out: dict[str, dict[int, ServerId]] = {}
        # arrays placed alike (co-partitioned: psfs, optimiser state) move alike
        same: dict[tuple[Any, ...], list[ServerId]] = {}
        for name in names:
            m = self.registry.arrays[name]
            lost = set(m.get("lost", ()))
            blocks = [b for b, s in enumerate(m["servers"]) if s[0] in leaving and b not in lost]
            key = (tuple(tuple(s) for s in m["servers"]), tuple(blocks))
            new = same.get(key) or place_blocks(
                [int(m["blocks"][b]["bytes"]) for b in blocks], servers, load
            )
            same[key] = new
            out[name] = dict(zip(blocks, new, strict=True))
        return out

    def _check_memory(self, plan: dict[str, dict[str, dict[int, ServerId]]]) -> None:
        new: dict[str, int] = {}  # {worker_address: bytes of dense blocks moving there}
        for arrays in plan.values():
            for name, targets in arrays.items():
                specs = self.registry.arrays[name]["blocks"]
                for b, s in targets.items():
                    if specs[b]["kind"] == "dense":
                        new[s[0]] = new.get(s[0], 0) + int(specs[b]["bytes"])
        over = self.registry.memory_overruns(new)
        if over:
            raise HandoffError(
                "workers: the remaining PS servers cannot hold the leaving workers' blocks: "
                f"{'; '.join(over)} (daskangel.server.max-memory-fraction); nothing was moved "
                "or retired"
            )
