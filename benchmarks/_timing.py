"""The timing helpers every benchmark script shares (imported as ``from _timing import ...``:
the scripts run as ``python benchmarks/<script>.py``, so this folder is on ``sys.path``)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

__all__ = ["median_time", "paired_median_times", "print_table"]


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


def paired_median_times(
    fns: dict[str, Callable[[], Any]], repeat: int, warmup: int = 0
) -> dict[str, float]:
    """Median wall seconds of each function, the calls taken in turns.

    Round ``i`` calls every function once (in a rotating order), so a change in the
    machine's load during the measurement (the cores are shared) weighs on all of
    them alike and their ratio stays fair.  ``{name: seconds}``.
    """
    names = list(fns)
    for _ in range(warmup):
        for name in names:
            fns[name]()
    times: dict[str, list[float]] = {name: [] for name in names}
    for i in range(repeat):
        for k in range(len(names)):
            name = names[(i + k) % len(names)]
            t = time.perf_counter()
            fns[name]()
            times[name].append(time.perf_counter() - t)
    return {name: statistics.median(ts) for name, ts in times.items()}


def print_table(head: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    """Print ``rows`` under ``head`` as a text table, each column as wide as its widest cell."""
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]
    print(" | ".join(str(h).ljust(w) for h, w in zip(head, widths, strict=True)))
    print("-|-".join("-" * w for w in widths))
    for r in rows:
        print(" | ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)))
