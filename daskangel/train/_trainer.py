"""``train()`` and :class:`Trainer`: one long-running Dask future per training task.

Tasks are organised in ``groups`` of ``group_size``: ``groups=N, group_size=1``
is data parallelism, ``groups=1`` model parallelism, anything else hybrid.  Task
``t`` is member ``t % group_size`` of group ``t // group_size``, has the stable
key ``daskangel-train-<job>-<t>``, and is pinned to the worker holding its data
partition.  The scheduler plugin holds the clocks and enforces ``sync`` across
groups (BSP inside a group); ``array_sync`` overrides it per array, as Angel
allows.

``train`` shows a progress bar where a person watches (``_progress``), returns a
:class:`TrainResult` with each task's return value and a history DataFrame, and
raises the first task error as :class:`~daskangel.errors.TaskFailedError` naming
the task, with its remote traceback, after the other tasks have stopped.

Example
-------
>>> def step(ctx, part):                                            # doctest: +SKIP
...     w = ctx.array("w")  # doctest: +SKIP
...     for _ in ctx.epochs():  # doctest: +SKIP
...         w.increment(part.sum(axis=0), rows=0)  # doctest: +SKIP
...         ctx.clock()  # doctest: +SKIP
>>> res = angel.train(ps, step, parts, sync=angel.SSP(staleness=2), epochs=10)  # doctest: +SKIP
>>> res.history.groupby("clock").time.max()  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import inspect
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any, cast

from distributed import Future

from .. import config
from ..errors import InvalidArgumentError, InvalidStateError, InvalidTypeError
from ..scheduler._clock_rule import Sync, as_sync
from ._context import TaskContext
from ._placement import PLACEMENTS, assign, task_pieces
from ._progress import Bar, resolve_progress
from ._recovery import Recovery, _forget_job, wait_futures
from ._reschedule import Rescheduler
from ._result import TrainResult, make_result, mean_metrics, outcome, raise_failure
from ._resume import resume_from, take_pending
from ._runner import run_task
from ._spec import TaskSpec

__all__ = ["TrainResult", "Trainer", "train"]


def _check_int(name: str, v: Any, lo: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        raise InvalidArgumentError(f"{name}: expected an int >= {lo}, got {v!r}")
    return v


class Trainer:
    """A training job: :meth:`start` submits it, :meth:`result` waits for it.

    See :func:`train` for the parameters.
    """

    def __init__(
        self,
        ps: Any,
        fn: Callable[[TaskContext, Any], Any],
        data: Any = None,
        *,
        groups: int | None = None,
        group_size: int = 1,
        sync: Any = None,
        array_sync: Mapping[str, Any] | None = None,
        epochs: int | None = None,
        placement: str | Callable[..., Any] = "replicated",
        workers: list[str] | None = None,
        progress: bool | str = "auto",
        name: str | None = None,
        unit: str = "clock",
        clocks_per_unit: int = 1,
        resume: str | None = None,
    ) -> None:
        if not callable(fn):
            raise InvalidTypeError(f"fn: expected a function fn(ctx, partition), got {fn!r}")
        self.ps = ps
        self.client = ps.client
        self.fn = fn
        self.data = data
        self.group_size = _check_int("group_size", group_size, 1)
        if hasattr(data, "ndim") or hasattr(data, "iloc"):
            raise InvalidTypeError(
                f"data: expected a sequence of partitions (one per task or per group), got a "
                f"single {type(data).__name__}; split it first, e.g. np.array_split(X, n_tasks)"
            )
        if groups is None:
            if data is None:
                raise InvalidArgumentError("groups: give groups= when data is None")
            groups = len(getattr(data, "partitions", None) or data)  # one item per group
        self.groups = _check_int("groups", groups, 1)
        self.sync: Sync = as_sync(sync if sync is not None else "bsp")
        self.array_sync = {
            k: as_sync(v, f"array_sync[{k!r}]") for k, v in (array_sync or {}).items()
        }
        self.epochs = None if epochs is None else _check_int("epochs", epochs, 0)
        if not callable(placement) and placement not in PLACEMENTS:
            raise InvalidArgumentError(
                f"placement: expected one of {PLACEMENTS} or a function, got {placement!r}"
            )
        self.placement = placement
        self.workers = workers
        self.progress = resolve_progress(progress)
        self.unit = unit
        self.clocks_per_unit = _check_int("clocks_per_unit", clocks_per_unit, 1)
        # resume=, or a model's fit(..., resume=url) around this job (_resume.resuming)
        self.resume = resume if resume is not None else take_pending()
        self.job = name or f"train-{uuid.uuid4().hex[:10]}"
        self.futures: list[Future] = []
        self.recovery = Recovery(self)
        self.mover = Rescheduler(self)
        self._t0 = 0.0
        self._scheduler: Any = cast(Any, self.client.scheduler)

    @property
    def n_tasks(self) -> int:
        return self.groups * self.group_size

    def __repr__(self) -> str:
        return (
            f"Trainer<job={self.job!r}, {self.groups} groups x {self.group_size}, "
            f"{self.sync!r}, {'running' if self.futures else 'not started'}>"
        )

    def _spec(self, t: int) -> TaskSpec:
        return TaskSpec(
            job=self.job,
            task=t,
            group=t // self.group_size,
            rank=t % self.group_size,
            group_size=self.group_size,
            n_groups=self.groups,
            staleness=self.sync.staleness,
            array_staleness={k: v.staleness for k, v in self.array_sync.items()},
            epochs=self.epochs,
            sync=repr(self.sync),
        )

    def start(self) -> Trainer:
        """Register the job's clock table and submit one pinned future per task."""
        if self.futures:
            raise InvalidStateError(f"job {self.job!r} was started already")
        self.ps._check_open()
        where = assign(
            self.client, self.data, self.groups, self.group_size, self.placement, self.workers
        )
        pieces = None
        if self.data is not None and getattr(self.data, "partitions", None) is None:
            pieces = task_pieces(self.data, self.groups, self.group_size, self.placement)
        groups = [t // self.group_size for t in range(self.n_tasks)]
        start = 0
        if self.resume is not None:  # the arrays and the clock of the snapshot
            start = resume_from(self.ps, self.resume, self.n_tasks, groups)
        self.client.sync(
            self._scheduler.daskangel_job_register,
            job=self.job,
            n_tasks=self.n_tasks,
            groups=groups,
            staleness=self.sync.staleness,
            array_staleness={k: v.staleness for k, v in self.array_sync.items()},
            ctx=self.ps.id,
            epochs=self.epochs,
            clocks=[start] * self.n_tasks,
        )
        self.recovery.prepare(where, pieces, start)
        self._t0 = time.perf_counter()
        self.futures = [self.submit_task(t, part, w) for t, (part, w) in enumerate(where)]
        return self

    def submit_task(
        self, t: int, part: Any, worker: str | None, attempt: int = 0, loose: bool = False
    ) -> Future:
        """One pinned future running task ``t`` (``attempt`` > 0: a resubmission;
        ``loose``: another worker if ``worker`` has gone)."""
        key = f"daskangel-train-{self.job}-{t}" + (f"-r{attempt}" if attempt else "")
        f = self.client.submit(
            run_task,
            self._spec(t),
            self.fn,
            part,
            key=key,
            workers=[worker] if worker else None,
            allow_other_workers=worker is None or loose,
            pure=False,
        )
        self.recovery.task_of[f.key] = t
        return f

    def table(self) -> dict[str, Any]:
        """The job's clock table as the scheduler holds it (clocks, groups, status ...)."""
        return cast(
            dict[str, Any], self.client.sync(self._scheduler.daskangel_clock_table, job=self.job)
        )

    def clocks(self) -> list[int]:
        return list(self.table()["clocks"])

    def stop(self, reason: str = "cancelled by the driver") -> None:
        """Stop the job: every task ends at its next clock, read wait or group call."""
        self.client.sync(self._scheduler.daskangel_job_abort, job=self.job, reason=reason)

    def result(self) -> TrainResult:
        """Wait for every task, with a progress bar; raise the first task error."""
        if not self.futures:
            self.start()
        bar = self._bar()
        pending = set(self.futures)
        outs: dict[int, dict[str, Any]] = {}
        failure: dict[str, Any] | None = None
        interval = config.get_seconds("daskangel.train.progress-interval")
        try:
            while pending:
                done = wait_futures(list(pending), interval, first=True)
                table = self.table()
                if table["status"] == "rollback":
                    pending = self.recovery.rollback(pending)
                    outs.clear()
                    self.mover.forget()
                    continue
                pending |= self.recovery.resubmit_lost(table, pending)
                for f in done:
                    pending.discard(f)
                    if not self.recovery.is_current(f):
                        continue  # superseded by a resubmission
                    out = self._outcome(f)
                    if out["status"] == "moved":  # off a slow worker: restart it elsewhere
                        pending.add(self.mover.restart(out))
                        continue
                    outs[out["task"]] = out
                    if out["status"] == "error" and failure is None:
                        failure = out
                        self.client.sync(
                            self._scheduler.daskangel_job_fail,
                            job=self.job,
                            task=out["task"],
                            error=out["error"],
                            traceback=out.get("traceback", ""),
                        )
                if bar is not None:
                    bar.update(list(table["clocks"]), mean_metrics(table))
                if failure is not None and pending:
                    self._drain(pending, outs)
                    pending = set()
                elif failure is None:
                    self.mover.check(table)
        except BaseException:
            with contextlib.suppress(Exception):
                self.stop("the driver was interrupted")
            raise
        finally:
            if bar is not None:
                bar.close()
        wall = time.perf_counter() - self._t0
        table = self.table()
        self.client.sync(self._scheduler.daskangel_job_close, job=self.job)
        with contextlib.suppress(Exception):  # housekeeping only: caches are bounded anyway
            self.client.run(_forget_job, self.job)
        raise_failure(self.job, self.group_size, table, outs)
        return self._result(table, outs, wall)

    def _bar(self) -> Bar | None:
        if not self.progress:
            return None
        return Bar(self.epochs, self.unit, self.clocks_per_unit, f"train {self.job}")

    def _outcome(self, f: Future) -> dict[str, Any]:
        return outcome(f, self.recovery.task_of[f.key])

    def _drain(self, pending: set[Future], outs: dict[int, dict[str, Any]]) -> None:
        """After a failure, give the other tasks ``stop-timeout`` to end, then cancel them."""
        wait_futures(list(pending), config.get_seconds("daskangel.train.stop-timeout"))
        late = [f for f in pending if f.status not in ("finished", "error")]
        if late:
            self.client.cancel(late)
        for f in pending:
            if f not in late:
                out = self._outcome(f)
                outs[out["task"]] = out

    def _result(
        self, table: dict[str, Any], outs: dict[int, dict[str, Any]], wall: float
    ) -> TrainResult:
        return make_result(
            self.job,
            self.n_tasks,
            table,
            self.mover.with_history(outs),
            wall,
            restarts=self.recovery.restarts,
            rollbacks=self.recovery.rollbacks,
            moves=self.mover.moves,
        )


def train(
    ps: Any, fn: Callable[[TaskContext, Any], Any], data: Any = None, **options: Any
) -> TrainResult:
    """Run ``fn(ctx, partition)`` as one Dask future per task and wait for all.

    The keyword arguments (``options``) are :class:`Trainer`'s, all keyword-only.

    Parameters
    ----------
    ps
        The :class:`~daskangel.PSContext` whose arrays the tasks use.
    fn
        ``fn(ctx, partition)``; ``ctx`` is a :class:`TaskContext`.  Its return
        value lands in ``TrainResult.results[task_id]``.
    data
        ``None``, a sequence with one item per task (or per group), or a
        Dataset-like object whose ``.partitions`` are Dask futures.
    groups, group_size
        ``groups`` groups of ``group_size`` tasks (default: one group per item).
    sync
        ``BSP()`` (default), ``SSP(staleness=s)`` or ``ASP()``, across groups;
        inside a group clocks move in lockstep.
    array_sync
        ``{array_name: protocol}`` overrides for reads of single arrays.
    epochs
        Default for ``ctx.epochs()``; also the progress bar's length.
    placement
        How a group's item is shared by its members: ``"replicated"``,
        ``"horizontal"`` (rows split), ``"vertical"`` (columns split) or a
        function ``placement(item, rank, size)``.
    workers
        Restrict the tasks to these workers (default: all).
    progress
        Show a progress bar: ``True``, ``False`` or ``"auto"`` (where a person
        watches: a terminal or Jupyter; see :mod:`daskangel.train._progress`).
    name
        Job id (default: a fresh one).
    unit, clocks_per_unit
        What the bar counts (``"epoch"``) and how many clocks make one (the bar
        shows the slowest task's completed units out of ``epochs / clocks_per_unit``).
    resume
        A snapshot directory (or one version of it) taken by an earlier run of
        this job (``PSContext(snapshot=url, snapshot_every=N)``), on this cluster or
        another: its arrays are loaded into ``ps`` and every task starts at the
        snapshot's clock (``ctx.epochs()`` continues from there; see
        :mod:`daskangel.train._resume`).

    Returns
    -------
    TrainResult
    """
    return Trainer(ps, fn, data, **options).result()


def _signature() -> inspect.Signature:
    """``train``'s signature as introspection shows it: ``Trainer``'s parameters."""
    sig = inspect.signature(Trainer.__init__)
    return sig.replace(
        parameters=list(sig.parameters.values())[1:], return_annotation="TrainResult"
    )


setattr(train, "__signature__", _signature())  # noqa: B010 - help(train) lists every option
