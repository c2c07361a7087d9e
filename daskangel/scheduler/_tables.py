"""The tables of the daskangel page: tasks, PS servers and arrays, with units.

The status service's rows hold raw numbers (bytes, seconds, counts), which is
what ``ps.status()`` returns; here they become the columns a person reads, each
formatted as Dask's own pages do (:mod:`._units`): ``"1.21 kiB"``, ``"1.29 ms"``,
``"12.30 MiB/s"``, ``"1.2 k calls/s"``.  The raw value stays in the source
beside its text (``nbytes`` and ``nbytes_text``) for the plots and their hovers.

Example
-------
>>> rows = [{"id": "tcp://a:1#0", "nbytes": 1234, "n_blocks": 2, "bytes_in": 0,
...          "bytes_out": 2048, "calls": 1500, "latency_ms": 1.2853794081681, "queue": 0}]
>>> d = server_data(rows, {"tcp://a:1#0": {"bytes_per_s": 2048.0, "calls_per_s": 1234.0}})
>>> d["nbytes_text"], d["latency_text"], d["rate_text"], d["calls_rate_text"]
(['1.21 kiB'], ['1.29 ms'], ['2.00 kiB/s'], ['1.2 k calls/s'])
"""

from __future__ import annotations

import math
from typing import Any

from ._units import fmt_bytes, fmt_count, fmt_metrics, fmt_rate, fmt_rate_bytes, fmt_time

__all__ = [
    "ARRAY_COLUMNS",
    "SERVER_COLUMNS",
    "TASK_COLUMNS",
    "array_data",
    "comm_text",
    "data_table",
    "refresh_text",
    "server_data",
    "task_data",
]

# (source field, column title): what each table shows
TASK_COLUMNS = [
    ("id", "task"),
    ("group", "group"),
    ("worker", "worker"),
    ("status", "status"),
    ("clock", "clock"),
    ("ahead", "ahead of slowest"),
    ("clock_text", "per clock"),
    ("slow_text", "slowdown"),
    ("waited_text", "waited"),
    ("pulled_text", "pulled"),
    ("pushed_text", "pushed"),
    ("calls_text", "calls"),
    ("latency_text", "latency"),
    ("cache_hits_text", "cache hits"),
    ("comm_text", "managed comm (worker)"),
    ("metrics", "reported metrics"),
]
SERVER_COLUMNS = [
    ("id", "server"),
    ("nbytes_text", "memory"),
    ("n_blocks", "blocks"),
    ("in_text", "in"),
    ("out_text", "out"),
    ("rate_text", "traffic"),
    ("calls_text", "calls"),
    ("calls_rate_text", "call rate"),
    ("latency_text", "latency"),
    ("queue", "queue"),
    ("refresh_text", "eager refresh (server)"),
]
ARRAY_COLUMNS = [
    ("array", "array"),
    ("shape", "shape"),
    ("dtype", "dtype"),
    ("kind", "storage"),
    ("server", "server"),
    ("blocks_text", "blocks on server"),
    ("nbytes_text", "bytes on server"),
]

# relative widths of the columns holding long text (the others get 90)
_WIDTHS = {
    "id": 260,
    "worker": 170,
    "server": 200,
    "array": 240,
    "metrics": 520,
    "comm_text": 330,
    "refresh_text": 330,
}


