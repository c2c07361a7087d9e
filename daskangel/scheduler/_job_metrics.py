"""Training metrics of each job, per epoch, kept on the scheduler for the dashboard.

Two sources feed it:

* **live**: what tasks pass to ``ctx.report`` rides on their clock ticks (the
  task's newest numeric metrics, see ``TaskContext.report``).  A report that
  differs from the task's previous one becomes a point at ``x`` = its ``epoch``
  (or ``sweep`` / ``round`` / ``iteration``) if it has one, else the clock it was
  reported in; the tasks' values at one ``x`` are averaged (a model's monitor
  reports the same figures from every task, so the mean is the figure).
* **final**: an estimator publishes its ``history_`` rows when its fit ends
  (``daskangel_job_metrics``); they replace the live points at the same ``x``.
  The live reports of a monitored fit lag the clocks by the staleness (an epoch is
  reported once every task finished it), so the last epochs arrive this way.

At most ``daskangel.dashboard.metric-points`` points are kept per job, and only
for the jobs the clock service still keeps (``daskangel.clock.keep-jobs``).

Example
-------
>>> m = JobMetrics()
>>> m.observe("j", task=0, clock=1, metrics={"epoch": 1.0, "loss": 0.7})
>>> m.observe("j", task=1, clock=1, metrics={"epoch": 1.0, "loss": 0.7})
>>> m.publish("j", [{"epoch": 1, "loss": 0.7}, {"epoch": 2, "loss": 0.5}])
>>> m.series("j")
('epoch', [1.0, 2.0], {'loss': [0.7, 0.5]})
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from .. import config

__all__ = ["X_KEYS", "JobMetrics"]

# the first of these a report carries is its x; without any, the clock
X_KEYS = ("epoch", "sweep", "round", "iteration", "iter", "tree")
_FINAL = -1  # the "task" of published rows


def _numeric(metrics: dict[str, Any]) -> dict[str, float]:
    out = {}
    for k, v in metrics.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            continue
        if math.isfinite(float(v)):
            out[str(k)] = float(v)
    return out


def _x_of(metrics: dict[str, float], clock: float) -> tuple[str, float]:
    for k in X_KEYS:
        if k in metrics:
            return k, metrics[k]
    return "clock", float(clock)


class JobMetrics:
    """Per job: ``{x: {task: {metric: value}}}`` and the name of its x axis."""

    def __init__(self) -> None:
        self._points: dict[str, dict[float, dict[int, dict[str, float]]]] = {}
        self._x_name: dict[str, str] = {}
        # {(job, task): the task's newest report}, to spot new ones among repeats
        self._last: dict[tuple[str, int], dict[str, float]] = {}

    def _add(self, job: str, x_name: str, x: float, task: int, values: dict[str, float]) -> None:
        pts = self._points.setdefault(job, {})
        self._x_name.setdefault(job, x_name)
        if self._x_name[job] != x_name:
            if x_name == "clock":  # a job that reports epochs: keep to epochs
                return
            pts.clear()  # the first points were clock-numbered; the job now says better
            self._x_name[job] = x_name
        pts.setdefault(x, {})[task] = {k: v for k, v in values.items() if k != x_name}
        limit = int(config.get("daskangel.dashboard.metric-points"))
        for old in sorted(pts)[: max(0, len(pts) - limit)]:
            del pts[old]

    def observe(self, job: str, task: int, clock: int, metrics: dict[str, Any] | None) -> None:
        """A task's newest metrics, as they arrived on its clock tick ``clock``."""
        values = _numeric(metrics or {})
        if not values or self._last.get((job, task)) == values:
            return
        self._last[(job, task)] = values
        x_name, x = _x_of(values, clock)
        self._add(job, x_name, x, task, values)

    def publish(self, job: str, records: Iterable[dict[str, Any]]) -> None:
        """A fit's final metric rows (its ``history_``), one per epoch."""
        for i, rec in enumerate(records):
            values = _numeric(rec)
            if not values:
                continue
            x_name, x = _x_of(values, i + 1)
            if x_name == "clock":
                x_name = "row"
            self._add(job, x_name, x, _FINAL, values)

    def forget(self, keep: Iterable[str]) -> None:
        """Drop every job not in ``keep``."""
        keep = set(keep)
        for job in [j for j in self._points if j not in keep]:
            del self._points[job]
            self._x_name.pop(job, None)
        for key in [k for k in self._last if k[0] not in keep]:
            del self._last[key]

    def __contains__(self, job: object) -> bool:
        return job in self._points

    def jobs(self) -> list[str]:
        """Jobs with at least one point, oldest first."""
        return [j for j, p in self._points.items() if p]

    def series(self, job: str) -> tuple[str, list[float], dict[str, list[float]]]:
        """``(x name, xs, {metric: values})`` of a job; NaN where a metric is missing.

        At an ``x`` with published rows, those are the values; elsewhere the mean
        over the tasks that reported there.
        """
        pts = self._points.get(job, {})
        xs = sorted(pts)
        rows: list[dict[str, float]] = []
        for x in xs:
            by_task = pts[x]
            if _FINAL in by_task:
                rows.append(by_task[_FINAL])
                continue
            sums: dict[str, list[float]] = {}
            for vals in by_task.values():
                for k, v in vals.items():
                    sums.setdefault(k, []).append(v)
            rows.append({k: sum(v) / len(v) for k, v in sums.items()})
        names: list[str] = []
        for r in rows:
            names.extend(k for k in r if k not in names)
        cols = {k: [r.get(k, math.nan) for r in rows] for k in names}
        return self._x_name.get(job, "epoch"), [float(x) for x in xs], cols

    def latest(self, job: str) -> dict[str, float]:
        """The metrics at the job's newest point (``{}`` without any)."""
        x_name, xs, cols = self.series(job)
        if not xs:
            return {}
        out = {x_name: xs[-1]}
        out.update({k: v[-1] for k, v in cols.items() if not math.isnan(v[-1])})
        return out
