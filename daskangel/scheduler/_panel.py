"""The daskangel panel: the Bokeh layout of the page and its periodic update.

From top to bottom: the jobs (protocol, clocks, how long they ran); the clock of
every task and the memory of every PS server; bytes/s and calls/s per server
over time (:class:`~._plots.RatePlots`); the training metrics of each job per
epoch (:class:`~._plots.MetricsPlots`); the task, server and array tables
(:mod:`._tables`).  Every number is formatted as Dask's pages do (:mod:`._units`).

Sources carry names so that a client of the Bokeh server (the dashboard test,
a notebook) finds them: ``daskangel-tasks``, ``daskangel-servers``,
``daskangel-arrays``, ``daskangel-rates-bytes``, ``daskangel-rates-calls`` and
``daskangel-metrics-<job>``.

Example
-------
>>> panel = DaskAngelPanel(plugin.status)     # doctest: +SKIP
>>> panel.update(); doc.add_root(panel.root)  # doctest: +SKIP
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from .. import config
from ._plots import MetricsPlots, RatePlots
from ._tables import (
    ARRAY_COLUMNS,
    SERVER_COLUMNS,
    TASK_COLUMNS,
    array_data,
    data_table,
    server_data,
    task_data,
)
from ._units import fmt_bytes, fmt_time

if TYPE_CHECKING:
    from ._status import StatusService

__all__ = ["DaskAngelPanel", "job_line"]


def job_line(j: dict[str, Any], now: float) -> str:
    """One line of the header about a job summary (``Job.summary()``).

    >>> j = {"job": "j1", "status": "done", "staleness": 0, "clocks": [5, 5], "done": [0, 1],
    ...      "max_lead": 0, "started": 10.0, "finished": 12.5, "n_tasks": 2}
    >>> job_line(j, now=20.0)
    'job <code>j1</code> (done, 2 tasks, staleness 0): clocks 5..5, max lead 0, ran 2.50 s'
    """
    running = [c for t, c in enumerate(j["clocks"]) if t not in j["done"]] or j["clocks"]
    end = j.get("finished") or now
    stale = "∞" if j["staleness"] is None else j["staleness"]
    clocks = f"{min(running)}..{max(running)}" if running else "-"
    return (
        f"job <code>{j['job']}</code> ({j['status']}, {j['n_tasks']} tasks, staleness {stale}): "
        f"clocks {clocks}, max lead {j['max_lead']}, ran {fmt_time(end - j['started'])}"
    )


class DaskAngelPanel:
    """Bokeh models of the page, redrawn from the status service by :meth:`update`."""

    def __init__(self, status: StatusService) -> None:
        from bokeh.layouts import column, row
        from bokeh.models import (  # type: ignore[attr-defined]
            ColumnDataSource,
            Div,
            FactorRange,
            NumeralTickFormatter,
        )
        from bokeh.plotting import figure

        self.status = status
        self.tasks = ColumnDataSource(task_data([], {}), name="daskangel-tasks")
        self.servers = ColumnDataSource(server_data([], {}), name="daskangel-servers")
        self.arrays = ColumnDataSource(array_data([]), name="daskangel-arrays")
        self.header = Div(text="<b>daskangel</b>: no training job yet")
        self.clock_fig = figure(
            title="Clock per task",
            x_range=FactorRange(factors=[]),
            height=260,
            sizing_mode="stretch_width",
            tools="hover",
            tooltips="@id: clock @clock, waited @waited_text, pulled @pulled_text",
        )
        self.clock_fig.vbar(x="id", top="clock", width=0.8, source=self.tasks)
        self.clock_fig.xaxis.major_label_orientation = 0.8
        self.mem_fig = figure(
            title="PS memory per server",
            x_range=FactorRange(factors=[]),
            height=260,
            sizing_mode="stretch_width",
            tools="hover",
            tooltips="@id: @nbytes_text held, @rate_text, @calls_rate_text",
        )
        self.mem_fig.vbar(x="id", top="nbytes", width=0.8, source=self.servers)
        self.mem_fig.yaxis[0].formatter = NumeralTickFormatter(format="0.0 b")
        self.mem_fig.y_range.start = 0  # type: ignore[attr-defined]
        self.rates = RatePlots()
        self.metrics = MetricsPlots()
        self.root = column(
            self.header,
            row(self.clock_fig, self.mem_fig, sizing_mode="stretch_width"),
            row(*self.rates.figures, sizing_mode="stretch_width"),
            self.metrics.root,
            Div(text="<b>Training tasks</b>"),
            data_table(self.tasks, TASK_COLUMNS, 240),
            Div(text="<b>PS servers</b>"),
            data_table(self.servers, SERVER_COLUMNS, 160),
            Div(text="<b>Arrays</b>: blocks and bytes on each server"),
            data_table(self.arrays, ARRAY_COLUMNS, 200),
            sizing_mode="stretch_width",
        )

    def update(self) -> None:
        """Redraw from the status service (server counters refresh in the background)."""
        st = self.status
        if time.monotonic() - st.refreshed > config.get_seconds("daskangel.status.max-age"):
            st.refresh_soon()
        keep = int(config.get("daskangel.dashboard.metric-jobs"))
        jobs = st.metric_jobs()
        latest = {j: st.metrics.latest(j) for j in jobs}
        tasks = st.task_rows()
        self.tasks.data = task_data(tasks, latest)
        self.clock_fig.x_range.factors = [r["id"] for r in tasks]  # type: ignore[attr-defined]
        servers = st.servers
        self.servers.data = server_data(servers, st.rates.latest())
        self.mem_fig.x_range.factors = [r["id"] for r in servers]  # type: ignore[attr-defined]
        self.arrays.data = array_data(st.array_rows())
        self.rates.update(st.rates.series())
        self.metrics.update({j: st.metrics.series(j) for j in jobs[-keep:]})
        summaries = st.clocks.list_jobs()
        if summaries:
            now = time.time()
            held = sum(int(r.get("nbytes", 0)) for r in servers)
            lines = [job_line(j, now) for j in summaries[-5:]]
            self.header.text = (
                f"<b>daskangel</b>: {len(servers)} PS servers holding {fmt_bytes(held)} "
                f"in {len(st.registry.arrays)} arrays<br>" + "<br>".join(lines)
            )