def task_data(rows: list[dict[str, Any]], latest: dict[str, dict[str, float]]) -> dict[str, list]:
    """Columns of the task table from status task rows.

    ``latest`` is ``{job: metrics}`` of the job's newest metrics point, shown for
    a task that has reported none itself or has finished (a model's monitor
    reports from the tasks, a clock or two late; the last epochs come from the fit).

    >>> row = {"id": "j/0", "job": "j", "group": 0, "worker": "w", "status": "done",
    ...        "clock": 3, "ahead": 0, "waited_s": 0.5, "bytes_out": 4096, "bytes_in": 0,
    ...        "calls": 12, "latency_ms": 0.25, "cache_hits": 0, "metrics": ""}
    >>> d = task_data([row], {"j": {"epoch": 3.0, "loss": 0.25}})
    >>> d["waited_text"], d["pulled_text"], d["latency_text"], d["metrics"]
    (['500.00 ms'], ['4.00 kiB'], ['250.00 us'], ['epoch=3 loss=0.25'])
    """
    out: dict[str, list] = {k: [] for k, _ in TASK_COLUMNS}
    for extra in ("job", "waited_s", "bytes_out", "bytes_in", "calls", "latency_ms"):
        out[extra] = []
    for r in rows:
        for k in ("id", "job", "group", "worker", "status", "clock", "ahead", "waited_s"):
            out[k].append(r.get(k))
        for k in ("bytes_out", "bytes_in", "calls", "latency_ms"):
            out[k].append(r.get(k, 0))
        out["waited_text"].append(fmt_time(r.get("waited_s", 0.0)))
        per_clock = float(r.get("clock_s", math.nan))
        out["clock_text"].append("" if math.isnan(per_clock) else fmt_time(per_clock))
        out["slow_text"].append(_slow_text(r))
        out["pulled_text"].append(fmt_bytes(r.get("bytes_out", 0)))
        out["pushed_text"].append(fmt_bytes(r.get("bytes_in", 0)))
        out["calls_text"].append(fmt_count(r.get("calls", 0)))
        out["latency_text"].append(fmt_time(r.get("latency_ms", 0.0) / 1000.0))
        out["cache_hits_text"].append(fmt_count(r.get("cache_hits", 0)))
        out["comm_text"].append(comm_text(r))
        own = r.get("metrics") or ""
        job = latest.get(str(r.get("job")), {})
        if job and (not own or r.get("status") != "running"):
            own = fmt_metrics(job)  # the fit's final figures once the task is over
        out["metrics"].append(own)
    return out


def comm_text(row: dict[str, Any]) -> str:
    """The worker's managed communication (``comm_*`` of a task row), or ``""`` when off.

    >>> comm_text({"comm_budget": 65536.0, "comm_sent": 2048.0, "comm_held_back": 4096.0,
    ...            "comm_rate": 1024.0, "comm_short_clocks": 2.0})
    'budget 64.00 kiB/s, sent 2.00 kiB, held back 4.00 kiB, rate 1.00 kiB/s, 2 short clocks'
    """
    budget = float(row.get("comm_budget") or 0.0)
    if not budget or math.isnan(budget):
        return ""
    text = (
        f"budget {fmt_rate_bytes(budget)}, sent {fmt_bytes(row.get('comm_sent', 0))}, "
        f"held back {fmt_bytes(row.get('comm_held_back', 0))}, "
        f"rate {fmt_rate_bytes(float(row.get('comm_rate', 0.0)))}"
    )
    short = int(row.get("comm_short_clocks") or 0)
    return text + (f", {short} short clocks" if short else "")


def server_data(rows: list[dict[str, Any]], rates: dict[str, dict[str, float]]) -> dict[str, list]:
    """Columns of the server table from status server rows and the newest rates."""
    out: dict[str, list] = {k: [] for k, _ in SERVER_COLUMNS}
    for extra in ("nbytes", "bytes_in", "bytes_out", "calls", "bytes_per_s", "calls_per_s"):
        out[extra] = []
    for r in rows:
        rate = rates.get(r["id"], {})
        bps, cps = rate.get("bytes_per_s", 0.0), rate.get("calls_per_s", 0.0)
        for k in ("id", "n_blocks", "queue", "nbytes", "bytes_in", "bytes_out", "calls"):
            out[k].append(r.get(k, 0))
        out["bytes_per_s"].append(bps)
        out["calls_per_s"].append(cps)
        out["nbytes_text"].append(fmt_bytes(r.get("nbytes", 0)))
        out["in_text"].append(fmt_bytes(r.get("bytes_in", 0)))
        out["out_text"].append(fmt_bytes(r.get("bytes_out", 0)))
        out["rate_text"].append(fmt_rate_bytes(bps))
        out["calls_text"].append(fmt_count(r.get("calls", 0)))
        out["calls_rate_text"].append(fmt_rate(cps, "calls"))
        out["latency_text"].append(fmt_time(r.get("latency_ms", 0.0) / 1000.0))
        out["refresh_text"].append(refresh_text(r))
    return out


