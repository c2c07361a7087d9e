"""Rebalancing: blocks move so that a context's servers hold about equal bytes.

A mixin of :class:`~daskangel.scheduler._handoff.HandoffService`: the moves use
the hand-off's protocol (freeze, copy worker to worker, switch routing; requests
in flight wait and resend), so ``ps.rebalance()`` runs online.  One move at a
time: a rebalance asked for while another one or a hand-off runs is refused
with :class:`~daskangel.errors.InvalidStateError` (nothing is queued).

Example
-------
``await scheduler.daskangel_rebalance(ctx="c1")`` returns ``{"blocks", "bytes",
"seconds"}`` moved.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

from ..errors import ContextClosedError, InvalidStateError
from ._placement import balance_moves

if TYPE_CHECKING:
    from ._registry import ArrayRegistry
    from ._snapshots import SnapshotService

__all__ = ["Rebalancer"]

ServerId = tuple[str, int]


class Rebalancer:
    """``daskangel_rebalance``: even out the bytes per server of a context."""

    registry: ArrayRegistry
    snapshots: SnapshotService
    leaving: set[str]
    stats: dict[str, Any]
    _lock: asyncio.Lock

    def _running(self, addr: str) -> bool:
        raise NotImplementedError

    async def _move_ctx(
        self, ctx: str, arrays: dict[str, dict[int, ServerId]], moved: dict[str, int]
    ) -> None:
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
        start = time.perf_counter()
        moved = {"blocks": 0, "bytes": 0}
        async with self._lock:
            plan = self._balance_plan(ctx)
            if plan:
                async with self.snapshots._lock(ctx):
                    await self._move_ctx(ctx, plan, moved)
        seconds = time.perf_counter() - start
        if moved["blocks"]:
            self.stats["blocks"] += moved["blocks"]
            self.stats["bytes"] += moved["bytes"]
            self.stats["seconds"] += seconds
            self.stats["moves"] += 1
        return {**moved, "seconds": seconds}

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
