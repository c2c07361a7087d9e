"""The daskangel dashboard page, fetched over HTTP while a job runs; and ps.status()."""

from __future__ import annotations

import json
import urllib.request

import pytest
from bokeh.client import pull_session
from bokeh.models import ColumnDataSource
from distributed import Event

import daskangel as angel
from daskangel.train import seceded


def _hold_at(ctx, part):
    """Clock to 3, say so, wait for the test; then clock to 5, say so, wait again."""
    for stop in (3, 5):
        while ctx.iteration < stop:
            ctx.clock()
        Event(f"{ctx.job}-at{stop}-{ctx.task_id}").set()
        with seceded():
            assert Event(f"{ctx.job}-go{stop}").wait(120)
    return ctx.iteration


def _page(base: str, job: str) -> tuple[dict[str, int], dict[str, int]]:
    """Pull the page's Bokeh document over HTTP/websocket.

    Returns ``({task id: clock}, {server id: bytes held})``.
    """
    clocks: dict[str, int] | None = None
    memory: dict[str, int] | None = None
    with pull_session(url=f"{base}/individual-daskangel") as session:
        for src in session.document.select({"type": ColumnDataSource}):
            data = src.data
            if "clock" in data and "id" in data:
                ids = zip(data["id"], data["clock"], strict=True)
                clocks = {i: c for i, c in ids if i.startswith(job)}
            if "nbytes" in data and "id" in data:
                memory = dict(zip(data["id"], data["nbytes"], strict=True))
    assert clocks is not None, "no task clock table on the page"
    assert memory is not None, "no PS server table on the page"
    return clocks, memory


def _wait_all(job: str, what: str, n: int) -> None:
    for t in range(n):
        assert Event(f"{job}-{what}-{t}").wait(120)


@pytest.mark.timeout(180)
def test_dashboard_page_shows_live_task_clocks(ps, cluster):
    ps.zeros("dash_w", shape=(4,))
    trainer = angel.Trainer(ps, _hold_at, None, groups=3, sync=angel.SSP(1), progress=False).start()
    job = trainer.job
    base = f"http://127.0.0.1:{cluster.scheduler.http_server.port}"
    try:
        _wait_all(job, "at3", 3)
        plots = json.load(urllib.request.urlopen(f"{base}/individual-plots.json"))
        assert plots["Individual Daskangel"] == "/individual-daskangel"  # JupyterLab sidebar
        page = urllib.request.urlopen(f"{base}/daskangel")
        assert page.status == 200
        status_page = urllib.request.urlopen(f"{base}/status").read().decode()
        assert '<a href="daskangel">' in status_page  # in the navigation bar ...
        assert '<a href="individual-daskangel">' in status_page  # ... and in "More..."
        clocks, _ = _page(base, job)
        assert clocks == {f"{job}/{t}": 3 for t in range(3)}
        # the page refreshes itself: every open session has the periodic update
        from bokeh.server.tornado import BokehTornado

        bokeh_app = next(
            a
            for a in cluster.scheduler.http_application.applications
            if isinstance(a, BokehTornado)
        )
        sessions = bokeh_app.get_sessions("/individual-daskangel")
        assert sessions
        periods = [cb.period for s in sessions for cb in s.document.session_callbacks]
        assert 1000 in periods  # daskangel.dashboard.refresh
        st = ps.status()
        assert list(st[st["kind"] == "task"]["clock"]) == [3, 3, 3]
        Event(f"{job}-go3").set()
        _wait_all(job, "at5", 3)
        clocks, memory = _page(base, job)
        assert clocks == {f"{job}/{t}": 5 for t in range(3)}
        assert set(memory) >= {str(s) for s in ps.servers}  # refreshed by ps.status() above
        assert sum(memory.values()) >= 4 * 4  # dash_w is held by the servers
    finally:
        Event(f"{job}-go3").set()
        Event(f"{job}-go5").set()
    assert trainer.result().results == [5, 5, 5]
