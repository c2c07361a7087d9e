"""The training driver's side of fault tolerance.

A training task's future is pinned to one worker.  When that worker dies Dask
would wait for it forever, so the driver takes over, following the recovery mode
of the :class:`~daskangel.PSContext`:

* ``"continue"``: the clock service marks the tasks of the dead worker *lost*;
  :meth:`Recovery.resubmit_lost` starts each again on a live worker (its data
  piece scattered again, or its partition re-read) and it resumes from the clock
  the scheduler holds for it.  The lost PS blocks were rebuilt from the newest
  snapshot meanwhile, and the other tasks kept going.  A group member redoes its
  clock's group rounds: those its partners passed answer at once and it meets them
  where they wait (``scheduler/_groups.py``); two-phase psf updates its worker had
  prepared were aborted on every server when the worker left (``release_origin``).
* ``"rollback"``: the clock service stops every task; :meth:`Recovery.rollback`
  waits for them to end, drops what their workers had buffered, has the
  scheduler restore every array from the newest snapshot and rewind the clocks,
  then restarts all tasks from that snapshot's clock.  A deterministic BSP job
  ends exactly as it would have without the failure.

For rollback to have a starting point, :meth:`Recovery.prepare` takes a snapshot
at the job's first clock when the context snapshots by clocks: a *rollback
point*, which does not count against the context's ``keep`` and is removed once
a newer snapshot is complete.

.. warning::
   In ``"continue"`` mode a resubmitted task redoes the clock it was in; the
   increments of that clock it had already pushed are pushed again.  Together
   with the lost blocks' updates since the snapshot, that bounds what
   ``"continue"`` gets wrong to one snapshot interval of updates.

Example
-------
Used by :class:`~daskangel.train.Trainer`; nothing to call directly.
"""

from __future__ import annotations

import contextlib
from typing import Any, Protocol

import distributed
from distributed import Future

from .. import config
from .._compat import training_workers
from ..errors import ServerLostError
from ._placement import group_item, member_worker, place_share


class _Job(Protocol):
    """What recovery needs of the running :class:`~daskangel.train.Trainer` (typed
    here, not imported: the trainer imports this module)."""

    job: str
    client: Any
    ps: Any
    data: Any
    groups: int
    group_size: int
    placement: Any
    _scheduler: Any

    @property
    def n_tasks(self) -> int: ...

    def submit_task(
        self, t: int, part: Any, worker: str | None, attempt: int = 0, loose: bool = False
    ) -> Any: ...


__all__ = ["Recovery"]


def _forget_job(job: str, dask_worker: Any = None) -> None:
    """On a worker (``client.run``): drop cached copies and unsent increments of a job."""
    binding = getattr(dask_worker, "_daskangel_binding", None)
    agent = getattr(binding, "_daskangel_agent", None)
    if agent is not None:
        agent.forget_job(job)


def wait_futures(futures: list[Future], timeout: float, first: bool = False) -> set[Future]:
    """``distributed.wait`` that returns (never raises for) cancelled futures.

    Dask cancels a task whose input was lost with a dead worker (a scattered
    piece); to the driver that is just another task to resubmit.
    """
    try:
        done, _ = distributed.wait(
            futures, timeout=timeout, return_when="FIRST_COMPLETED" if first else "ALL_COMPLETED"
        )
        return set(done)
    except distributed.TimeoutError:
        return {f for f in futures if f.done()}
    except distributed.client.FuturesCancelledError:
        return {f for f in futures if f.done()}


