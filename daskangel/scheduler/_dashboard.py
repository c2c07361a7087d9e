"""The daskangel page on the Dask dashboard: how it joins the running Bokeh server.

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

The panel (:class:`~._panel.DaskAngelPanel`: task clocks, PS memory, rates over
time, metrics per job, the task / server / array tables) refreshes every
``daskangel.dashboard.refresh`` from the status service.  Without bokeh, or
without a dashboard, nothing is registered.

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

__all__ = ["PAGE", "PANEL", "register_dashboard"]

logger = logging.getLogger(__name__)

PAGE = "/daskangel"
PANEL = "/individual-daskangel"


def _doc(
    status: StatusService, template: bool, scheduler: Scheduler, extra: dict[str, Any], doc: Any
) -> None:
    from distributed.dashboard.components import add_periodic_callback
    from distributed.dashboard.components.scheduler import BOKEH_THEME, env

    from ._panel import DaskAngelPanel

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
