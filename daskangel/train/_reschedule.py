"""Moving persistently slow tasks to other workers: ``daskangel.train.reschedule-slow``.

The clock service flags a task *slow* when its median busy time per clock
(waits for slower tasks not counted) over its last ``daskangel.clock.slow-window``
clocks passes ``daskangel.clock.slow-factor`` times the other tasks'
(``ps.status()``'s ``slow`` column).  With ``daskangel.train.reschedule-slow``
set, the driver then moves such a task, as Angel's master restarts a slow task
elsewhere:

1. it asks the clock service (``daskangel_task_move``); the task's next tick,
   after its clock's writes are pushed, answers ``"moved"`` and the task ends
   (``TaskMovedError``, status ``"moved"``) with every write of the clocks
   before its new clock applied once;
2. the driver resubmits it (same task id) on the training worker running the
   fewest tasks of the job, never one a task was moved off; it starts at the
   clock the scheduler holds for it, its partition fetched by Dask.

One move is in flight per job at a time, and a moved task's busy times start
afresh, so it is moved again only if it is still slow over a whole window
where it runs now.  Only jobs of single-task groups move tasks (a group's
members exchange commands in lockstep).

.. warning::
   A moved task restarts ``fn``: what it keeps outside the parameter server
   (local state not derived from its clock) starts afresh, as for a task
   resubmitted after a lost worker.  ``fn`` must let
   :class:`~daskangel.errors.TaskMovedError` pass out of ``ctx.clock()``.

Example
-------
>>> with dask.config.set({"daskangel.train.reschedule-slow": True}):  # doctest: +SKIP
...     res = angel.train(ps, step, parts, sync=angel.BSP(), epochs=50)
>>> res.moves  # doctest: +SKIP
1
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Protocol

from distributed import Future

from .. import config
from .._compat import training_workers

__all__ = ["Rescheduler"]


class _Job(Protocol):
    """What moving needs of the running :class:`~daskangel.train.Trainer`."""

    job: str
    client: Any
    group_size: int
    recovery: Any
    _scheduler: Any


class Rescheduler:
    """The driver's side of ``reschedule-slow``: asks for moves, restarts moved tasks."""

    def __init__(self, trainer: _Job) -> None:
        self.trainer = trainer
        self.enabled = bool(config.get("daskangel.train.reschedule-slow"))
        self.asked: dict[int, str] = {}  # {task: target worker} moves asked for
        self.left: set[str] = set()  # workers a task was moved off
        self.moves = 0
        self.history: dict[int, list[dict[str, Any]]] = {}  # rows of moved attempts

    def check(self, table: dict[str, Any]) -> None:
        """Ask for the move of a slow task (one at a time), if any and a target exists."""
        if not self.enabled or self.trainer.group_size != 1 or table["status"] != "running":
            return
        tasks = table["tasks"]
        self.asked = {
            t: w for t, w in self.asked.items() if tasks[t].get("status") in ("running", "moving")
        }
        if self.asked:
            return
        slowdown = table.get("slowdown") or []
        for t, slow in enumerate(table.get("slow") or []):
            info = tasks[t]
            if not slow or info.get("status") != "running" or not info.get("worker"):
                continue
            target = self._target(tasks, t)
            if target is None:
                continue
            tr = self.trainer
            reason = (
                f"{slowdown[t]:.1f}x slower than the other tasks on {info['worker']} "
                f"(daskangel.train.reschedule-slow)"
            )
            if tr.client.sync(tr._scheduler.daskangel_task_move, job=tr.job, task=t, reason=reason):
                self.asked[t] = target
                self.left.add(str(info["worker"]))
            return

    def _target(self, tasks: list[dict[str, Any]], t: int) -> str | None:
        """The training worker with the fewest running tasks of the job, other than
        the task's and any a task was moved off."""
        here = tasks[t]["worker"]
        load = Counter(i["worker"] for i in tasks if i.get("status") == "running")
        live = sorted(training_workers(self.trainer.client))
        free = [w for w in live if w != here and w not in self.left]
        return min(free, key=lambda w: (load[w], w)) if free else None

    def restart(self, out: dict[str, Any]) -> Future:
        """A task ended at a clock to move: keep its history, resubmit it."""
        t = int(out["task"])
        self.history.setdefault(t, []).extend(out.get("history") or [])
        self.moves += 1
        return self.trainer.recovery.move(t, self.asked.pop(t, None))

    def with_history(self, outs: dict[int, dict[str, Any]]) -> dict[int, dict[str, Any]]:
        """The final outcomes with each moved task's earlier rows first."""
        return {
            t: {**o, "history": self.history.get(t, []) + list(o["history"])}
            for t, o in outs.items()
        }

    def forget(self) -> None:
        """A rollback restarts every task: moves asked and rows of attempts are void."""
        self.asked.clear()
        self.history.clear()
