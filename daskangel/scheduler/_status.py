"""Observability: counters of every PS server and every training task, in one place.

Task counters (bytes pulled and pushed, calls, latency, cache hits, clock, time
spent waiting for slower tasks) arrive piggybacked on clock ticks, so reporting
costs no extra message.  Server counters (memory, bytes in/out, calls, latency,
queue depth) are pulled from the servers with their ``stats`` operation when
they are older than ``daskangel.status.max-age``.

``daskangel_status`` returns plain rows; ``PSContext.status()`` makes a pandas
DataFrame of them and the dashboard page draws them.

Example
-------
>>> row = server_row({"address": "tcp://a:1", "index": 0, "nbytes": 8, "waiting": 0,
...                   "n_blocks": 1, "arrays": {}, "ops": {"get": [2, 0.002, 80, 16, 80]}})
>>> row["calls"], row["bytes_out"], row["latency_ms"]
(2, 80, 1.0)
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from .. import config
from ._clocks import ClockService
from ._registry import ArrayRegistry

if TYPE_CHECKING:
    from distributed.scheduler import Scheduler

__all__ = ["StatusService", "format_metrics", "server_row", "task_rows"]

logger = logging.getLogger(__name__)


def server_row(stats: dict[str, Any]) -> dict[str, Any]:
    """One status row from a server's ``stats`` answer.

    ``stats["ops"]`` is ``{op: [calls, seconds, cost, bytes in, bytes out]}``:
    ``bytes_in`` / ``bytes_out`` add up the array payload of every request the
    server received and every reply it sent (keys, indices and values alike), so
    they count what crossed the wire for this server's data, whatever the op.
    """
    calls = 0
    seconds = 0.0
    bytes_in = 0
    bytes_out = 0
    for op, st in stats.get("ops", {}).items():
        if op in ("stats", "ping"):
            continue
        calls += int(st[0])
        seconds += float(st[1])
        bytes_in += int(st[3])
        bytes_out += int(st[4])
    return {
        "kind": "server",
        "id": f"{stats['address']}#{stats['index']}",
        "worker": stats["address"],
        "nbytes": int(stats.get("nbytes", 0)),
        "n_blocks": int(stats.get("n_blocks", 0)),
        "bytes_in": bytes_in,
        "bytes_out": bytes_out,
        "calls": calls,
        "latency_ms": 1000.0 * seconds / calls if calls else 0.0,
        "queue": int(stats.get("waiting", 0)),
    }


def format_metrics(metrics: dict[str, float] | None) -> str:
    """The metrics a task reported last, as ``"k=v k=v"`` (4 significant digits)."""
    return " ".join(f"{k}={v:.4g}" for k, v in (metrics or {}).items())


def task_rows(job: dict[str, Any]) -> list[dict[str, Any]]:
    """One status row per task of a job summary (see ``Job.summary``)."""
    rows = []
    m = job["min"]
    for t, (clock, info) in enumerate(zip(job["clocks"], job["tasks"], strict=True)):
        st = info.get("stats") or {}
        calls = int(st.get("calls", 0))
        rows.append(
            {
                "kind": "task",
                "id": f"{job['job']}/{t}",
                "job": job["job"],
                "task": t,
                "group": job["groups"][t],
                "worker": info.get("worker"),
                "status": info.get("status"),
                "clock": clock,
                "ahead": (clock - m) if m is not None and t not in job["done"] else 0,
                "waited_s": float(info.get("waited", 0.0)),
                "waits": int(info.get("waits", 0)),
                "bytes_in": int(st.get("bytes_pushed", 0)),
                "bytes_out": int(st.get("bytes_pulled", 0)),
                "calls": calls,
                "latency_ms": 1000.0 * float(st.get("seconds", 0.0)) / calls if calls else 0.0,
                "cache_hits": int(st.get("cache_hits", 0)),
                "metrics": format_metrics(st.get("metrics")),
            }
        )
    return rows


class StatusService:
    """Collects server and task counters for ``ps.status()`` and the dashboard."""

    def __init__(self, scheduler: Scheduler, registry: ArrayRegistry, clocks: ClockService) -> None:
        self.scheduler = scheduler
        self.registry = registry
        self.clocks = clocks
        # [server row] from the last refresh, and when it happened
        self.servers: list[dict[str, Any]] = []
        self.refreshed = 0.0
        self._refreshing: asyncio.Task[None] | None = None
        scheduler.handlers["daskangel_status"] = self.status

    def _server_ids(self, ctx: str | None) -> list[tuple[str, int, str]]:
        out: list[tuple[str, int, str]] = []
        for c, servers in self.registry.ctx_servers.items():
            if ctx is not None and c != ctx:
                continue
            transport = self.registry.ctx_transport.get(c, "handlers")
            out.extend((a, i, transport) for a, i in servers)
        return sorted(set(out))

    async def refresh_servers(self) -> None:
        """Ask every server of every open context for its counters."""
        ids = self._server_ids(None)

        async def one(a: str, i: int, tr: str) -> dict[str, Any] | None:
            try:
                return await asyncio.wait_for(self.registry.call((a, i), "stats", tr), 5)
            except Exception as e:  # noqa: BLE001 - a lost server must not break status
                logger.debug("daskangel: no stats from %s#%d: %r", a, i, e)
                return None

        results = await asyncio.gather(*(one(*s) for s in ids))
        self.servers = [server_row(r) for r in results if r is not None]
        self.refreshed = time.monotonic()

    def refresh_soon(self) -> None:
        """Start a refresh in the background unless one is running (for the dashboard)."""
        if self._refreshing is None or self._refreshing.done():
            self._refreshing = asyncio.ensure_future(self.refresh_servers())

    def task_rows(self, ctx: str | None = None) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        for job in self.clocks.list_jobs(ctx):
            rows.extend(task_rows(job))
        return rows

    async def status(self, ctx: str | None = None, max_age: float | None = None) -> dict[str, Any]:
        """Server rows (of context ``ctx``, or all) and task rows, as plain values."""
        age = config.get_seconds("daskangel.status.max-age") if max_age is None else max_age
        if time.monotonic() - self.refreshed > age:
            await self.refresh_servers()
        keep = {f"{a}#{i}" for a, i, _ in self._server_ids(ctx)}
        servers = [r for r in self.servers if r["id"] in keep]
        return {"servers": servers, "tasks": self.task_rows(ctx)}
