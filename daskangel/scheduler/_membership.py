"""The servers of each context as workers come and go: :class:`ServerMembershipMixin`
of :class:`~daskangel.scheduler._registry.ArrayRegistry`.

A context that runs servers on every worker (or on every worker with its
resource) takes servers on a worker that joins (``add_worker``); a worker that
leaves takes its servers out of every context and marks the blocks they held
lost (``remove_worker``, logged as a warning unless the cluster is closing);
leaving workers' servers are withdrawn before a hand-off (``withdraw``); a
context whose every server is gone adopts the running workers (``adopt``) so its
lost blocks can be rebuilt.

Example
-------
::

    registry.add_worker("tcp://10.0.0.3:4000")   # the plugin forwards worker events
    registry.remove_worker("tcp://10.0.0.2:4000")
    registry.servers("ctx-1")                    # the daskangel_servers handler
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from distributed.core import Status

from ..errors import ContextClosedError

if TYPE_CHECKING:
    from distributed.scheduler import Scheduler

__all__ = ["ServerMembershipMixin"]

# the registry's logger, as before the split: what filters its records still sees them
logger = logging.getLogger("daskangel.scheduler._registry")

ServerId = tuple[str, int]


class ServerMembershipMixin:
    """Servers joining and leaving contexts, for :class:`ArrayRegistry` (which
    provides the attributes below)."""

    scheduler: Scheduler
    ctx_servers: dict[str, list[ServerId]]
    ctx_select: dict[str, dict[str, Any]]
    arrays: dict[str, dict[str, Any]]
    lifecycle: Any

    if TYPE_CHECKING:  # provided by ArrayRegistry

        def notify(self) -> None: ...

    def add_worker(self, worker: str) -> None:
        """A worker joined: contexts that run servers on every worker (or on every
        worker with their resource) start servers on it too."""
        ws = self.scheduler.workers.get(worker)
        for ctx, sel in self.ctx_select.items():
            if sel["workers"]:
                continue
            if sel["resource"] and not (ws and ws.resources.get(sel["resource"], 0) > 0):
                continue
            have = self.ctx_servers.setdefault(ctx, [])
            for i in range(int(sel["servers_per_worker"])):
                if (worker, i) not in have:
                    have.append((worker, i))

    def withdraw(self, workers: set[str]) -> list[tuple[str, ServerId]]:
        """Take the servers of ``workers`` out of every context (no block is placed
        there any more); return the ``(ctx, server)`` pairs taken out."""
        out: list[tuple[str, ServerId]] = []
        for ctx, servers in self.ctx_servers.items():
            out.extend((ctx, s) for s in servers if s[0] in workers)
            self.ctx_servers[ctx] = [s for s in servers if s[0] not in workers]
        return out

    def adopt(self, ctx: str, exclude: frozenset[str] | set[str] = frozenset()) -> list[ServerId]:
        """A context left without any server (its chosen workers all gone) takes
        servers on the running workers (those with its resource, if it has one),
        so its lost blocks can be rebuilt; returns its servers."""
        have = self.ctx_servers.get(ctx)
        sel = self.ctx_select.get(ctx)
        if have is None or sel is None or have:
            return list(have or [])
        res = sel["resource"]
        live = sorted(
            a
            for a, ws in self.scheduler.workers.items()
            if ws.status == Status.running
            and a not in exclude
            and (not res or ws.resources.get(res, 0) > 0)
        )
        have.extend((a, i) for a in live for i in range(int(sel["servers_per_worker"])))
        if have:
            logger.warning(
                "daskangel: every PS server of context %s is gone; it now runs servers on %s",
                ctx,
                live,
            )
        return list(have)

    def servers(self, ctx: str) -> list[list[Any]]:
        """The ``daskangel_servers`` handler: the context's servers now."""
        if ctx not in self.ctx_servers:
            raise ContextClosedError(f"ctx: PSContext {ctx!r} is not open")
        return [list(s) for s in self.ctx_servers[ctx]]

    def workers_holding_blocks(self) -> set[str]:
        return {s[0] for m in self.arrays.values() for s in m["servers"]}

    def remove_worker(self, worker: str) -> None:
        """A worker left: its servers are gone and the blocks they held are lost."""
        lost_by_array: dict[str, list[int]] = {}
        for ctx, servers in self.ctx_servers.items():
            self.ctx_servers[ctx] = [s for s in servers if s[0] != worker]
        for meta in self.arrays.values():
            lost = {b for b, s in enumerate(meta["servers"]) if s[0] == worker}
            if lost:
                meta["lost"] = sorted(set(meta.get("lost", ())) | lost)
                meta["generation"] += 1
                lost_by_array[meta["name"]] = sorted(lost)
        if not lost_by_array:
            return
        self.notify()
        life = self.lifecycle
        state = life.state if life is not None else "lost"
        if life is not None and state == "closed":  # closed on purpose: with the cluster, or alone?
            life.later(lambda closing: _log_lost(worker, lost_by_array, closing))
        else:
            _log_lost(worker, lost_by_array, state == "closing")


def _log_lost(worker: str, lost: dict[str, list[int]], with_cluster: bool) -> None:
    """A warning for blocks lost while the cluster runs on; INFO when it closes."""
    for name, blocks in lost.items():
        logger.log(
            logging.INFO if with_cluster else logging.WARNING,
            "daskangel: worker %s left%s; array %r lost blocks %s",
            worker,
            " with the cluster" if with_cluster else "",
            name,
            blocks[:20],
        )
