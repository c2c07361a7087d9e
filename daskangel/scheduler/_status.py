"""Observability: counters of every PS server and every training task, in one place.

Task counters (bytes pulled and pushed, calls, latency, cache hits, clock, time
spent waiting for slower tasks; the busy seconds per clock and the slowdown
against the other tasks, ``_slow.py``) arrive piggybacked on clock ticks, so reporting
costs no extra message; the metrics they carry feed the jobs' metric series
(:class:`~._job_metrics.JobMetrics`).  Server counters (memory, bytes in/out,
calls, latency, queue depth, bytes per array) are pulled from the servers with
their ``stats`` operation when they are older than ``daskangel.status.max-age``;
every refresh is also a reading of the rolling rate window
(:class:`~._rates.RateWindow`), which a sampler refreshes every
``daskangel.dashboard.rate-interval`` while the dashboard page exists.

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
import math
import time
from statistics import median
from typing import TYPE_CHECKING, Any

from .. import config
from ._clocks import ClockService
from ._job_metrics import JobMetrics
from ._rates import RateWindow
from ._registry import ArrayRegistry
from ._units import fmt_metrics

if TYPE_CHECKING:
    from distributed.scheduler import Scheduler

__all__ = ["StatusService", "array_rows", "format_metrics", "server_row", "task_rows"]

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
        if op in ("stats", "ping", "push"):  # "push": the updates that came lean, counted too
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
        # eager refresh (daskangel.comm.refresh): the server's budget and traffic
        **{
            k: float(stats.get("refresh", {}).get(k, 0.0))
            for k in ("refresh_budget", "refresh_sent", "refresh_held_back", "refresh_rate")
        },
    }


def array_rows(
    arrays: dict[str, dict[str, Any]], held: dict[str, dict[str, int]]
) -> list[dict[str, Any]]:
    """One row per array and server holding blocks of it.

    ``arrays`` is the registry's ``{name: meta}`` (``servers``: one ``[address,
    index]`` per block, ``blocks``: their specs with a byte estimate); ``held`` is
    ``{server id: {array: bytes}}`` from the servers' last ``stats``.  ``nbytes``
    is what the server holds (the placement estimate until it has reported).

    >>> meta = {"name": "w", "shape": [1, 8], "dtype": "float64", "sparse": False, "ctx": "c",
    ...         "servers": [["tcp://a:1", 0], ["tcp://b:1", 0]],
    ...         "blocks": [{"bytes": 32}, {"bytes": 32}]}
    >>> [(r["server"], r["blocks"], r["nbytes"]) for r in array_rows({"w": meta}, {})]
    [('tcp://a:1#0', 1, 32), ('tcp://b:1#0', 1, 32)]
    """
    rows = []
    for name in sorted(arrays):
        m = arrays[name]
        per: dict[str, list[int]] = {}
        for s, b in zip(m["servers"], m.get("blocks") or [{}] * len(m["servers"]), strict=True):
            sid = f"{s[0]}#{s[1]}"
            acc = per.setdefault(sid, [0, 0])
            acc[0] += 1
            acc[1] += int(b.get("bytes", 0))
        shape = m.get("shape") or []
        for sid in sorted(per):
            n, estimate = per[sid]
            rows.append(
                {
                    "array": name,
                    "ctx": m.get("ctx"),
                    "shape": " x ".join(str(int(d)) for d in shape),
                    "dtype": m.get("dtype"),
                    "kind": "sparse" if m.get("sparse") else "dense",
                    "server": sid,
                    "blocks": n,
                    "n_blocks": len(m["servers"]),
                    "nbytes": int(held.get(sid, {}).get(name, estimate)),
                }
            )
    return rows


def format_metrics(metrics: dict[str, float] | None) -> str:
    """The metrics a task reported last, as ``"k=v k=v"`` (4 significant digits;
    seconds, bytes and rates with their units, see :func:`._units.fmt_metric`)."""
    return fmt_metrics(metrics)


def task_rows(job: dict[str, Any]) -> list[dict[str, Any]]:
    """One status row per task of a job summary (see ``Job.summary``)."""
    rows = []
    m = job["min"]
    slowdown, slow = job.get("slowdown") or [], job.get("slow") or []
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
                "clock_s": median(busy) if (busy := info.get("busy")) else math.nan,
                "slowdown": float(slowdown[t]) if t < len(slowdown) else math.nan,
                "slow": bool(slow[t]) if t < len(slow) else False,
            }
        )
        # managed communication (daskangel.comm.*), per worker, when it is on
        rows[-1].update({k: v for k, v in st.items() if k.startswith("comm_")})
    return rows


class StatusService:
    """Collects server and task counters for ``ps.status()`` and the dashboard."""

    def __init__(self, scheduler: Scheduler, registry: ArrayRegistry, clocks: ClockService) -> None:
        self.scheduler = scheduler
        self.registry = registry
        self.clocks = clocks
        # [server row] from the last refresh, and when it happened
        self.servers: list[dict[str, Any]] = []
        # {server id: {array: bytes held}} from the last refresh
        self.held: dict[str, dict[str, int]] = {}
        self.refreshed = 0.0
        self._refreshing: asyncio.Task[None] | None = None
        self.metrics = JobMetrics()
        clocks.stats_listeners.append(self._observe_metrics)
        self.rates = RateWindow(
            config.get_seconds("daskangel.dashboard.rate-interval"),
            config.get_seconds("daskangel.dashboard.rate-window"),
        )
        self._sampler: asyncio.Task[None] | None = None
        scheduler.handlers["daskangel_status"] = self.status
        scheduler.handlers["daskangel_job_metrics"] = self.publish_metrics

    # -- training metrics -------------------------------------------------------------

    def _observe_metrics(self, job: str, task: int, clock: int, stats: dict[str, Any]) -> None:
        if stats.get("metrics"):
            if job not in self.metrics:  # a new job: forget those the clocks forgot
                self.metrics.forget(self.clocks.jobs)
            self.metrics.observe(job, task, clock, stats["metrics"])

    def publish_metrics(self, job: str, records: list[dict[str, Any]]) -> None:
        """An estimator's final per-epoch metrics of job ``job`` (its ``history_`` rows)."""
        if job not in self.metrics:
            self.metrics.forget(self.clocks.jobs)
        self.metrics.publish(job, records)

    def metric_jobs(self) -> list[str]:
        """Jobs with metrics, oldest first (only those the clock service still keeps)."""
        self.metrics.forget(self.clocks.jobs)
        return self.metrics.jobs()

    # -- PS servers -------------------------------------------------------------------

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

        results = [r for r in await asyncio.gather(*(one(*s) for s in ids)) if r is not None]
        self.servers = [server_row(r) for r in results]
        self.held = {f"{r['address']}#{r['index']}": dict(r.get("arrays", {})) for r in results}
        self.refreshed = time.monotonic()
        self.rates.interval = config.get_seconds("daskangel.dashboard.rate-interval")
        self.rates.forget({f"{a}#{i}" for a, i, _ in ids})
        self.rates.observe(self.servers, time.time())

    def start_sampling(self) -> None:
        """Refresh the server counters every ``daskangel.dashboard.rate-interval``."""
        if self._sampler is None or self._sampler.done():
            self._sampler = asyncio.ensure_future(self._sample_forever())

    def stop_sampling(self) -> None:
        if self._sampler is not None:
            self._sampler.cancel()
            self._sampler = None

    async def _sample_forever(self) -> None:
        while True:
            await asyncio.sleep(config.get_seconds("daskangel.dashboard.rate-interval"))
            if not self.registry.ctx_servers:
                continue
            try:
                await self.refresh_servers()
            except Exception as e:  # noqa: BLE001 - sampling must outlive a bad refresh
                logger.debug("daskangel: rate sampling failed: %r", e)

    def array_rows(self) -> list[dict[str, Any]]:
        """One row per array and server holding its blocks (see :func:`array_rows`)."""
        return array_rows(self.registry.arrays, self.held)

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
