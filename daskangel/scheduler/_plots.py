"""The plots of the daskangel page: rates per server over time and metrics per job.

Built as distributed's own dashboard components are (``distributed/dashboard/
components/scheduler.py``): Bokeh figures over ``ColumnDataSource``s whose data
is replaced on each refresh, byte axes with ``NumeralTickFormatter("0.0 b")``,
hover tooltips with ``{0.00 b}`` and time on a ``datetime`` axis.

* :class:`RatePlots`: bytes/s and calls/s of every PS server over the rolling
  window kept on the scheduler (:class:`~._rates.RateWindow`), one line per
  server (one ``multi_line`` source, so servers can come and go).
* :class:`MetricsPlots`: one figure per training job (the newest
  ``daskangel.dashboard.metric-jobs``), a line and its points per metric the job
  reported, against its epoch (:class:`~._job_metrics.JobMetrics`).  The points'
  source is named ``daskangel-metrics-<job>``.

Example
-------
>>> plots = MetricsPlots()                                  # doctest: +SKIP
>>> plots.update({"job-1": ("epoch", [1.0, 2.0], {"loss": [0.7, 0.5]})})  # doctest: +SKIP
"""

from __future__ import annotations

import math
from typing import Any

from ._units import fmt_metric

__all__ = ["PALETTE", "MetricsPlots", "RatePlots", "metric_points"]

# bokeh.palettes.Category10_10, spelt out so this module imports without bokeh
PALETTE = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
)  # fmt: skip


def metric_points(xs: list[float], cols: dict[str, list[float]]) -> dict[str, list[Any]]:
    """The points of a job's metrics plot, one per (metric, x) with a value.

    >>> p = metric_points([1.0, 2.0], {"loss": [0.7, 0.5], "auc": [float("nan"), 0.9]})
    >>> list(zip(p["metric"], p["x"], p["y"], p["text"]))
    [('loss', 1.0, 0.7, '0.7'), ('loss', 2.0, 0.5, '0.5'), ('auc', 2.0, 0.9, '0.9')]
    """
    out: dict[str, list[Any]] = {"metric": [], "x": [], "y": [], "text": [], "color": []}
    for i, (name, ys) in enumerate(cols.items()):
        for x, y in zip(xs, ys, strict=True):
            if math.isnan(y):
                continue
            out["metric"].append(name)
            out["x"].append(x)
            out["y"].append(y)
            out["text"].append(fmt_metric(name, y))
            out["color"].append(PALETTE[i % len(PALETTE)])
    return out


class RatePlots:
    """Bytes/s and calls/s per PS server, over the scheduler's rolling window."""

    def __init__(self) -> None:
        from bokeh.models import ColumnDataSource, DataRange1d, NumeralTickFormatter
        from bokeh.plotting import figure

        empty: dict[str, list[Any]] = {"server": [], "xs": [], "ys": [], "color": []}
        self.bytes_source = ColumnDataSource(dict(empty), name="daskangel-rates-bytes")
        self.calls_source = ColumnDataSource(dict(empty), name="daskangel-rates-calls")
        self.figures = []
        specs = (
            (
                self.bytes_source,
                "PS traffic per server (bytes/s in + out)",
                "@server: $y{0.00 b}/s",
            ),
            (self.calls_source, "PS calls per server (calls/s)", "@server: $y{0.0 a} calls/s"),
        )
        for source, title, tip in specs:
            fig = figure(
                title=title,
                x_axis_type="datetime",
                x_range=DataRange1d(range_padding=0),
                height=240,
                sizing_mode="stretch_width",
                tools="xpan,xwheel_zoom,reset,hover",
                tooltips=tip,
            )
            fig.multi_line(
                xs="xs", ys="ys", line_color="color", line_width=2, legend_field="server",
                source=source,
            )  # fmt: skip
            fig.y_range.start = 0  # type: ignore[attr-defined]
            fig.legend.location = "top_left"
            fig.legend.label_text_font_size = "8pt"
            fig.xgrid.visible = False
            self.figures.append(fig)
        self.figures[0].yaxis[0].formatter = NumeralTickFormatter(format="0.0 b")
        self.figures[0].yaxis.axis_label = "bytes / second"
        self.figures[1].yaxis[0].formatter = NumeralTickFormatter(format="0.0 a")
        self.figures[1].yaxis.axis_label = "calls / second"

    def update(self, series: dict[str, list[dict[str, float]]]) -> None:
        """Redraw from ``RateWindow.series()``."""
        servers = sorted(series)
        colors = [PALETTE[i % len(PALETTE)] for i in range(len(servers))]
        xs = [[1000.0 * p["time"] for p in series[s]] for s in servers]  # ms: bokeh datetime
        for source, field in (
            (self.bytes_source, "bytes_per_s"),
            (self.calls_source, "calls_per_s"),
        ):
            source.data = {
                "server": servers,
                "xs": xs,
                "ys": [[p[field] for p in series[s]] for s in servers],
                "color": colors,
            }


class MetricsPlots:
    """One figure per training job: each reported metric against the job's epoch."""

    def __init__(self) -> None:
        from bokeh.layouts import column
        from bokeh.models import Div  # type: ignore[attr-defined]

        self.note = Div(text="<i>No training metrics reported yet.</i>")
        self.root = column(self.note, sizing_mode="stretch_width")
        # {job: (figure, points source, lines source)}
        self.figures: dict[str, tuple[Any, Any, Any]] = {}

    def _figure(self, job: str, x_name: str) -> tuple[Any, Any, Any]:
        from bokeh.models import ColumnDataSource
        from bokeh.plotting import figure

        points = ColumnDataSource(metric_points([], {}), name=f"daskangel-metrics-{job}")
        lines = ColumnDataSource({"metric": [], "xs": [], "ys": [], "color": []})
        fig = figure(
            title=f"Training metrics of job {job} per {x_name}",
            height=260,
            sizing_mode="stretch_width",
            tools="pan,wheel_zoom,box_zoom,reset,hover",
            tooltips=f"@metric at {x_name} @x: @text",
        )
        fig.multi_line(xs="xs", ys="ys", line_color="color", line_width=2, source=lines)
        fig.scatter(x="x", y="y", color="color", size=7, legend_field="metric", source=points)
        fig.xaxis.axis_label = x_name
        fig.legend.location = "top_right"
        fig.legend.click_policy = "hide"
        fig.legend.label_text_font_size = "8pt"
        return fig, points, lines

    def update(self, jobs: dict[str, tuple[str, list[float], dict[str, list[float]]]]) -> None:
        """Redraw from ``{job: JobMetrics.series(job)}`` (the jobs to show, oldest first)."""
        for job in [j for j in self.figures if j not in jobs]:
            del self.figures[job]
        for job, (x_name, xs, cols) in jobs.items():
            if job not in self.figures:
                self.figures[job] = self._figure(job, x_name)
            _, points, lines = self.figures[job]
            points.data = metric_points(xs, cols)
            names = list(cols)
            lines.data = {
                "metric": names,
                "xs": [xs for _ in names],
                "ys": [list(cols[n]) for n in names],  # NaN: a gap in the line
                "color": [PALETTE[i % len(PALETTE)] for i in range(len(names))],
            }
        children = [self.figures[j][0] for j in reversed(list(jobs))]  # newest first
        if not children:
            children = [self.note]
        if list(self.root.children) != children:
            self.root.children = children
