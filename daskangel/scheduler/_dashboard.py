"""The daskangel page on the Dask dashboard: task clocks, waiting, PS memory and traffic.

Distributed builds its dashboard once, when the scheduler starts, from the
``applications`` dict in ``distributed/dashboard/scheduler.py``; our plugin is
registered later, so :func:`register_dashboard` adds two Bokeh applications to
the running Bokeh server the same way Bokeh adds its own (its per-app URL
patterns), and lists them where distributed lists its pages:

* ``/daskangel``: a full page with the dashboard's navigation bar; its name is
  added to the bar (``template_variables["pages"]``) and to the "More..." menu;
* ``/individual-daskangel``: the same panel alone.  Distributed's
  ``/individual-plots.json`` lists every ``individual-*`` Bokeh application, which
  is where the JupyterLab Dask sidebar finds its entries.

The panel refreshes every ``daskangel.dashboard.refresh`` from the status service.
Without bokeh, or without a dashboard, nothing is registered.

Example
-------
>>> import json, urllib.request                                    # doctest: +SKIP
>>> json.load(urllib.request.urlopen(client.dashboard_link.replace("status",  # doctest: +SKIP
...     "individual-plots.json")))["Individual Daskangel"]  # doctest: +SKIP
'/individual-daskangel'
"""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING, Any

from .. import config

if TYPE_CHECKING:
    from distributed.scheduler import Scheduler

    from ._status import StatusService

__all__ = ["PAGE", "PANEL", "DaskAngelPanel", "register_dashboard"]

logger = logging.getLogger(__name__)

PAGE = "/daskangel"
PANEL = "/individual-daskangel"

_TASK_COLUMNS = [
    ("id", "task"),
    ("group", "group"),
    ("worker", "worker"),
    ("status", "status"),
    ("clock", "clock"),
    ("ahead", "ahead of slowest"),
    ("waited_s", "waited (s)"),
    ("bytes_out", "pulled (B)"),
    ("bytes_in", "pushed (B)"),
    ("calls", "calls"),
    ("latency_ms", "latency (ms)"),
    ("cache_hits", "cache hits"),
    ("metrics", "reported metrics"),
]
_SERVER_COLUMNS = [
    ("id", "server"),
    ("nbytes", "memory (B)"),
    ("n_blocks", "blocks"),
    ("bytes_in", "in (B)"),
    ("bytes_out", "out (B)"),
    ("calls", "calls"),
    ("latency_ms", "latency (ms)"),
    ("queue", "queue"),
]


class DaskAngelPanel:
    """Bokeh models showing the clock of every task and the PS servers' load."""

    def __init__(self, status: StatusService) -> None:
        from bokeh.layouts import column, row
        from bokeh.models import (  # type: ignore[attr-defined]
            ColumnDataSource,
            DataTable,
            Div,
            FactorRange,
            TableColumn,
        )
        from bokeh.plotting import figure

        self.status = status
        self.tasks = ColumnDataSource({k: [] for k, _ in _TASK_COLUMNS})
        self.servers = ColumnDataSource({k: [] for k, _ in _SERVER_COLUMNS})
        self.header = Div(text="<b>daskangel</b>: no training job yet")
        self.clock_fig = figure(
            title="Clock per task",
            x_range=FactorRange(factors=[]),
            height=260,
            sizing_mode="stretch_width",
            tools="hover",
            tooltips="@id: clock @clock, waited @waited_s{0.00} s",
        )
        self.clock_fig.vbar(x="id", top="clock", width=0.8, source=self.tasks)
        self.clock_fig.xaxis.major_label_orientation = 0.8
        self.mem_fig = figure(
            title="PS memory per server (bytes)",
            x_range=FactorRange(factors=[]),
            height=260,
            sizing_mode="stretch_width",
            tools="hover",
            tooltips="@id: @nbytes bytes, in @bytes_in, out @bytes_out",
        )
        self.mem_fig.vbar(x="id", top="nbytes", width=0.8, source=self.servers)
        self.task_table = DataTable(
            source=self.tasks,
            columns=[TableColumn(field=k, title=t) for k, t in _TASK_COLUMNS],
            height=260,
            sizing_mode="stretch_width",
        )
        self.server_table = DataTable(
            source=self.servers,
            columns=[TableColumn(field=k, title=t) for k, t in _SERVER_COLUMNS],
            height=160,
            sizing_mode="stretch_width",
        )
        self.root = column(
            self.header,
            row(self.clock_fig, self.mem_fig, sizing_mode="stretch_width"),
            self.task_table,
            self.server_table,
            sizing_mode="stretch_width",
        )

    def update(self) -> None:
        """Redraw from the status service (server counters refresh in the background)."""
        import time

        st = self.status
        if time.monotonic() - st.refreshed > config.get_seconds("daskangel.status.max-age"):
            st.refresh_soon()
        tasks = st.task_rows()
        self.tasks.data = {k: [r[k] for r in tasks] for k, _ in _TASK_COLUMNS}
        self.clock_fig.x_range.factors = [r["id"] for r in tasks]  # type: ignore[attr-defined]
        servers = st.servers
        self.servers.data = {k: [r[k] for r in servers] for k, _ in _SERVER_COLUMNS}
        self.mem_fig.x_range.factors = [r["id"] for r in servers]  # type: ignore[attr-defined]
        jobs = st.clocks.list_jobs()
        if jobs:
            parts = []
            for j in jobs[-5:]:
                done = [c for t, c in enumerate(j["clocks"]) if t not in j["done"]] or j["clocks"]
                parts.append(
                    f"job <code>{j['job']}</code> ({j['status']}, staleness "
                    f"{'∞' if j['staleness'] is None else j['staleness']}): "
                    f"clocks {min(done)}..{max(done)}, max lead {j['max_lead']}"
                )
            self.header.text = "<b>daskangel</b><br>" + "<br>".join(parts)


