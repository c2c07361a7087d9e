"""One training job as the clock service holds it: its clock table, tasks and waiters.

A :class:`Job` is the scheduler-side state of a job registered by ``train()``:
the :class:`~daskangel.scheduler._clock_rule.ClockTable`, the protocol
(staleness, per-array overrides), per-task information (worker, time waited,
counters, busy time per clock for slow-task detection, status) and the events
waiting tasks sleep on.  :func:`reports_abort` turns a stopped job into an
answer (``{"aborted": message}``) instead of a scheduler error.

Example
-------
>>> j = Job("j", 2, [0, 1], 0, {}, None, 3)
>>> j.table.tick(0, 0), j.summary()["clocks"]
(1, [1, 0])
>>> j.state()["n_tasks"], j.status
(2, 'running')
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import itertools
import time
from collections.abc import Callable
from typing import Any, TypeVar

from .. import config
from ..errors import JobAbortedError
from ._clock_rule import ClockTable
from ._slow import record_busy, slow_flags, slowdowns

__all__ = ["Job", "reports_abort"]

F = TypeVar("F", bound=Callable[..., Any])


def reports_abort(fn: F) -> F:
    """Make a handler answer ``{"aborted": message}`` when its job was stopped.

    A stopped job is a normal outcome for the tasks still running, not a
    scheduler error: answering (instead of raising) keeps it out of the
    scheduler's error log.  The task side raises ``JobAbortedError`` from it.
    """
    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                return await fn(*args, **kwargs)
            except JobAbortedError as e:
                return {"aborted": str(e)}

        return async_wrapper  # type: ignore[return-value]

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except JobAbortedError as e:
            return {"aborted": str(e)}

    return wrapper  # type: ignore[return-value]


# run numbers, increasing over every job of this scheduler: a job's tasks run under
# one until a rollback starts them again under the next (``Job.epoch``)
_RUNS = itertools.count(1)


def next_run() -> int:
    """A run number above every one handed out before (``Job.epoch``)."""
    return next(_RUNS)


class Job:
    """Scheduler-side state of one training job."""

    def __init__(
        self,
        job: str,
        n_tasks: int,
        groups: list[int],
        staleness: int | None,
        array_staleness: dict[str, int | None],
        ctx: str | None,
        epochs: int | None,
        on_stop: list[Callable[[str], None]] | None = None,
        start: list[int] | None = None,
    ) -> None:
        self.id = job
        self.table = ClockTable(n_tasks, groups, start)
        self.staleness = staleness
        # {array_name: staleness or None}: per-array overrides of the job's protocol
        self.array_staleness = array_staleness
        self.ctx = ctx
        self.epochs = epochs
        self.status = "running"  # running | failed | aborted | done
        # the run its tasks belong to; a rollback moves to a new one and fences the
        # writes of the old (``SnapshotService.rollback``, ``PSServer.check_fence``)
        self.epoch = next_run()
        self.error: dict[str, Any] | None = None
        self.started = time.time()
        self.finished: float | None = None
        # [{"worker", "waited", "waits", "stats", "last", "status", "busy"}] per task;
        # busy: seconds per clock not spent waiting, the last slow-window clocks
        self.info: list[dict[str, Any]] = [
            {
                "worker": None,
                "waited": 0.0,
                "waits": 0,
                "stats": {},
                "last": None,
                "status": "new",
                "busy": [],
                "moves": 0,
            }
            for _ in range(n_tasks)
        ]
        # {task: reason} tasks the driver asked to move (reschedule-slow): their
        # next tick answers "moved" and they end, to restart on another worker
        self.moving: dict[int, str] = {}
        # per task: (perf_counter at its last tick or start, its waited then)
        self._mark: list[tuple[float, float] | None] = [None] * n_tasks
        # {min clock needed: event set once the slowest task reaches it}
        self.floor_events: dict[int, asyncio.Event] = {}
        # {(group, clock): event set once every member of the group reaches clock}
        self.group_events: dict[tuple[int, int], asyncio.Event] = {}
        # callbacks run with the job id when the job stops (wake group waiters, ...)
        self.on_stop: list[Callable[[str], None]] = on_stop if on_stop is not None else []

    def check_run(self, epoch: int | None) -> None:
        """Refuse a call from a task of a run a rollback abandoned (``epoch``: the run
        it started in; ``None``: a caller that does not say)."""
        if epoch is not None and int(epoch) < self.epoch:
            raise JobAbortedError(
                f"job {self.id!r}: run {epoch} was abandoned by a rollback (the job runs as "
                f"run {self.epoch} since); its tasks end"
            )

    def check_alive(self) -> None:
        if self.status == "rollback":
            raise JobAbortedError(
                f"job {self.id!r} is rolling back to its last snapshot after a lost worker; "
                "every task restarts from there"
            )
        if self.status in ("failed", "aborted"):
            why = self.error or {}
            who = (
                f"task {why['task']} failed: {why['error']}" if "task" in why else why.get("error")
            )
            raise JobAbortedError(f"job {self.id!r} was stopped ({who})")

    def wake(self) -> None:
        """Set the events of every waiter whose condition now holds."""
        t = self.table
        m = t.min_clock
        for f in [f for f in self.floor_events if m is None or f <= m]:
            self.floor_events.pop(f).set()
        for g, c in list(self.group_events):
            gm = t.group_min(g)
            if gm is None or gm >= c:
                self.group_events.pop((g, c)).set()

    def stop(self, status: str) -> None:
        self.status = status
        self.finished = time.time()
        for ev in [*self.floor_events.values(), *self.group_events.values()]:
            ev.set()
        self.floor_events.clear()
        self.group_events.clear()
        for cb in self.on_stop:
            cb(self.id)

    def note_tick(self, task: int) -> None:
        """Record the busy time of the clock ``task`` just finished."""
        now = time.perf_counter()
        info = self.info[task]
        mark = self._mark[task]
        if mark is not None:
            window = int(config.get("daskangel.clock.slow-window"))
            record_busy(info["busy"], now - mark[0] - (info["waited"] - mark[1]), window)
        self._mark[task] = (now, info["waited"])

    def moved(self, task: int) -> None:
        """``task`` ended at a clock boundary to restart elsewhere: its busy times
        (of the worker it leaves) are forgotten."""
        self.info[task].update(status="moving", worker=None, busy=[])
        self.info[task]["moves"] += 1
        self._mark[task] = None

    def note_start(self, task: int) -> None:
        self._mark[task] = (time.perf_counter(), self.info[task]["waited"])

    def state(self) -> dict[str, Any]:
        """What a snapshot records of the job so that it can be resumed
        (``train(..., resume=url)``): its shape and protocol, not its clocks
        (the snapshot's own clock is where every task resumes)."""
        return {
            "job": self.id,
            "n_tasks": self.table.n,
            "groups": list(self.table.group_of),
            "staleness": self.staleness,
            "array_staleness": dict(self.array_staleness),
            "epochs": self.epochs,
        }

    def summary(self) -> dict[str, Any]:
        t = self.table
        window = int(config.get("daskangel.clock.slow-window"))
        slowdown = slowdowns(
            [i["busy"] for i in self.info],
            window,
            float(config.get("daskangel.clock.slow-min-seconds")),
        )
        return {
            "job": self.id,
            "ctx": self.ctx,
            "status": self.status,
            "staleness": self.staleness,
            "array_staleness": dict(self.array_staleness),
            "n_tasks": t.n,
            "groups": list(t.group_of),
            "clocks": list(t.clocks),
            "done": sorted(t.done),
            "min": t.min_clock,
            "max_lead": t.max_lead,
            "epochs": self.epochs,
            "error": self.error,
            "started": self.started,
            "finished": self.finished,
            "tasks": [dict(i) for i in self.info],
            "slowdown": slowdown,
            "slow": slow_flags(slowdown, float(config.get("daskangel.clock.slow-factor"))),
        }
