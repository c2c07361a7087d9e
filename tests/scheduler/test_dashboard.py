"""The daskangel dashboard page, fetched over HTTP while a job runs and after a fit."""

from __future__ import annotations

import json
import re
import urllib.request
from collections import Counter

import dask
import numpy as np
import pytest
from bokeh.client import pull_session
from bokeh.models import ColumnDataSource, Div
from distributed import Event

import daskangel as angel
from daskangel.models import LogisticRegression
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


_SIZE = re.compile(r"^\d+(\.\d+)? (B|kiB|MiB|GiB)$")
_TIME = re.compile(r"^(\d+\.\d\d (us|ms|s)|0 s)$")


@pytest.mark.timeout(180)
def test_dashboard_page_reads_like_dask_after_a_fit(ps, cluster):
    """Units as Dask writes them, the job's metrics plot, rates over time, the arrays."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(240, 6))
    y = (X @ rng.normal(size=6) > 0).astype(int)
    base = f"http://127.0.0.1:{cluster.scheduler.http_server.port}"
    with dask.config.set({"daskangel.dashboard.rate-interval": "100ms"}):
        ps.status(max_age=0)  # a reading of the counters before the fit ...
        clf = LogisticRegression(ps=ps, max_iter=4, random_state=0, progress=False).fit(X, y)
        ps.status(max_age=0)  # ... and after it: the window has the fit's traffic
    job = clf.train_result_.job
    assert urllib.request.urlopen(f"{base}/daskangel").status == 200
    with pull_session(url=f"{base}/individual-daskangel") as session:
        doc = session.document
        servers = doc.select_one({"name": "daskangel-servers"}).data
        tasks = doc.select_one({"name": "daskangel-tasks"}).data
        arrays = doc.select_one({"name": "daskangel-arrays"}).data
        points = doc.select_one({"name": f"daskangel-metrics-{job}"}).data
        rates = doc.select_one({"name": "daskangel-rates-bytes"}).data
        calls = doc.select_one({"name": "daskangel-rates-calls"}).data
        header = next(d.text for d in doc.select({"type": Div}) if "daskangel</b>:" in d.text)
    # servers: every number formatted, as on Dask's own pages
    assert set(servers["id"]) >= {str(s) for s in ps.servers}
    assert all(_SIZE.match(t) for t in servers["nbytes_text"] + servers["out_text"])
    assert all(_TIME.match(t) for t in servers["latency_text"])
    assert all(t.endswith(" B/s") or t.endswith("iB/s") for t in servers["rate_text"])
    assert all(t.endswith(" calls/s") for t in servers["calls_rate_text"])
    assert any(v > 0 for v in servers["nbytes"])
    assert "1.285379" not in " ".join(servers["latency_text"])  # no raw floats
    # bytes/s and calls/s per server over time: the fit moved bytes and made calls
    assert set(rates["server"]) == set(servers["id"])
    assert max(max(ys) for ys in rates["ys"]) > 0
    assert max(max(ys) for ys in calls["ys"]) > 0
    # the job's tasks: formatted traffic and the metrics they reported
    mine = [i for i, t in enumerate(tasks["id"]) if t.startswith(f"{job}/")]
    assert mine
    assert all(_SIZE.match(tasks["pulled_text"][i]) for i in mine)
    assert all(_TIME.match(tasks["latency_text"][i]) for i in mine)
    assert all("loss=" in tasks["metrics"][i] for i in mine)
    assert f"<code>{job}</code>" in header and " B" in header
    # the metrics plot has the job's points: every history_ value at its epoch
    hist = clf.history_
    for col in [c for c in hist.columns if c != "epoch" and hist[c].notna().all()]:
        pts = zip(points["metric"], points["x"], points["y"], strict=True)
        got = [(x, y) for m, x, y in pts if m == col]
        assert [x for x, _ in got] == [float(e) for e in hist["epoch"]], col
        np.testing.assert_allclose([y for _, y in got], hist[col].to_numpy(), rtol=1e-12)
    assert "train_loss" in points["metric"]
    # arrays: the model's weights, its blocks per server and the bytes they hold
    w = ps.get_array(clf._arrays["weights"])
    rows = [i for i, a in enumerate(arrays["array"]) if a == w.name]
    per_server = Counter(str(b.server) for b in w.blocks)
    assert {arrays["server"][i]: arrays["blocks"][i] for i in rows} == dict(per_server)
    assert sum(arrays["nbytes"][i] for i in rows) == w.nbytes
    assert all(_SIZE.match(arrays["nbytes_text"][i]) for i in rows)
    assert all(arrays["blocks_text"][i].endswith(f" of {len(w.blocks)}") for i in rows)
