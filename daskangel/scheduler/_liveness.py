"""PS heartbeats: the master notices a hung PS worker and takes it out.

Dask removes a worker whose connection closes at once, but a worker that hangs
(its process stopped, its network cut without a reset) only goes after
``distributed.scheduler.worker-ttl`` (minutes by default).  A PS server that
holds blocks cannot wait that long, so :class:`LivenessService` pings the workers
of every PS server each ``daskangel.heartbeat.interval``; a worker that has not
answered for ``daskangel.heartbeat.timeout`` is restarted through its nanny (which
kills a hung process for good), or removed when it has no nanny; either way the
usual recovery follows (``SnapshotService.remove_worker``).  Restarting rather
than closing matters: a worker Dask closes takes its nanny with it, so a false
alarm (a worker too busy to answer) would shrink the cluster for good.

State: ``last_seen: {worker_address: loop time of its last answer}``.

Example
-------
``dask.config.set({"daskangel.heartbeat.interval": "200ms",
"daskangel.heartbeat.timeout": "2s"})`` before the scheduler starts makes tests
detect a frozen worker in about two seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Any

from .. import config

if TYPE_CHECKING:
    from distributed.scheduler import Scheduler

    from ._registry import ArrayRegistry

__all__ = ["LivenessService"]

logger = logging.getLogger(__name__)


class LivenessService:
    """Pings PS workers and removes the ones that stop answering."""

    def __init__(self, scheduler: Scheduler, registry: ArrayRegistry) -> None:
        self.scheduler = scheduler
        self.registry = registry
        self.last_seen: dict[str, float] = {}
        self._task: asyncio.Task[None] | None = None
        self._pings: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.ensure_future(self._loop())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None
        for t in self._pings:
            t.cancel()

    def remove_worker(self, worker: str) -> None:
        self.last_seen.pop(worker, None)

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(config.get_seconds("daskangel.heartbeat.interval"))
            await self.check_once()

    async def check_once(self) -> None:
        """Restart the watched workers silent for too long; ping the others."""
        loop = asyncio.get_running_loop()
        timeout = config.get_seconds("daskangel.heartbeat.timeout")
        now = loop.time()
        watched = self.registry.workers_holding_blocks() & set(self.scheduler.workers)
        # a worker that held no blocks was not pinged: its silence since then does not
        # count (else it is restarted the moment it receives blocks again)
        for addr in [a for a in self.last_seen if a not in watched]:
            del self.last_seen[addr]
        for addr in watched:
            seen = self.last_seen.setdefault(addr, now)
            if now - seen > timeout:
                logger.warning(
                    "daskangel: PS worker %s has not answered for %.1fs; restarting it",
                    addr,
                    now - seen,
                )
                self.last_seen.pop(addr, None)
                await self._restart(addr, timeout)
                continue
            if not any(t.get_name() == addr for t in self._pings):
                t = asyncio.ensure_future(self._ping(addr, timeout))
                t.set_name(addr)
                self._pings.add(t)
                t.add_done_callback(self._pings.discard)

    async def _restart(self, addr: str, timeout: float) -> None:
        result: dict[str, Any]
        try:
            result = await self.scheduler.restart_workers(
                [addr],
                timeout=timeout,
                wait_for_workers=False,
                on_error="return",
                stimulus_id="daskangel-heartbeat",
            )
        except Exception as e:  # noqa: BLE001 - fall back to removing it
            result = {addr: repr(e)}
        if addr in self.scheduler.workers and result.get(addr) != "OK":
            await self.scheduler.remove_worker(
                address=addr, stimulus_id="daskangel-heartbeat", close=False
            )

    async def _ping(self, addr: str, timeout: float) -> None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(
                self.scheduler.rpc(addr).daskangel_ps(ps_op="ping", server=0), timeout
            )
            self.last_seen[addr] = asyncio.get_running_loop().time()