def _doc(
    status: StatusService, template: bool, scheduler: Scheduler, extra: dict[str, Any], doc: Any
) -> None:
    from distributed.dashboard.components import add_periodic_callback
    from distributed.dashboard.components.scheduler import BOKEH_THEME, env

    panel = DaskAngelPanel(status)
    panel.update()
    interval = int(1000 * config.get_seconds("daskangel.dashboard.refresh"))
    add_periodic_callback(doc, panel, interval)
    doc.add_root(panel.root)
    doc.title = "Dask: daskangel"
    doc.theme = BOKEH_THEME
    if template:
        doc.template = env.get_template("simple.html")
        doc.template_variables.update(extra)


def _bokeh_server(scheduler: Scheduler) -> Any:
    http = getattr(scheduler, "http_application", None)
    if http is None:
        return None
    try:
        from bokeh.server.tornado import BokehTornado
    except ImportError:
        return None
    return next((a for a in http.applications if isinstance(a, BokehTornado)), None)


def _add_application(server: Any, path: str, func: Any) -> None:
    """Add a Bokeh application to a running Bokeh server, as its constructor would."""
    from bokeh.application import Application
    from bokeh.application.handlers.function import FunctionHandler
    from bokeh.server.contexts import ApplicationContext
    from bokeh.server.tornado import create_static_handler
    from bokeh.server.urls import per_app_patterns
    from bokeh.server.views.ws import WSHandler

    app = Application(FunctionHandler(func))
    ctx = ApplicationContext(app, url=path, logout_url=None)
    ctx._loop = server._loop
    prefix = server._prefix
    routes: list[Any] = []
    for pattern in per_app_patterns:
        handler = pattern[1]
        context: dict[str, Any] = {"application_context": ctx}
        if issubclass(handler, WSHandler):
            context.update(compression_level=None, mem_level=None)
        routes.append((prefix + path + pattern[0], handler, context))
    ws_path = next(r[0] for r in routes if r[0].endswith("/ws"))
    for r in routes:
        r[2]["bokeh_websocket_path"] = ws_path
    routes.append(create_static_handler(prefix, path, app))
    server._applications[path] = ctx
    server.add_handlers(r".*", routes)
    server._loop.add_callback(ctx.run_load_hook)


def register_dashboard(scheduler: Scheduler, status: StatusService) -> bool:
    """Add the daskangel pages to the scheduler's dashboard; False if there is none."""
    server = _bokeh_server(scheduler)
    if server is None:
        return False
    if PAGE in server.app_paths:
        return True
    try:
        from distributed.dashboard.scheduler import template_variables

        tv = template_variables(scheduler)
        extra = {"prefix": (server._prefix or "") + "/", **tv}
        _add_application(server, PAGE, functools.partial(_doc, status, True, scheduler, extra))
        _add_application(server, PANEL, functools.partial(_doc, status, False, scheduler, extra))
        if "daskangel" not in tv["pages"]:
            tv["pages"].append("daskangel")
        if not any(p["url"] == PANEL.strip("/") for p in tv["plots"]):
            tv["plots"].append({"url": PANEL.strip("/"), "name": "Daskangel"})
            tv["plots"].sort(key=lambda d: d["name"])
    except Exception as e:  # noqa: BLE001 - the dashboard is optional, training is not
        logger.warning("daskangel: could not add the dashboard page: %r", e)
        return False
    return True
