"""Moving blocks between servers: the protocol the hand-off and the rebalance share.

Arrays placed alike (co-partitioned: a model's weights and its optimiser's
state, the buffers of one model) move as one *group*.  Every array of a group is
copied first: each source freezes its blocks (``psarray/_handoff_ops.py``:
requests for them fail with ``BlockMovingError`` and their callers wait for the
new routing), sends them worker to worker and returns once the target has
installed them.  Then the routing of every array of the group switches at once
(each generation + 1, one step of the scheduler's event loop) and the waiting
callers resend.  A psf over the group (an Adam step over ``w, m, v, t``) is
therefore served wholly before the move or wholly after it: before this, arrays
switched one at a time and a step sent in between found the weights' block on a
server that did not hold the moments' block yet (``StaleLayoutError``), or
cached layouts that no longer matched (``NotCoPartitionedError``).

If a copy fails, what already arrived goes back to its source and the whole
group stays where it was (:class:`~daskangel.errors.HandoffError`).

Example
-------
``HandoffService`` (scale-down) and ``Rebalancer`` (``ps.rebalance()``) call
``await self._move_ctx(ctx, {array: {block: target}}, moved)``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Any

from ..errors import HandoffError

if TYPE_CHECKING:
    from ._registry import ArrayRegistry
    from ._snapshots import SnapshotService

__all__ = ["BlockMover"]

logger = logging.getLogger(__name__)
ServerId = tuple[str, int]
# one copy: (array, source server, target server, blocks)
Send = tuple[str, ServerId, ServerId, list[int]]


class BlockMover:
    """Group moves of blocks (a base of the hand-off and rebalance services)."""

    registry: ArrayRegistry
    snapshots: SnapshotService

    async def _move_ctx(
        self, ctx: str, arrays: dict[str, dict[int, ServerId]], moved: dict[str, int]
    ) -> None:
        """Move the planned blocks of ``ctx``; arrays placed alike move as one group."""
        st = self.snapshots.cuts.get(ctx) or {}
        cut = st.get("cut") if st.get("pending") is not None else None
        for names in self._groups(arrays):
            await self._move_group(names, arrays, cut, moved)

    def _groups(self, arrays: dict[str, dict[int, ServerId]]) -> list[list[str]]:
        """The planned arrays in groups placed alike (same blocks, servers and targets):
        an optimiser's state with its weights, the buffers of one model."""
        groups: dict[tuple[Any, ...], list[str]] = {}
        for name, targets in arrays.items():
            m = self.registry.arrays.get(name)
            if m is None:  # dropped meanwhile
                continue
            key = (
                tuple(tuple(s) for s in m["servers"]),
                repr(m["layout"]),
                tuple(sorted(targets.items())),
            )
            groups.setdefault(key, []).append(name)
        return list(groups.values())

    async def _move_group(
        self,
        names: list[str],
        arrays: dict[str, dict[int, ServerId]],
        cut: Any,
        moved: dict[str, int],
    ) -> None:
        """Copy every array of a group to its targets, then switch the routing of
        all of them at once (one step of the event loop).

        Meanwhile the sources answer requests for the group's moving blocks with
        ``BlockMovingError`` and callers wait for the new routing: a psf over the
        group (an Adam step over weights, moments and step counts) is served
        wholly before the move or wholly after it, never by a server holding part
        of the group.  If any copy fails, the copies that arrived go back to their
        sources and the whole group stays where it was.
        """
        metas = {n: self.registry.arrays[n] for n in names}
        sends: list[Send] = []
        for name in names:
            pairs: dict[tuple[ServerId, ServerId], list[int]] = {}
            for b, t in arrays[name].items():
                s = metas[name]["servers"][b]
                pairs.setdefault(((s[0], int(s[1])), t), []).append(b)
            sends += [(name, src, t, blocks) for (src, t), blocks in pairs.items()]
        results = await asyncio.gather(
            *(self._send(metas[n], src, t, blocks, cut) for n, src, t, blocks in sends),
            return_exceptions=True,
        )
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            arrived = [
                s for s, r in zip(sends, results, strict=True) if not isinstance(r, BaseException)
            ]
            await self._send_back(metas, arrived)
            self._switch(metas, [])  # waiting callers resend to the sources
            raise HandoffError(
                f"workers: handing the blocks of arrays {names} to other servers failed: "
                f"{errors[0]!r}; those blocks stay where they were"
            ) from errors[0]
        for r in results:
            moved["blocks"] += r[0]  # type: ignore[index]
            moved["bytes"] += r[1]  # type: ignore[index]
        self._switch(metas, sends)

    def _switch(
        self,
        metas: dict[str, dict[str, Any]],
        sends: list[Send],
    ) -> None:
        """Route the sent blocks to their targets and bump every array's generation,
        with no await in between: no caller sees the group half switched."""
        live = {n: m for n, m in metas.items() if self.registry.arrays.get(n) is m}
        for name, _src, target, blocks in sends:
            if name in live:
                for b in blocks:
                    live[name]["servers"][b] = [target[0], target[1]]
        for m in live.values():
            m["generation"] += 1
        self.registry.notify()

    async def _send(
        self, m: dict[str, Any], src: ServerId, target: ServerId, blocks: list[int], cut: Any
    ) -> tuple[int, int]:
        """Hand ``blocks`` of array ``m`` from ``src`` to ``target`` (the source
        freezes them and installs them on the target); the routing is not switched."""
        name = m["name"]
        parts = [{"block": b} for b in blocks]
        try:
            nbytes = await self.registry.call(
                src,
                "handoff_send",
                "handlers",
                array=name,
                parts=parts,
                target=list(target),
                cut=cut,
            )
        except BaseException:
            # the source has the blocks back; the target may hold a copy the routing
            # never pointed to
            with contextlib.suppress(Exception):  # best effort
                await self.registry.call(
                    target, "handoff_discard", "handlers", array=name, parts=parts
                )
            raise
        return len(blocks), int(nbytes)

    async def _send_back(
        self,
        metas: dict[str, dict[str, Any]],
        arrived: list[Send],
    ) -> None:
        """Return copies that reached their targets when another array of their group
        failed to move.  A copy that cannot go back stays where it is and is routed
        there (its group split, nothing lost)."""
        results = await asyncio.gather(
            *(
                self.registry.call(
                    t,
                    "handoff_send",
                    "handlers",
                    array=n,
                    parts=[{"block": b} for b in blocks],
                    target=list(src),
                    cut=None,
                )
                for n, src, t, blocks in arrived
            ),
            return_exceptions=True,
        )
        stuck = [a for a, r in zip(arrived, results, strict=True) if isinstance(r, BaseException)]
        if stuck:
            logger.warning(
                "daskangel: blocks %s could not go back after a failed move; they stay on "
                "their targets",
                [(n, blocks) for n, _s, _t, blocks in stuck],
            )
            self._switch({n: metas[n] for n, *_ in stuck}, stuck)
