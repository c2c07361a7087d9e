"""Slow tasks: which training tasks are persistently slower than the others.

The clock service records each task's *busy* time per clock: the time between
two of its ticks minus what it spent waiting in between for slower tasks (so a
fast task held back by BSP does not look slow).  Over a task's last
``daskangel.clock.slow-window`` clocks its median busy time, divided by the
(lower) median of the other tasks' medians, is its *slowdown*; a slowdown above
``daskangel.clock.slow-factor`` flags the task as slow (``ps.status()``'s
``slow`` column, the dashboard's task table).  A task with fewer clocks than
the window, or a job with one task, has no slowdown yet (``nan``).

Both medians count as at least ``daskangel.clock.slow-min-seconds``: a task that
does almost nothing between clocks is busy for a few milliseconds of clock round
trip, and the ratio of two such figures is noise (3 ms against 1 ms is not a slow
task).  Below that floor every task reads 1.0; above it the ratio is exact.

Pure functions, no Dask.

Example
-------
>>> busy = [[1.0, 1.1, 0.9], [1.0, 1.0, 1.2], [3.1, 2.9, 3.0]]
>>> [round(x, 2) for x in slowdowns(busy, window=3)]
[1.0, 1.0, 3.0]
>>> slow_flags(slowdowns(busy, window=3), factor=2.0)
[False, False, True]
>>> idle = [[0.002] * 3, [0.001] * 3, [0.006] * 3]  # clock round trips only
>>> slowdowns(idle, window=3, min_seconds=0.05)
[1.0, 1.0, 1.0]
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import median, median_low

__all__ = ["record_busy", "slow_flags", "slowdowns"]


def record_busy(busy: list[float], seconds: float, window: int) -> None:
    """Append one clock's busy seconds to ``busy``, keeping the last ``window``."""
    busy.append(max(0.0, float(seconds)))
    del busy[: max(0, len(busy) - window)]


def slowdowns(
    busy: Sequence[Sequence[float]], window: int, min_seconds: float = 0.0
) -> list[float]:
    """Per task: its median busy time over its last ``window`` clocks divided by
    the lower median of the other tasks' (``nan`` until it and another have
    ``window``): the lower one, so that one slow task among two or four does not
    raise the yardstick of the others.  Each median counts as at least
    ``min_seconds`` (shorter clocks are not timed finely enough to compare)."""
    floor = max(0.0, float(min_seconds))
    meds = [max(median(b[-window:]), floor) if len(b) >= window > 0 else None for b in busy]
    out = []
    for i, m in enumerate(meds):
        others = [x for j, x in enumerate(meds) if j != i and x is not None]
        if m is None or not others:
            out.append(math.nan)
            continue
        ref = median_low(others)
        out.append(m / ref if ref > 0 else (math.inf if m > 0 else 1.0))
    return out


def slow_flags(slowdown: Sequence[float], factor: float) -> list[bool]:
    """Which tasks are slower than ``factor`` times the others (``nan`` is not)."""
    return [bool(x > factor) for x in slowdown]
