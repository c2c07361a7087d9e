"""The page's pure parts: units, the rate window and the jobs' metric series (no cluster)."""

from __future__ import annotations

import math

import dask
import pytest

from daskangel.scheduler._job_metrics import JobMetrics
from daskangel.scheduler._rates import RateWindow
from daskangel.scheduler._units import fmt_bytes, fmt_rate, fmt_rate_bytes, fmt_time

pytestmark = pytest.mark.timeout(30)


def _row(sid: str, b_in: int, b_out: int, calls: int) -> dict[str, object]:
    return {"id": sid, "bytes_in": b_in, "bytes_out": b_out, "calls": calls}


def test_units_read_like_dask() -> None:
    assert fmt_bytes(3 * 2**30) == "3.00 GiB"
    assert fmt_time(1.2853794081681e-3) == "1.29 ms"  # the raw latency
    assert fmt_rate_bytes(12.3 * 2**20) == "12.30 MiB/s"
    assert fmt_rate(1234.0, "calls") == "1.2 k calls/s"
    assert fmt_bytes(float("nan")) == "0 B" and fmt_time(-1) == "0 s"


def test_rate_window_rates_spacing_restarts_and_window() -> None:
    w = RateWindow(interval=1.0, window=10.0)
    w.observe([_row("a", 0, 0, 0)], now=0.0)
    w.observe([_row("a", 100, 0, 1)], now=0.2)  # closer than half an interval: dropped
    w.observe([_row("a", 1000, 1000, 10)], now=2.0)
    assert w.latest()["a"]["bytes_per_s"] == 1000.0
    assert w.latest()["a"]["calls_per_s"] == 5.0
    w.observe([_row("a", 10, 0, 1)], now=3.0)  # counters went down: the server restarted
    assert "a" not in w.latest()
    w.observe([_row("a", 20, 0, 2)], now=4.0)
    assert w.latest()["a"]["bytes_per_s"] == 10.0
    w.observe([_row("a", 20, 0, 2), _row("b", 0, 0, 0)], now=20.0)  # 16 s later
    assert [p["time"] for p in w.series()["a"]] == [20.0]  # older points left the window
    w.forget({"b"})
    assert w.series() == {} and "a" not in w._readings


def test_job_metrics_live_then_final_and_bounded() -> None:
    m = JobMetrics()
    m.observe("j", task=0, clock=1, metrics={"loss": 0.9})  # no epoch: at its clock
    m.observe("j", task=0, clock=2, metrics={"loss": 0.9})  # a repeat, not a point
    assert m.series("j") == ("clock", [1.0], {"loss": [0.9]})
    m.observe("j", task=0, clock=3, metrics={"epoch": 1, "loss": 0.8})
    m.observe("j", task=1, clock=3, metrics={"epoch": 1, "loss": 0.6})
    assert m.series("j") == ("epoch", [1.0], {"loss": [pytest.approx(0.7)]})  # task mean
    m.observe("j", task=0, clock=9, metrics={"inertia": 3.0})  # clock points stay out
    m.publish("j", [{"epoch": 1, "loss": 0.75}, {"epoch": 2, "loss": 0.5, "auc": 0.9}])
    x, xs, cols = m.series("j")
    assert (x, xs, cols["loss"]) == ("epoch", [1.0, 2.0], [0.75, 0.5])
    assert math.isnan(cols["auc"][0]) and cols["auc"][1] == 0.9
    assert m.latest("j") == {"epoch": 2.0, "loss": 0.5, "auc": 0.9}
    with dask.config.set({"daskangel.dashboard.metric-points": 3}):
        m.publish("k", [{"sweep": s, "ll": -s} for s in range(1, 6)])
    assert m.series("k")[1] == [3.0, 4.0, 5.0]
    m.forget(["k"])
    assert m.jobs() == ["k"]
