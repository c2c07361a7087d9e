"""A token bucket in bytes, with debt, and the counters the status page shows.

Tokens accrue at ``rate`` bytes per second up to ``rate * burst``.  Budgeted
sends spend what is there (a send may overdraw by part of a unit: the debt is
paid back before the next one).

Example
-------
>>> b = TokenBucket(rate=1000.0, burst=0.5, now=0.0)
>>> b.available(now=1.0)          # full after 0.5 s: 500 bytes
500.0
>>> b.spend(800); b.available(now=1.0)
-300.0
>>> b.available(now=1.5)
200.0
"""

from __future__ import annotations

import threading
import time
from collections import deque

__all__ = ["CommStats", "TokenBucket"]


class TokenBucket:
    """Bytes that may be sent now (not thread-safe: the pusher locks)."""

    def __init__(self, rate: float, burst: float, now: float | None = None) -> None:
        self.rate = float(rate)
        self.depth = self.rate * float(burst)
        self.tokens = 0.0
        self.t = time.monotonic() if now is None else now

    def available(self, now: float | None = None) -> float:
        """Tokens after refilling up to ``now`` (negative while in debt)."""
        now = time.monotonic() if now is None else now
        self.tokens = min(self.depth, self.tokens + (now - self.t) * self.rate)
        self.t = now
        return self.tokens

    def spend(self, nbytes: float) -> None:
        self.tokens -= float(nbytes)

    def retune(self, rate: float, burst: float) -> None:
        """A new budget from now on (tokens kept, capped by the new depth)."""
        self.available()
        self.rate = float(rate)
        self.depth = self.rate * float(burst)
        self.tokens = min(self.tokens, self.depth)


class CommStats:
    """A worker's push traffic: sent early (budgeted), held back to the clock boundary,
    and the achieved rate over the last ``window`` seconds."""

    def __init__(self, window: float) -> None:
        self.window = float(window)
        self.early = 0  # bytes sent between clock boundaries, within the budget
        self.boundary = 0  # bytes that waited for a clock boundary (or a size flush)
        self.early_units = 0
        self.boundary_units = 0
        self.short_clocks = 0  # clock boundaries that needed more than the budget
        # [(time, nbytes)] of the last window's pushes, and their sum; recorded by the
        # pushing thread while a task's clock() reads the rate: under the lock
        self._recent: deque[tuple[float, int]] = deque()
        self._recent_bytes = 0
        self._lock = threading.Lock()

    def record(self, nbytes: int, units: int, early: bool, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        if early:
            self.early += nbytes
            self.early_units += units
        else:
            self.boundary += nbytes
            self.boundary_units += units
        with self._lock:
            self._recent.append((now, nbytes))
            self._recent_bytes += nbytes
            self._trim(now)

    def _trim(self, now: float) -> None:  # under self._lock
        while self._recent and self._recent[0][0] < now - self.window:
            self._recent_bytes -= self._recent.popleft()[1]

    def rate(self, now: float | None = None) -> float:
        """Bytes per second pushed over the last ``window`` seconds."""
        now = time.monotonic() if now is None else now
        with self._lock:
            self._trim(now)
            return self._recent_bytes / self.window
