"""The timing helper every benchmark script shares (imported as ``from _timing import ...``:
the scripts run as ``python benchmarks/<script>.py``, so this folder is on ``sys.path``)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

__all__ = ["median_time"]


def median_time(fn: Callable[[], Any], repeat: int, warmup: int = 0) -> float:
    """Median wall seconds of ``repeat`` calls of ``fn`` after ``warmup`` untimed calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)
