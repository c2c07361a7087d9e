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

A silent worker is not always a hung one: a PS op compiling its numba kernels,
or any long computation on the worker's event loop, stops its answers as well.
Before restarting, the service asks the worker's *nanny* (its own process and
event loop) for the worker process's state and CPU time: a process that is
running and used CPU since the silence began is busy, not hung, and is given
until ``daskangel.heartbeat.busy-timeout`` of silence; a stopped or idle one
(SIGSTOP, a deadlock, a cut network: its nanny does not answer either) is
restarted at ``daskangel.heartbeat.timeout`` as before.

State: ``last_seen: {worker_address: loop time of its last answer}``,
``cpu_mark: {worker_address: (loop time, CPU seconds) when its silence passed
half the timeout}``.

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
import pickle
from typing import TYPE_CHECKING, Any

from distributed.protocol import Serialized, deserialize

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
        self.cpu_mark: dict[str, tuple[float, float]] = {}
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
        self.cpu_mark.pop(worker, None)

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
            if now - seen <= timeout / 2:
                self.cpu_mark.pop(addr, None)
            elif addr not in self.cpu_mark:
                state = await self._process_state(addr, timeout)
                if state is not None:
                    self.cpu_mark[addr] = (now, state[0])
            if now - seen > timeout and await self._busy(addr, now - seen, timeout):
                pass  # computing on its event loop (first numba compiles): alive
            elif now - seen > timeout:
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

    async def _busy(self, addr: str, silent: float, timeout: float) -> bool:
        """Whether a silent worker's process is running and has used CPU since its
        silence passed half the timeout (and it has been silent for less than
        ``daskangel.heartbeat.busy-timeout``)."""
        mark = self.cpu_mark.get(addr)
        if mark is None or silent > config.get_seconds("daskangel.heartbeat.busy-timeout"):
            return False
        state = await self._process_state(addr, timeout)
        if state is None or state[1] in ("stopped", "zombie", "dead", "tracing-stop"):
            return False
        used = state[0] - mark[1]
        elapsed = asyncio.get_running_loop().time() - mark[0]
        if elapsed < timeout / 4:
            return True  # the mark is too recent to tell: judge at a later check
        if used <= 0.05 * elapsed:
            return False  # idle: waiting forever on something, not computing
        logger.info(
            "daskangel: PS worker %s has not answered for %.1fs but its process is busy "
            "(%.1f CPU s since); not restarting it yet",
            addr,
            silent,
            used,
        )
        return True

    async def _process_state(self, addr: str, timeout: float) -> tuple[float, str] | None:
        """``(CPU seconds, psutil status)`` of a worker's process, from its nanny."""
        ws = self.scheduler.workers.get(addr)
        nanny = getattr(ws, "nanny", None)
        if not nanny:
            return None
        try:
            reply = await asyncio.wait_for(
                self.scheduler.rpc(nanny).run(function=pickle.dumps(_process_state)),
                timeout,
            )
        except Exception:  # noqa: BLE001 - an unreachable nanny: no evidence of life
            return None
        if not isinstance(reply, dict) or reply.get("status") != "OK":
            return None
        out = reply["result"]
        if isinstance(out, Serialized):
            out = deserialize(out.header, out.frames)
        return (float(out[0]), str(out[1])) if out else None

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


def _process_state(dask_worker: Any = None) -> list[Any] | None:
    """In a nanny (its ``run`` handler): the worker process's CPU seconds and status."""
    import psutil

    proc = getattr(getattr(dask_worker, "process", None), "process", None)
    pid = getattr(proc, "pid", None)
    if pid is None:
        return None
    try:
        p = psutil.Process(pid)
        t = p.cpu_times()
        return [t.user + t.system, p.status()]
    except psutil.Error:
        return None
