"""The clock of the training task running in this thread, for write tags.

A training task's writes are tagged with its clock so that snapshots cut exactly
at a clock (``PSServer.write_block``).  Writes made through the task context's
update buffer pass their clock explicitly; this thread-local covers the others a
task makes directly (``PSArray.increment``, ``set``, ``fill``, psf updates such
as a server-side optimiser step).  Outside a training task it is ``None``.

Example
-------
>>> set_task_clock(3); current_clock()
3
>>> set_task_clock(None); current_clock() is None
True
"""

from __future__ import annotations

import threading

__all__ = ["current_clock", "set_task_clock"]

_local = threading.local()


def set_task_clock(clock: int | None) -> None:
    _local.clock = clock


def current_clock() -> int | None:
    return getattr(_local, "clock", None)
