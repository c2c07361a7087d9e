"""The daskangel scheduler plugin: the master of Angel, living in Dask's scheduler.

The plugin is a thin shell that owns the services of the control plane and
forwards scheduler events to them.  Each service registers its own comm handlers
(plain values in, plain values out), as ``distributed.semaphore`` does:

* :class:`~daskangel.scheduler._registry.ArrayRegistry`: arrays, layouts, placement;
* :class:`~daskangel.scheduler._snapshots.SnapshotService`: snapshots, restores,
  rebuilding blocks of lost servers;
* :class:`~daskangel.scheduler._clocks.ClockService`: training jobs' clock tables,
  the only owner of time (BSP / SSP / ASP).
* :class:`~daskangel.scheduler._groups.GroupService`: group barriers and the
  leader's command / acknowledge mailboxes.
* :class:`~daskangel.scheduler._status.StatusService`: server and task counters,
  shown by ``ps.status()`` and the dashboard page (``_dashboard.py``).
* :class:`~daskangel.scheduler._lifecycle.Lifecycle`: contexts closed with their
  client, and a cluster's shutdown told apart from a lost worker.

Services added by later parts (liveness, recovery) attach in
:meth:`DaskAngelSchedulerPlugin.start` the same way.

Example
-------
>>> from distributed import Client, LocalCluster
>>> with LocalCluster(n_workers=1, processes=False) as cluster, Client(cluster) as c:
...     c.register_plugin(DaskAngelSchedulerPlugin())
...     "daskangel_meta" in c.cluster.scheduler.handlers
True
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from distributed.diagnostics.plugin import SchedulerPlugin

from ._clocks import ClockService
from ._dashboard import register_dashboard
from ._groups import GroupService
from ._handoff import HandoffService
from ._lifecycle import Lifecycle
from ._liveness import LivenessService
from ._registry import ArrayRegistry
from ._snapshots import SnapshotService
from ._status import StatusService

if TYPE_CHECKING:
    from distributed.scheduler import Scheduler

__all__ = ["PLUGIN_NAME", "DaskAngelSchedulerPlugin"]

PLUGIN_NAME = "daskangel"


class DaskAngelSchedulerPlugin(SchedulerPlugin):
    """Registry, clocks, groups and status (and, as it lands, recovery) on the scheduler."""

    name = PLUGIN_NAME
    idempotent = True  # a second PSContext must not wipe the first one's state

    def __init__(self) -> None:
        self.scheduler: Scheduler | None = None
        self.registry: ArrayRegistry | None = None
        self.snapshots: SnapshotService | None = None
        self.handoff: HandoffService | None = None
        self.liveness: LivenessService | None = None
        self.clocks: ClockService | None = None
        self.groups: GroupService | None = None
        self.status: StatusService | None = None
        self.lifecycle: Lifecycle | None = None
        # {service_name: service} for every service with scheduler hooks
        self.services: dict[str, Any] = {}

    async def start(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        self.registry = ArrayRegistry(scheduler)
        self.snapshots = SnapshotService(scheduler, self.registry)
        self.registry.on_close.append(self.snapshots.forget)
        self.lifecycle = Lifecycle(scheduler, self.registry)
        self.registry.lifecycle = self.snapshots.lifecycle = self.lifecycle
        self.liveness = LivenessService(scheduler, self.registry)
        self.liveness.start()
        self.handoff = HandoffService(scheduler, self.registry, self.snapshots)
        self.handoff.install()
        self.snapshots.leaving = self.handoff.leaving
        # order matters: the registry marks blocks lost before recovery looks, and
        # adds a joining worker's servers before recovery places blocks there
        self.services["registry"] = self.registry
        self.services["handoff"] = self.handoff
        self.services["snapshots"] = self.snapshots
        self.services["liveness"] = self.liveness
        self.clocks = self.services["clocks"] = ClockService(scheduler)
        self.groups = self.services["groups"] = GroupService(scheduler, self.clocks)
        self.status = self.services["status"] = StatusService(scheduler, self.registry, self.clocks)
        if register_dashboard(scheduler, self.status):
            self.status.start_sampling()  # the page's rates over time
        # clock-driven snapshots and rollbacks need both services
        self.clocks.snapshots = self.snapshots
        self.snapshots.clocks = self.clocks

    def remove_worker(self, scheduler: Scheduler, worker: str, **kwargs: Any) -> None:
        if self.lifecycle is not None:  # first: the services ask whether the cluster is closing
            self.lifecycle.leaving(worker)
        for service in self.services.values():
            hook = getattr(service, "remove_worker", None)
            if hook is not None:
                hook(worker)

    def remove_client(self, scheduler: Scheduler, client: str) -> None:
        if self.lifecycle is not None:
            self.lifecycle.remove_client(client)

    async def close(self) -> None:
        if self.liveness is not None:
            self.liveness.stop()
        if self.status is not None:
            self.status.stop_sampling()
        if self.handoff is not None:
            self.handoff.uninstall()

    def valid_workers_downscaling(self, scheduler: Scheduler, workers: list[Any]) -> list[Any]:
        """Scale down PS workers only while their blocks can be handed off: of a
        context whose every server would go, the worker holding most of its bytes
        stays (and every holder of a context on the actors transport)."""
        if self.registry is None:
            return workers
        reg = self.registry
        going = {ws.address for ws in workers}
        load: dict[str, int] = {}
        for (addr, _), nbytes in reg.load().items():
            load[addr] = load.get(addr, 0) + nbytes
        keep: set[str] = set()
        for ctx, servers in reg.ctx_servers.items():
            holders = {s[0] for m in reg.arrays.values() if m["ctx"] == ctx for s in m["servers"]}
            if not holders:
                continue
            if reg.ctx_transport.get(ctx, "handlers") != "handlers":
                keep |= holders
                continue
            alive = {s[0] for s in servers if s[0] in scheduler.workers}
            if alive <= going:
                keep.add(
                    max(sorted(holders & alive) or sorted(holders), key=lambda a: load.get(a, 0))
                )
        return [ws for ws in workers if ws.address not in keep]

    def add_worker(self, scheduler: Scheduler, worker: str) -> None:
        for service in self.services.values():
            hook = getattr(service, "add_worker", None)
            if hook is not None:
                hook(worker)
