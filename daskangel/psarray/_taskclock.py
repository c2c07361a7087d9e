"""The clock and run of the training task running in this thread, for write tags.

A training task's writes are tagged with its clock so that snapshots cut exactly
at a clock (``PSServer.write_block``).  Writes made through the task context's
update buffer pass their clock explicitly; this thread-local covers the others a
task makes directly (``PSArray.increment``, ``set``, ``fill``, psf updates such
as a server-side optimiser step).  Outside a training task it is ``None``.

The run (``[job, epoch]``, the job's rollbacks when the task started) fences the
writes of a run a rollback abandoned: servers refuse them once the rollback has
begun (``PSServer.check_fence``).

Example
-------
>>> set_task_clock(3); current_clock()
3
>>> set_task_clock(None); current_clock() is None
True
>>> set_task_fence("job-1", 2); current_fence()
['job-1', 2]
>>> set_task_fence(None)
"""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["current_clock", "current_fence", "set_task_clock", "set_task_fence"]

_local = threading.local()


def set_task_clock(clock: int | None) -> None:
    _local.clock = clock


def current_clock() -> int | None:
    return getattr(_local, "clock", None)


def set_task_fence(job: str | None, epoch: int | None = None) -> None:
    _local.fence = None if job is None or epoch is None else [job, int(epoch)]


def current_fence() -> list[Any] | None:
    return getattr(_local, "fence", None)
