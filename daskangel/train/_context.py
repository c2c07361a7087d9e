"""The task context: what a training function sees (``fn(ctx, partition)``).

``ctx`` ties one task to its job: its clock (kept authoritatively by the
scheduler plugin), its arrays (read and written through the worker's shared
agent: ``ctx.array(name)`` is a :class:`~._taskarray.TaskArray`), its group,
and its history.  Every wait (for slower tasks at
``clock()``, before a read under a stricter per-array protocol, at a group
barrier, for the leader's command) is an ``await`` on the scheduler, during which
the task secedes from its worker's thread pool and rejoins afterwards, so a
waiting task never holds a worker thread idle.

Example
-------
>>> def step(ctx, part):                                            # doctest: +SKIP
...     w = ctx.array("w")  # doctest: +SKIP
...     for epoch in ctx.epochs(10):  # doctest: +SKIP
...         grad = compute(w.get(cols=part.keys), part)  # doctest: +SKIP
...         w.increment(-0.1 * grad, cols=part.keys)  # doctest: +SKIP
...         ctx.report(loss=float(loss))  # doctest: +SKIP
...         ctx.clock()  # doctest: +SKIP
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import time
from collections.abc import Iterator
from typing import Any

from distributed.comm.core import CommClosedError
from distributed.threadpoolexecutor import thread_state as _tpe_state
from distributed.utils import sync
from distributed.utils import thread_state as _task_state

from .. import config
from ..errors import (
    DaskAngelError,
    InvalidArgumentError,
    InvalidTypeError,
    JobAbortedError,
    SyncError,
    TaskMovedError,
)
from ..psarray import PSAgent
from ..psarray._binding import Binding
from ..psarray._taskclock import set_task_clock, set_task_fence
from ..scheduler._clock_rule import read_floor
from ._group import GroupChannel
from ._spec import TaskSpec
from ._taskarray import TaskArray

__all__ = ["TaskArray", "TaskContext", "TaskSpec", "seceded"]


@contextlib.contextmanager
def seceded() -> Iterator[None]:
    """Leave the worker's thread pool while blocked; rejoin afterwards.

    Outside a Dask task thread (a thread the user started) nothing is done.
    """
    in_pool = getattr(_tpe_state, "proceed", False) and getattr(_task_state, "key", None)
    if not in_pool:
        yield
        return
    from distributed import rejoin, secede

    secede()
    try:
        yield
    finally:
        rejoin()


class TaskContext(GroupChannel):
    """The view one training task has of its job (see the module docstring)."""

    def __init__(self, spec: TaskSpec, binding: Binding, agent: PSAgent) -> None:
        self.spec = spec
        self._binding = binding
        self._agent = agent
        self._key = (spec.job, spec.task)
        worker = binding.local_worker
        self.worker = worker.address if worker is not None else None
        r = self._call("daskangel_task_start", job=spec.job, task=spec.task, worker=self.worker)
        self._clock = int(r["clock"])
        self._start_clock = self._clock
        # the job's run this task belongs to (rollbacks so far): its writes carry it,
        # and once a rollback abandons the run the servers refuse them
        self.epoch = int(r.get("epoch", 0))
        set_task_clock(self._clock)
        set_task_fence(spec.job, self.epoch)
        agent.observe_min(spec.job, r["min"])
        self._t0 = time.time()
        self._waited = 0.0
        self._metrics: dict[str, Any] = {}
        self._last_metrics: dict[str, float] = {}  # newest numeric reports, ride on ticks
        # [{"task", "group", "clock", "time", "waited", **metrics}] one per clock()
        self.history: list[dict[str, Any]] = []
        GroupChannel.__init__(self)

    # -- identity ---------------------------------------------------------------------

    @property
    def job(self) -> str:
        return self.spec.job

    @property
    def task_id(self) -> int:
        """Stable id of this task in its job (``group * group_size + rank``)."""
        return self.spec.task

    @property
    def group(self) -> int:
        return self.spec.group

    @property
    def rank_in_group(self) -> int:
        return self.spec.rank

    @property
    def group_size(self) -> int:
        return self.spec.group_size

    @property
    def n_groups(self) -> int:
        return self.spec.n_groups

    @property
    def n_tasks(self) -> int:
        return self.spec.n_tasks

    @property
    def is_leader(self) -> bool:
        """True for rank 0 of the group, which schedules its members."""
        return self.spec.rank == 0

    @property
    def iteration(self) -> int:
        """This task's clock: the number of ``clock()`` calls completed."""
        return self._clock

    @property
    def slowest_clock(self) -> int | None:
        """The slowest running task's clock, as last learnt from the scheduler.

        It only grows; ``iteration - slowest_clock`` is how far ahead this task
        runs (at most the staleness).  ``None`` before anything was learnt.
        """
        m = self._agent.known_min.get(self.job)
        return None if m is None or m >= 2**62 else m

    def __repr__(self) -> str:
        s = self.spec
        return (
            f"TaskContext<job={s.job!r}, task={s.task}, group={s.group}, rank={s.rank}/"
            f"{s.group_size}, clock={self._clock}, {s.sync}>"
        )

    # -- scheduler calls --------------------------------------------------------------

    def _call(self, handler: str, timeout: float | None = None, **kwargs: Any) -> Any:
        b = self._binding
        t = config.get_seconds("daskangel.client.call-timeout") if timeout is None else timeout
        fn = getattr(b.scheduler, handler)
        try:
            r = sync(b.loop, fn, callback_timeout=t, **kwargs)
        except (CommClosedError, OSError) as e:
            if isinstance(e, DaskAngelError):
                raise
            # a dropped connection to the scheduler is worth one more try: the clock
            # handlers are idempotent (a repeated tick changes nothing)
            r = sync(b.loop, fn, callback_timeout=t, **kwargs)
        if isinstance(r, dict) and "aborted" in r:
            raise JobAbortedError(r["aborted"])
        return r

    def _wait_call(self, handler: str, **kwargs: Any) -> Any:
        """A scheduler call that may wait for other tasks: secede while it does."""
        t = config.get_seconds("daskangel.clock.wait-timeout") + 30.0
        with seceded():
            return self._call(handler, timeout=t, **kwargs)

    def _wait_future(self, future: concurrent.futures.Future[Any]) -> Any:
        """The result of a scheduler call started on the loop (seceded while it waits)."""
        if future.done():
            return future.result()
        t = config.get_seconds("daskangel.clock.wait-timeout") + 30.0
        with seceded():
            return future.result(timeout=t)

    # -- arrays and clocks ------------------------------------------------------------

    def array(self, name: str) -> TaskArray:
        """The array ``name`` as seen from this task (reads obey the clocks)."""
        if not isinstance(name, str):
            raise InvalidTypeError(f"name: expected an array name (str), got {name!r}")
        return TaskArray(self, name)

    def staleness(self, name: str | None = None) -> int | None:
        """Staleness of the job, or of array ``name`` if overridden (None: ASP)."""
        s = self.spec
        if name is not None and name in s.array_staleness:
            return s.array_staleness[name]
        return s.staleness

    def _read_floor(self, name: str) -> int | None:
        """Wait until a read of ``name`` at this clock is allowed; return its floor."""
        floor = read_floor(self._clock, self.staleness(name))
        if floor is not None and floor > self._agent.known_min.get(self.job, -(2**62)):
            r = self._wait_call(
                "daskangel_clock_wait", job=self.job, task=self.task_id, floor=floor,
                epoch=self.epoch,
            )  # fmt: skip
            self._agent.observe_min(self.job, r["min"])
            self._waited += float(r["waited"])
        return floor

    def clock(self) -> int:
        """End this clock: push buffered updates, advance, wait for slower tasks.

        Returns the new clock.  Under SSP(s) this returns once the slowest task is
        at most ``s`` clocks behind (and, in a group, every member caught up).
        A task the driver moves off a slow worker (``daskangel.train.reschedule-slow``)
        ends here with :class:`~daskangel.errors.TaskMovedError` (``fn`` should let
        it pass) and restarts on another worker at the new clock.
        """
        self._agent.flush()
        r = self._call(
            "daskangel_clock_tick",
            job=self.job,
            task=self.task_id,
            clock=self._clock,
            stats=self._stats(),
            epoch=self.epoch,  # a task of a run a rollback abandoned is told to stop
        )
        self._agent.observe_min(self.job, r["min"])
        waited = 0.0
        if "moved" in r:  # to restart on another worker at the new clock
            done, self._clock = self._clock, int(r["clock"])
            self._record(done, waited)
            raise TaskMovedError(f"task {self.task_id} moves to another worker: {r['moved']}")
        if not r["ready"]:
            w = self._wait_call(
                "daskangel_clock_wait", job=self.job, task=self.task_id, epoch=self.epoch
            )
            self._agent.observe_min(self.job, w["min"])
            waited = float(w["waited"])
            self._waited += waited
        done, self._clock = self._clock, int(r["clock"])
        set_task_clock(self._clock)
        self._record(done, waited)
        return self._clock

    def _record(self, clock: int, waited: float) -> None:
        row = {
            "task": self.task_id,
            "group": self.group,
            "clock": clock,
            "time": time.time() - self._t0,
            "waited": waited,
        }
        row.update(self._metrics)
        self.history.append(row)
        self._metrics = {}

    def _stats(self) -> dict[str, Any]:
        st: dict[str, Any] = self._agent.task_counters(self._key)
        st["waited"] = self._waited
        if self._agent.pusher.budget.policy.on:
            st.update(self._agent.pusher.comm_status())
        if self._last_metrics:
            st["metrics"] = dict(self._last_metrics)
        return st

    def epochs(self, n: int | None = None) -> Iterator[int]:
        """Epoch numbers ``start .. n-1``, starting where a resumed task left off.

        ``n`` defaults to ``train(..., epochs=)``.  A task resubmitted after a
        failure resumes from the clock the scheduler holds for it, assuming the
        usual one ``clock()`` per epoch.
        """
        n = self.spec.epochs if n is None else n
        if n is None:
            raise InvalidArgumentError("n: give ctx.epochs(n) or train(..., epochs=n)")
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise InvalidArgumentError(f"n: expected an int >= 0, got {n!r}")
        yield from range(min(self._start_clock, n), n)

    def report(self, **metrics: Any) -> None:
        """Record metrics for this clock; they land in ``TrainResult.history``.

        Numeric values also ride on the next clock tick to the scheduler, so the
        progress bar, ``ps.status()`` and the dashboard show the newest ones.
        """
        for k, v in metrics.items():
            if k in ("task", "group", "clock", "time", "waited"):
                raise InvalidArgumentError(
                    f"{k}: reserved history column; pick another metric name"
                )
            self._metrics[k] = v
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                self._last_metrics[k] = float(v)

    def flush(self) -> None:
        """Push every buffered increment of this worker now and wait until applied."""
        self._agent.flush()

    # -- end of task --------------------------------------------------------------------

    def _finish(self) -> None:
        self._agent.flush()
        if self._metrics:
            self._record(self._clock, 0.0)
        self._call(
            "daskangel_task_done",
            job=self.job,
            task=self.task_id,
            stats=self._stats(),
            epoch=self.epoch,
        )

    def _fail(self, error: str, traceback: str) -> None:
        with contextlib.suppress(SyncError):
            self._call(
                "daskangel_job_fail",
                job=self.job,
                task=self.task_id,
                error=error,
                traceback=traceback,
                epoch=self.epoch,
            )
