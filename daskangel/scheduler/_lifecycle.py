"""How the PS ends: contexts that close with their client, and a shutdown told from a loss.

Two things decide whether a worker leaving is news for the user:

* **A cluster going away is not a failure.**  ``LocalCluster.close()`` (any
  ``SpecCluster``, ``cluster.scale(0)``) retires every worker at once, and a
  closing scheduler removes every worker; the arrays still on them go with the
  cluster.  :meth:`Lifecycle.leaving` tells that case (the worker said it was
  closing, in the status changes Dask logs, and so is every worker left, or
  they are all gone within a grace period) from a worker lost while others
  keep running, so the registry logs the first at ``INFO`` and the second as
  the warning it is, and recovery does not try to rebuild blocks on workers
  that are leaving too.
* **A model's own context lives as long as its client.**  A context opened
  with ``PSContext(close_with_client=True)`` (every estimator fitted without
  ``ps=``) is closed by the scheduler when the client that opened it
  disconnects, so closing the client frees its arrays and a cluster closed
  afterwards finds nothing to lose.

Example
-------
>>> from distributed import Client, LocalCluster
>>> import daskangel as angel
>>> with LocalCluster(n_workers=1, processes=False) as cluster:  # doctest: +SKIP
...     client = Client(cluster)
...     ps = angel.PSContext(client, close_with_client=True)
...     client.close()  # the scheduler closes ``ps`` and frees its arrays
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from distributed.core import Status

from .. import config

if TYPE_CHECKING:
    from distributed.scheduler import Scheduler

    from ._registry import ArrayRegistry

__all__ = ["Lifecycle"]

logger = logging.getLogger("daskangel")

_CLOSING = (Status.closing, Status.closed, Status.closing_gracefully)
_CLOSING_NAMES = {st.name for st in _CLOSING}


class Lifecycle:
    """Contexts owned by clients, and whether the cluster is shutting down."""

    def __init__(self, scheduler: Scheduler, registry: ArrayRegistry) -> None:
        self.scheduler = scheduler
        self.registry = registry
        # {ctx_id: client_id} contexts closed when that client disconnects
        self.owners: dict[str, str] = {}
        # how the worker being removed leaves: "lost", "closing" (with the cluster)
        # or "closed" (alone, as far as we know yet); see leaving()
        self.state = "lost"
        self._closing: set[asyncio.Future[Any]] = set()
        registry.on_close.append(self.forget)
        scheduler.handlers["daskangel_close_with_client"] = self.close_with_client

    def close_with_client(self, ctx: str, client: str) -> None:
        """Close ``ctx`` when ``client`` disconnects from the scheduler."""
        self.owners[ctx] = client

    def forget(self, ctx: str) -> None:
        self.owners.pop(ctx, None)

    def remove_client(self, client: str) -> None:
        """A client left: close the contexts it owned (their arrays are freed)."""
        for ctx in [c for c, owner in self.owners.items() if owner == client]:
            self.owners.pop(ctx, None)
            task = asyncio.ensure_future(self._close(ctx, client))
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    async def _close(self, ctx: str, client: str) -> None:
        try:
            names = await self.registry.close(ctx)
            logger.debug("daskangel: client %s left; closed %s and freed %s", client, ctx, names)
        except Exception as e:  # noqa: BLE001 - the workers may be going away too
            logger.debug("daskangel: closing %s after client %s left: %r", ctx, client, e)

    def closing(self) -> bool:
        """The scheduler is closing, or no worker is left that is not closing too."""
        s = self.scheduler
        if s.status in _CLOSING:
            return True
        return all(ws.status in _CLOSING for ws in s.workers.values())

    def leaving(self, worker: str) -> str:
        """Note that ``worker`` is being removed, and say how (also kept in :attr:`state`).

        ``"lost"``: it vanished (crashed, killed, unreachable) -- news at once.
        ``"closing"``: it closed and so is the whole cluster -- no news.
        ``"closed"``: it closed while others still run; a cluster closing its
        workers one by one looks like this at first, so :meth:`later` decides
        after ``daskangel.context.shutdown-grace``.
        """
        if self.scheduler.status in _CLOSING:
            self.state = "closing"
        elif not self._was_closing(worker):
            self.state = "lost"
        else:
            self.state = "closing" if self.closing() else "closed"
        return self.state

    @property
    def quiet(self) -> bool:
        """The worker being removed leaves with the whole cluster."""
        return self.state == "closing"

    def later(self, report: Callable[[bool], None]) -> None:
        """Call ``report(cluster_closing)`` once the grace period has passed."""
        grace = config.get_seconds("daskangel.context.shutdown-grace")

        def fire() -> None:
            report(self.closing())

        self.scheduler.loop.call_later(grace, fire)

    def _was_closing(self, worker: str) -> bool:
        """The worker said it was closing (its last status change in the scheduler's
        event log), rather than vanishing as a crashed or killed process does."""
        for _, msg in reversed(self.scheduler.get_events(worker)):
            if isinstance(msg, dict) and msg.get("action") == "worker-status-change":
                return msg.get("status") in _CLOSING_NAMES
        return False