class Recovery:
    """Bookkeeping of task futures, and their resubmission after failures."""

    def __init__(self, trainer: _Job) -> None:
        self.trainer = trainer
        # {future key: task id}, every future ever submitted for the job
        self.task_of: dict[Any, int] = {}
        # [(partition future or None, worker)] current placement per task
        self.where: list[tuple[Any, str | None]] = []
        # driver-side piece per task (sequence data), to scatter again if lost
        self.pieces: list[Any] | None = None
        # [attempt] per task; [current future] per task
        self.attempt: list[int] = []
        self.restarts = 0
        self.rollbacks = 0

    def prepare(
        self, where: list[tuple[Any, str]], pieces: list[Any] | None, clock: int = 0
    ) -> None:
        tr = self.trainer
        self.where = [(p, w) for p, w in where]
        self.pieces = pieces
        self.attempt = [0] * tr.n_tasks
        if getattr(tr.ps, "snapshot_every_clocks", None):
            # the base a rollback can always return to (a resumed job: its clock)
            # (managed apart from the context's ``keep``, removed once superseded)
            tr.client.sync(
                tr._scheduler.daskangel_snapshot,
                ctx=tr.ps.id,
                clock=clock,
                job=tr.job,
                rollback_point=True,
            )

    def is_current(self, f: Future) -> bool:
        t = self.task_of.get(f.key)
        return t is not None and f.key == self._key(t)

    def _key(self, t: int) -> str:
        a = self.attempt[t]
        return f"daskangel-train-{self.trainer.job}-{t}" + (f"-r{a}" if a else "")

    # -- continue ------------------------------------------------------------------------

    def resubmit_lost(self, table: dict[str, Any], pending: set[Future]) -> set[Future]:
        """Resubmit tasks the scheduler marked lost; return their new futures."""
        tr = self.trainer
        new: set[Future] = set()
        for t, info in enumerate(table["tasks"]):
            if info.get("status") != "lost":
                continue
            old = next((f for f in pending if self.task_of.get(f.key) == t), None)
            if old is not None:
                pending.discard(old)
                old.cancel()
            tr.client.sync(tr._scheduler.daskangel_task_resubmitted, job=tr.job, task=t)
            new.add(self._resubmit(t))
            self.restarts += 1
        return new

    def _resubmit(self, t: int) -> Future:
        tr = self.trainer
        part, _ = self.where[t]
        part, worker = self._placed(t, part)
        self.attempt[t] += 1
        self.where[t] = (part, worker)
        return tr.submit_task(t, part, worker, self.attempt[t])

    def move(self, t: int, worker: str | None) -> Future:
        """Resubmit task ``t``, which ended at a clock to leave a slow worker, on
        ``worker`` (another one if that has gone meanwhile)."""
        part, _ = self.where[t]
        self.attempt[t] += 1
        self.where[t] = (part, worker)
        return self.trainer.submit_task(t, part, worker, self.attempt[t], loose=True)

    def _live(self) -> list[str]:
        """The live workers; while every worker is down (all restarting at once),
        wait up to ``daskangel.client.recovery-wait`` for one to come back."""
        client = self.trainer.client
        live = sorted(training_workers(client))
        if live:
            return live
        wait = config.get_seconds("daskangel.client.recovery-wait")
        try:
            client.wait_for_workers(1, timeout=wait)
        except TimeoutError:
            raise ServerLostError(
                f"no worker came back within daskangel.client.recovery-wait ({wait:g}s) "
                "to rerun the lost training tasks"
            ) from None
        return sorted(training_workers(client))

    def _placed(self, t: int, part: Any) -> tuple[Any, str | None]:
        """The task's data (scattered again if its copy was lost) and a worker for it."""
        tr = self.trainer
        live = self._live()
        if not isinstance(part, Future):
            return part, live[t % len(live)]
        holders: list[str] = []
        if part.status not in ("cancelled", "lost", "error"):
            with contextlib.suppress(distributed.client.FuturesCancelledError):
                holders = tr.client.who_has([part]).get(part.key) or []
        holders = [h for h in holders if h in live]
        if holders:
            return part, holders[0]
        if self.pieces is not None:  # a scattered piece lost with its worker: scatter it again
            target = live[t % len(live)]
            (f,) = tr.client.scatter([self.pieces[t]], workers=[target], hash=False)
            return f, target
        parts = list(getattr(tr.data, "partitions", None) or [])
        keys = [getattr(p, "key", None) for p in parts]
        shared = group_item(len(parts), tr.groups, tr.group_size, t)
        i = shared[0] if shared is not None else (keys.index(part.key) if part.key in keys else -1)
        if i < 0:
            return part, None  # let Dask recompute it from its graph, wherever
        src, holder = self._source(i, live)
        if src is None:
            return part, None
        if shared is None:
            return src, holder
        # a member's share of its group's partition: cut it again, on a live worker its
        # partners do not use (a restarted worker may sort anywhere among the live ones)
        worker = member_worker([w for _, w in self.where], t, tr.group_size, live)
        rank = shared[1]
        return place_share(
            tr.client, src, holder, rank, tr.group_size, tr.placement, worker
        ), worker

    def _source(self, i: int, live: list[str]) -> tuple[Any, str]:
        """Partition ``i`` of the data and its holder, rebuilt (``repair()``) if its
        worker is gone; ``(None, "")`` if it cannot be."""
        tr = self.trainer
        src = tr.data.partitions[i]
        with contextlib.suppress(distributed.client.FuturesCancelledError):
            holders = [h for h in tr.client.who_has([src]).get(src.key) or [] if h in live]
            if holders:
                return src, holders[0]
        repair = getattr(tr.data, "repair", None)
        if repair is None:
            return None, ""
        repair()  # the data layer parses the dead worker's pieces again elsewhere
        return tr.data.partitions[i], tr.data.workers[i]

    # -- rollback ------------------------------------------------------------------------

    def rollback(self, pending: set[Future]) -> set[Future]:
        """Stop every task, restore the newest snapshot, restart all tasks from it."""
        tr = self.trainer
        wait_futures(list(pending), config.get_seconds("daskangel.train.stop-timeout"))
        late = [f for f in pending if not f.done()]
        if late:  # e.g. pinned to the dead worker
            tr.client.cancel(late)
        with contextlib.suppress(Exception):
            tr.client.run(_forget_job, tr.job)
        tr.client.sync(tr._scheduler.daskangel_rollback, ctx=tr.ps.id, job=tr.job)
        self.rollbacks += 1
        return {self._resubmit(t) for t in range(tr.n_tasks)}
