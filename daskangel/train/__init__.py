"""Training runtime: one Dask future per task, in groups, with clocks kept by the scheduler.

``train(ps, fn, data, groups=, group_size=, sync=)`` runs ``fn(ctx, partition)``
per task; ``ctx`` (:class:`TaskContext`) gives the task's arrays, clock, epochs,
group and the leader's scheduling channel.  ``BSP``, ``SSP`` and ``ASP`` choose
how far tasks may drift apart.

Example
-------
>>> import daskangel as angel
>>> angel.SSP(staleness=2)
SSP(staleness=2)
"""

from __future__ import annotations

from ..scheduler._clock_rule import ASP, BSP, SSP, Sync
from ._context import TaskArray, TaskContext, seceded
from ._placement import PLACEMENTS, split_piece
from ._runner import run_task
from ._spec import TaskSpec
from ._trainer import Trainer, TrainResult, train

__all__ = [
    "ASP",
    "BSP",
    "PLACEMENTS",
    "SSP",
    "Sync",
    "TaskArray",
    "TaskContext",
    "TaskSpec",
    "TrainResult",
    "Trainer",
    "run_task",
    "seceded",
    "split_piece",
    "train",
]
