"""Process memory readings every benchmark script shares (imported as ``from _common
import ...``: the scripts run as ``python benchmarks/<script>.py``, so this folder is on
``sys.path``).  The functions run on workers too (``client.run(peak_rss_gib)``): they
are pickled by value, so a worker needs no copy of this folder."""

from __future__ import annotations

import math
import resource
import sys

import cloudpickle

__all__ = ["peak_rss_gib", "rss_now_gib"]

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _status_gib(field: str) -> float | None:
    """``field`` of ``/proc/self/status`` (a ``kB`` figure) in GiB, None if unreadable."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field):
                    return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return None


def peak_rss_gib() -> float:
    """This process's peak RSS (``VmHWM``: unlike ``ru_maxrss`` it is not inherited
    by a worker forked from a parent that had already grown)."""
    got = _status_gib("VmHWM:")
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20 if got is None else got


def rss_now_gib() -> float:
    """This process's resident memory now (``VmRSS``; NaN where unreadable)."""
    got = _status_gib("VmRSS:")
    return math.nan if got is None else got
