"""Bytes/s and calls/s per PS server over time: a rolling window on the scheduler.

Servers only count (``op_stats``: calls and bytes in/out since they started); a
rate needs two readings.  :class:`RateWindow` keeps, per server, the readings of
the last ``daskangel.dashboard.rate-window`` seconds and turns consecutive ones
into rates.  The status service feeds it every ``daskangel.dashboard.rate-interval``
(and on every other refresh of the counters, e.g. ``ps.status()``); readings
closer than half an interval to the previous one are dropped, so a burst of
refreshes does not make noisy rates.  A counter that goes down (a server rebuilt
after a lost worker starts from zero) restarts that server's series.

Example
-------
>>> w = RateWindow(interval=1.0, window=60.0)
>>> w.observe([{"id": "s#0", "bytes_in": 0, "bytes_out": 0, "calls": 0}], now=100.0)
>>> w.observe([{"id": "s#0", "bytes_in": 3000, "bytes_out": 1000, "calls": 20}], now=102.0)
>>> p = w.latest()["s#0"]
>>> p["time"], p["bytes_in_per_s"], p["bytes_per_s"], p["calls_per_s"]
(102.0, 1500.0, 2000.0, 10.0)
"""

from __future__ import annotations

from collections import deque
from typing import Any

__all__ = ["RateWindow"]


class RateWindow:
    """Rolling per-server readings of the servers' counters, and their rates.

    Parameters
    ----------
    interval
        Seconds between regular readings; readings less than half of it after the
        previous one are ignored.
    window
        Seconds of history kept.
    """

    def __init__(self, interval: float, window: float) -> None:
        if interval <= 0 or window <= 0:
            raise ValueError(f"interval and window: expected > 0, got {interval}, {window}")
        self.interval = float(interval)
        self.window = float(window)
        # {server id: deque[(time, bytes_in, bytes_out, calls)]}
        self._readings: dict[str, deque[tuple[float, int, int, int]]] = {}
        # {server id: deque[rate point]}: one point per pair of consecutive readings
        self._points: dict[str, deque[dict[str, float]]] = {}

    def observe(self, rows: list[dict[str, Any]], now: float) -> None:
        """Record one reading per server row (``id``, ``bytes_in``, ``bytes_out``, ``calls``)."""
        for r in rows:
            sid = str(r["id"])
            cur = (
                float(now),
                int(r.get("bytes_in", 0)),
                int(r.get("bytes_out", 0)),
                int(r.get("calls", 0)),
            )
            readings = self._readings.setdefault(sid, deque())
            points = self._points.setdefault(sid, deque())
            if readings:
                prev = readings[-1]
                dt = cur[0] - prev[0]
                if dt < self.interval / 2:
                    continue
                if any(c < p for c, p in zip(cur[1:], prev[1:], strict=True)):
                    readings.clear()  # the server restarted: its counters began again
                    points.clear()
                else:
                    b_in, b_out, calls = (
                        (c - p) / dt for c, p in zip(cur[1:], prev[1:], strict=True)
                    )
                    points.append(
                        {
                            "time": cur[0],
                            "bytes_in_per_s": b_in,
                            "bytes_out_per_s": b_out,
                            "bytes_per_s": b_in + b_out,
                            "calls_per_s": calls,
                        }
                    )
            readings.append(cur)
        self._trim(now)

    def _trim(self, now: float) -> None:
        old = now - self.window
        for sid in list(self._readings):
            readings, points = self._readings[sid], self._points[sid]
            while len(readings) > 1 and readings[0][0] < old:
                readings.popleft()
            while points and points[0]["time"] < old:
                points.popleft()
            if readings and readings[-1][0] < old:  # a server gone for a whole window
                del self._readings[sid], self._points[sid]

    def forget(self, keep: set[str]) -> None:
        """Drop the series of servers not in ``keep`` (their context closed)."""
        for sid in [s for s in self._readings if s not in keep]:
            del self._readings[sid], self._points[sid]

    def series(self) -> dict[str, list[dict[str, float]]]:
        """``{server id: [rate point, ...]}`` oldest first, within the window."""
        return {sid: list(p) for sid, p in sorted(self._points.items()) if p}

    def latest(self) -> dict[str, dict[str, float]]:
        """``{server id: newest rate point}`` of every server with one."""
        return {sid: p[-1] for sid, p in sorted(self._points.items()) if p}