def refresh_text(row: dict[str, Any]) -> str:
    """The server's eager refresh (``refresh_*`` of a server row), or ``""`` when off.

    Without a server budget (``daskangel.comm.server-budget: null``) a server that
    refreshed still shows its traffic, as ``"no budget"``.

    >>> refresh_text({"refresh_budget": 16384.0, "refresh_sent": 81920.0,
    ...               "refresh_held_back": 2048.0, "refresh_rate": 4096.0})
    'budget 16.00 kiB/s, sent 80.00 kiB, held back 2.00 kiB, rate 4.00 kiB/s'
    >>> refresh_text({"refresh_budget": 0.0, "refresh_sent": 40.0})
    'no budget, sent 40 B, held back 0 B, rate 0 B/s'
    >>> refresh_text({"refresh_budget": 0.0, "refresh_sent": 0.0})
    ''
    """
    keys = ("refresh_budget", "refresh_sent", "refresh_held_back", "refresh_rate")
    budget, sent, held, rate = (_num(row.get(k)) for k in keys)
    if not (budget or sent or held):
        return ""
    head = f"budget {fmt_rate_bytes(budget)}" if budget else "no budget"
    return (
        f"{head}, sent {fmt_bytes(sent)}, held back {fmt_bytes(held)}, rate {fmt_rate_bytes(rate)}"
    )


def array_data(rows: list[dict[str, Any]]) -> dict[str, list]:
    """Columns of the array table from ``StatusService.array_rows()``.

    >>> rows = [{"array": "w", "shape": "1 x 8", "dtype": "float64", "kind": "dense",
    ...          "server": "tcp://a:1#0", "blocks": 1, "n_blocks": 2, "nbytes": 32}]
    >>> d = array_data(rows)
    >>> d["blocks_text"], d["nbytes_text"]
    (['1 of 2'], ['32 B'])
    """
    out: dict[str, list] = {k: [] for k, _ in ARRAY_COLUMNS}
    for extra in ("blocks", "n_blocks", "nbytes"):
        out[extra] = []
    for r in rows:
        for k in ("array", "shape", "dtype", "kind", "server", "blocks", "n_blocks", "nbytes"):
            out[k].append(r[k])
        out["blocks_text"].append(f"{r['blocks']} of {r['n_blocks']}")
        out["nbytes_text"].append(fmt_bytes(r["nbytes"]))
    return out


def data_table(source: Any, columns: list[tuple[str, str]], height: int) -> Any:
    """A Bokeh ``DataTable`` over ``source`` showing ``columns``."""
    from bokeh.models import DataTable, TableColumn  # type: ignore[attr-defined]

    return DataTable(
        source=source,
        columns=[TableColumn(field=k, title=t, width=_WIDTHS.get(k, 90)) for k, t in columns],
        height=height,
        index_position=None,
        sizing_mode="stretch_width",
    )


def _num(v: Any) -> float:
    """A counter as a float, 0 for a missing or NaN one (a row from before the key)."""
    x = float(v or 0.0)
    return 0.0 if math.isnan(x) else x


def _slow_text(row: dict[str, Any]) -> str:
    """``"3.1x SLOW"`` for a flagged task, ``"1.0x"`` otherwise, empty before the
    task has a slowdown (fewer clocks than ``daskangel.clock.slow-window``)."""
    x = float(row.get("slowdown", math.nan))
    if math.isnan(x):
        return ""
    return f"{x:.1f}x SLOW" if row.get("slow") else f"{x:.1f}x"
