"""The clock service: the only owner of time, a service of the scheduler plugin.

It keeps one :class:`~daskangel.scheduler._clock_rule.ClockTable` per training
job and answers, through comm handlers with plain values only, whether a task
may proceed.  Waiting never blocks the scheduler's event loop: a waiting task's
request is an ``await`` on an :class:`asyncio.Event` set when the slowest clock
(or the task's group) advances.  The task side secedes from its worker's
thread pool while it waits (see ``daskangel.train``).

The table is authoritative: a task (re)starting asks for its clock with
``daskangel_task_start`` and resumes from it, so a lost task can be resubmitted
under the same task id.

Example
-------
From a task (through ``TaskContext``)::

    r = await scheduler.daskangel_clock_tick(job="j", task=3, clock=7)
    if not r["ready"]:
        await scheduler.daskangel_clock_wait(job="j", task=3)
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .. import config
from ..errors import SyncError
from ._clock_rule import ClockTable
from ._job import Job, reports_abort

if TYPE_CHECKING:
    from distributed.scheduler import Scheduler

__all__ = ["ClockService", "Job", "reports_abort"]

logger = logging.getLogger(__name__)


class ClockService:
    """Clock tables of training jobs, with waiting done by events on the event loop."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        # {job_id: Job}, oldest first (finished jobs are kept for status)
        self.jobs: OrderedDict[str, Job] = OrderedDict()
        # callbacks run with a job id when that job stops or a rollback stops its
        # tasks (other services hook in: the group service wakes its waiters)
        self.stop_listeners: list[Callable[[str], None]] = []
        # the snapshot service, told of every tick (clock-driven consistent snapshots)
        self.snapshots: Any = None
        # callbacks run with (job, task, clock, stats) when a task's counters arrive
        self.stats_listeners: list[Callable[[str, int, int, dict[str, Any]], None]] = []
        scheduler.handlers.update(
            {
                "daskangel_job_register": self.register,
                "daskangel_task_start": self.task_start,
                "daskangel_clock_tick": self.tick,
                "daskangel_clock_wait": self.wait,
                "daskangel_task_done": self.task_done,
                "daskangel_job_fail": self.fail,
                "daskangel_job_abort": self.abort,
                "daskangel_job_close": self.close,
                "daskangel_clock_table": self.table,
                "daskangel_jobs": self.list_jobs,
                "daskangel_task_resubmitted": self.task_resubmitted,
                "daskangel_task_move": self.move,
            }
        )

    def job(self, job: str) -> Job:
        try:
            return self.jobs[job]
        except KeyError:
            raise SyncError(f"job: no training job {job!r} is registered") from None

    # -- lifecycle ------------------------------------------------------------------

    def register(
        self,
        job: str,
        n_tasks: int,
        groups: list[int],
        staleness: int | None,
        array_staleness: dict[str, int | None] | None = None,
        ctx: str | None = None,
        epochs: int | None = None,
        clocks: list[int] | None = None,
    ) -> dict[str, Any]:
        """Create a job's clock table; registering an existing job returns its clocks.

        ``clocks``: every task's starting clock (a job resumed from a snapshot).
        """
        old = self.jobs.get(job)
        if old is not None:
            if old.table.n != n_tasks:
                raise SyncError(
                    f"job: {job!r} is registered with {old.table.n} tasks, not {n_tasks}"
                )
            return {"clocks": list(old.table.clocks), "status": old.status}
        if staleness is not None and staleness < 0:
            raise SyncError(f"staleness: expected >= 0 or None, got {staleness}")
        self.jobs[job] = Job(
            job,
            n_tasks,
            list(groups),
            staleness,
            dict(array_staleness or {}),
            ctx,
            epochs,
            self.stop_listeners,
            None if clocks is None else [int(c) for c in clocks],
        )
        self._forget_old()
        return {"clocks": list(self.jobs[job].table.clocks), "status": "running"}

    def _tell(self, job: str, task: int, clock: int, stats: dict[str, Any]) -> None:
        for cb in self.stats_listeners:
            try:
                cb(job, task, clock, stats)
            except Exception:  # observers must not stop a clock
                logger.exception("daskangel: stats listener %r failed", cb)

    def _forget_old(self) -> None:
        keep = int(config.get("daskangel.clock.keep-jobs"))
        finished = [j for j, s in self.jobs.items() if s.status != "running"]
        for j in finished[: max(0, len(finished) - keep)]:
            del self.jobs[j]

    @reports_abort
    def task_start(self, job: str, task: int, worker: str | None = None) -> dict[str, Any]:
        """A task (re)starts: record where it runs; return its clock to resume from."""
        s = self.job(job)
        s.table.check_task(task)
        s.check_alive()
        info = s.info[task]
        info.update(worker=worker, status="running", last=time.time())
        s.note_start(task)
        return {"clock": s.table.clocks[task], "min": s.table.min_clock, "epoch": s.epoch}

    def task_done(
        self, job: str, task: int, stats: dict[str, Any] | None = None, epoch: int | None = None
    ) -> None:
        s = self.job(job)
        if epoch is not None and int(epoch) < s.epoch:
            return  # a task of a run the job rolled back from: its end changes nothing
        s.table.finish(task)
        s.moving.pop(task, None)
        info = s.info[task]
        info.update(status="done", last=time.time())
        if stats:
            info["stats"] = stats
            self._tell(job, task, s.table.clocks[task], stats)
        s.wake()
        if s.status == "running" and len(s.table.done) == s.table.n:
            s.stop("done")

    def fail(
        self, job: str, task: int | None, error: str, traceback: str = "", epoch: int | None = None
    ) -> bool:
        """A task failed: stop the job and wake every waiter.  True for the first error.

        During a rollback, failures of tasks being stopped are expected and ignored, and
        so are those of tasks of a run the job rolled back from (``epoch`` older).
        """
        s = self.job(job)
        if s.status == "rollback" or (epoch is not None and int(epoch) < s.epoch):
            return False
        if task is not None:
            s.info[task]["status"] = "failed"
        if s.status in ("failed", "aborted"):
            return False
        s.error = {"task": task, "error": error, "traceback": traceback, "time": time.time()}
        s.stop("failed")
        return True

    def abort(self, job: str, reason: str = "cancelled") -> None:
        s = self.job(job)
        if s.status == "running":
            s.error = {"error": reason}
            s.stop("aborted")

    def close(self, job: str) -> None:
        s = self.jobs.get(job)
        if s is not None and s.status == "running":
            s.stop("done")
        self._forget_old()

    # -- clocks ---------------------------------------------------------------------

    @reports_abort
    async def tick(
        self,
        job: str,
        task: int,
        clock: int,
        stats: dict[str, Any] | None = None,
        epoch: int | None = None,
    ) -> dict[str, Any]:
        """Task ``task`` completed ``clock``; say whether it may run at the next one.

        At a snapshot boundary the snapshot service starts its cut before this
        answers, so the task's writes of the new clock are after the cut.  A task of
        a run the job rolled back from (``epoch`` older) is told to stop instead.
        """
        s = self.job(job)
        s.check_run(epoch)
        s.check_alive()
        new = s.table.tick(task, clock)
        s.note_tick(task)
        info = s.info[task]
        info["last"] = time.time()
        if stats:
            info["stats"] = stats
            self._tell(job, task, clock, stats)
        s.wake()
        if self.snapshots is not None:
            await self.snapshots.on_tick(s, new)
        why = s.moving.pop(task, None)
        if why is not None:  # its writes of clocks < new are in: it restarts elsewhere
            s.moved(task)
            return {"clock": new, "min": s.table.min_clock, "ready": False, "moved": why}
        ready = s.table.ready(task, s.staleness)
        if ready:
            s.table.note_release(new)
        return {"clock": new, "min": s.table.min_clock, "ready": ready}

    @reports_abort
    async def wait(
        self, job: str, task: int, floor: int | None = None, epoch: int | None = None
    ) -> dict[str, Any]:
        """Wait until ``task`` may run at its clock, or until the slowest reaches ``floor``.

        Without ``floor`` this is the job's rule (protocol across groups, lockstep
        within the task's group); with ``floor`` it waits for a read under a
        per-array protocol.  A task of a run the job rolled back from is told to stop.
        """
        s = self.job(job)
        s.check_run(epoch)
        s.check_alive()
        s.table.check_task(task)
        start = time.perf_counter()
        timeout = config.get_seconds("daskangel.clock.wait-timeout")
        try:
            await asyncio.wait_for(self._wait(s, task, floor, epoch), timeout)
        except TimeoutError:
            t = s.table
            slow = sorted((c, i) for i, c in enumerate(t.clocks) if i not in t.done)[:5]
            raise SyncError(
                f"job {job!r}: task {task} waited {timeout:.0f}s (daskangel.clock.wait-timeout) "
                f"for slower tasks; slowest (clock, task): {slow}"
            ) from None
        waited = time.perf_counter() - start
        info = s.info[task]
        info["waited"] += waited
        info["waits"] += 1
        return {"min": s.table.min_clock, "waited": waited}

    async def _wait(self, s: Job, task: int, floor: int | None, epoch: int | None) -> None:
        # The job is checked right before every wait, in the same step of the event
        # loop as the event is made: ``asyncio.wait_for`` runs this as a task of its own
        # (Python 3.11), so a stop (a failure, an abort, a rollback) could come between
        # the handler's own checks and this task's first step; it set the events that
        # existed, not the one made here after, and the task waited for ever
        # (``wait-timeout``, 1 h) until the driver cancelled it at ``stop-timeout``.
        t = s.table
        if floor is not None:
            while True:
                s.check_run(epoch)
                s.check_alive()
                if t.floor_met(floor):
                    return
                await self._event(s.floor_events, floor).wait()
        clock = t.clocks[task]
        g = t.group_of[task]
        while True:
            s.check_run(epoch)
            s.check_alive()
            if t.ready(task, s.staleness):
                break
            gm = t.group_min(g)
            if gm is not None and gm < clock:
                await self._event(s.group_events, (g, clock)).wait()
            else:
                assert s.staleness is not None
                await self._event(s.floor_events, clock - s.staleness).wait()
        t.note_release(clock)

    @staticmethod
    def _event(events: dict[Any, asyncio.Event], key: Any) -> asyncio.Event:
        ev = events.get(key)
        if ev is None:
            ev = events[key] = asyncio.Event()
        return ev

    # -- failures -----------------------------------------------------------------------

    def remove_worker(self, worker: str) -> None:
        """Tasks that ran on a removed worker are lost: the driver resubmits them.

        Under ``recovery="rollback"`` with a snapshot of the job to return to, the
        job rolls back instead (a resubmitted task would redo its clock, pushing
        again what it had pushed of it), also when the worker held no PS block
        (a training worker retired while its blocks were handed off).
        """
        for s in self.jobs.values():
            if s.status not in ("running", "rollback"):
                continue
            lost = False
            for t, info in enumerate(s.info):
                if info["worker"] == worker and t not in s.table.done:
                    info["status"] = "lost"
                    lost = True
            if (
                lost
                and s.status == "running"
                and self.snapshots is not None
                and self.snapshots.can_roll_back(s.ctx, s.id)
            ):
                self.request_rollback(s.id, f"worker {worker} running tasks of the job left")
                self.snapshots.cuts.pop(s.ctx, None)  # as for lost blocks: no cut meanwhile

    def task_resubmitted(self, job: str, task: int) -> None:
        """The driver resubmitted a lost task (it resumes from its clock here)."""
        s = self.job(job)
        s.table.check_task(task)
        s.info[task].update(status="restarting", worker=None)

    def move(self, job: str, task: int, reason: str) -> bool:
        """The driver asks to move a running ``task`` (``daskangel.train.reschedule-slow``):
        its next tick answers ``"moved"`` and it ends there, its writes of the clocks
        before in; the driver restarts it on another worker at that clock.  False
        (nothing asked) when the task or the job is not running."""
        s = self.job(job)
        s.table.check_task(task)
        if s.status != "running" or task in s.table.done or s.info[task]["status"] != "running":
            return False
        s.moving[task] = str(reason)
        return True

    def running_jobs(self, ctx: str) -> list[Job]:
        return [s for s in self.jobs.values() if s.ctx == ctx and s.status == "running"]

    def request_rollback(self, job: str, reason: str) -> None:
        """Stop every task of ``job`` at its next clock / wait; the driver restarts them."""
        s = self.job(job)
        if s.status != "running":
            return
        s.status = "rollback"
        s.error = {"error": reason}
        for ev in [*s.floor_events.values(), *s.group_events.values()]:
            ev.set()
        s.floor_events.clear()
        s.group_events.clear()
        # tasks waiting at a group barrier or for a command end too (the group
        # service forgets the job's rounds): before, they waited for members that
        # were gone until the driver gave up on them (daskangel.train.stop-timeout),
        # and their arrivals were left to count in the restarted run's barriers
        for cb in self.stop_listeners:
            cb(job)

    def rewind(self, job: str, clock: int, epoch: int | None = None) -> None:
        """Every task of ``job`` restarts at ``clock`` (after a rollback restore), in
        the run ``epoch`` (the one the servers were fenced at)."""
        s = self.job(job)
        if epoch is not None:
            s.epoch = int(epoch)
        s.table = ClockTable(s.table.n, list(s.table.group_of), [clock] * s.table.n)
        s.status = "running"
        s.error = None
        s.moving.clear()
        for info in s.info:
            info.update(status="restarting", worker=None)

    # -- inspection -------------------------------------------------------------------

    def table(self, job: str) -> dict[str, Any]:
        """The job's clock table and per-task counters, as plain values."""
        return self.job(job).summary()

    def list_jobs(self, ctx: str | None = None) -> list[dict[str, Any]]:
        return [s.summary() for s in self.jobs.values() if ctx is None or s.ctx == ctx]
