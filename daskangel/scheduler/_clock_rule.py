"""The clock rule: given the clock table, who may proceed.  No Dask in here.

A training job has tasks ``0 .. n-1``, each in a group.  A task's *clock* is the
number of ``clock()`` calls it has completed; updates it pushes while at clock
``c`` belong to clock ``c``.  A task that has finished training no longer holds
anyone back.

The protocols (Angel's, after the SSP papers):

* :class:`SSP` ``(staleness=s)``: a task at clock ``c`` may run (and read) once
  the slowest running task has reached clock ``c - s``.  Every task flushes its
  updates before its clock advances, so a read at clock ``c`` sees every update
  of clocks ``<= c - s - 1``, and no running task is more than ``s`` clocks ahead
  of the slowest.
* :class:`BSP` is ``SSP(0)``: all updates of earlier clocks are visible.
* :class:`ASP`: nobody ever waits for the slowest.

Inside a group of several tasks the clocks move in lockstep (BSP): a member at
clock ``c`` also waits until every member of its group has reached ``c``.

.. warning::
   ``BSP`` here is Angel's (staleness 0): a read at clock ``c`` sees every update
   of clocks ``< c``; updates other tasks make *during* clock ``c`` may or may not
   be visible yet.  It is not Valiant's BSP, which hides them until the barrier.

Example
-------
>>> t = ClockTable(tasks=3, groups=[0, 1, 2])
>>> t.tick(0, 0), t.tick(0, 1), t.min_clock
(1, 2, 0)
>>> t.ready(0, SSP(staleness=1).staleness), t.ready(0, SSP(staleness=2).staleness)
(False, True)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidArgumentError

__all__ = [
    "ASP",
    "BSP",
    "SEQ_BITS",
    "SSP",
    "ClockTable",
    "Sync",
    "as_sync",
    "may_proceed",
    "read_floor",
    "seq_clock",
]


@dataclass(frozen=True, slots=True)
class SSP:
    """Stale synchronous parallel: run at most ``staleness`` clocks ahead of the slowest."""

    staleness: int = 0

    def __post_init__(self) -> None:
        s = self.staleness
        if isinstance(s, bool) or not isinstance(s, int) or s < 0:
            raise InvalidArgumentError(f"staleness: expected an int >= 0, got {s!r}")

    def __repr__(self) -> str:
        return f"SSP(staleness={self.staleness})"


@dataclass(frozen=True, slots=True)
class BSP:
    """Bulk synchronous parallel: every update of earlier clocks is visible (staleness 0)."""

    @property
    def staleness(self) -> int:
        return 0

    def __repr__(self) -> str:
        return "BSP()"


@dataclass(frozen=True, slots=True)
class ASP:
    """Asynchronous parallel: no task ever waits for slower ones."""

    @property
    def staleness(self) -> None:
        return None

    def __repr__(self) -> str:
        return "ASP()"


Sync = BSP | SSP | ASP


def as_sync(value: Any, name: str = "sync") -> Sync:
    """Accept a protocol object, ``"bsp"``, ``"asp"``, ``"ssp:2"`` or a staleness int."""
    if isinstance(value, (BSP, SSP, ASP)):
        return value
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return BSP() if value == 0 else SSP(value)
    if isinstance(value, str):
        v = value.strip().lower()
        if v == "bsp":
            return BSP()
        if v == "asp":
            return ASP()
        if v.startswith("ssp:") and v[4:].isdigit():
            return SSP(int(v[4:]))
    raise InvalidArgumentError(
        f"{name}: expected BSP(), SSP(staleness=s), ASP(), 'bsp', 'asp', 'ssp:<s>' "
        f"or a staleness >= 0, got {value!r}"
    )


# A group call's round number (barrier, leader command) from a task is
# ``(clock << SEQ_BITS) | k``: the k-th round of the task's clock.  Rounds are
# ordered by clock first, and a member restarted at its clock counts them again
# from that clock's first (``recovery="continue"``).
SEQ_BITS = 32


def seq_clock(seq: int) -> int:
    """The clock a round number ``(clock << SEQ_BITS) | k`` belongs to."""
    return int(seq) >> SEQ_BITS


def read_floor(clock: int, staleness: int | None) -> int | None:
    """Smallest clock the slowest task must have reached before a read at ``clock``.

    ``None`` means no constraint (ASP).
    """
    return None if staleness is None else clock - staleness


def may_proceed(clock: int, min_clock: int | None, staleness: int | None) -> bool:
    """The rule: a task at ``clock`` may run when the slowest is close enough.

    ``min_clock`` is ``None`` when no task is running any more.
    """
    if staleness is None or min_clock is None:
        return True
    return clock - min_clock <= staleness


class ClockTable:
    """The clocks of one job's tasks, with the slowest clock kept incrementally.

    ``groups[t]`` is task ``t``'s group; ``start`` optional starting clocks (a job
    resumed from a table kept elsewhere).
    """

    def __init__(
        self, tasks: int, groups: Sequence[int] | None = None, start: Sequence[int] | None = None
    ) -> None:
        if tasks < 1:
            raise InvalidArgumentError(f"tasks: expected >= 1, got {tasks}")
        groups = list(groups) if groups is not None else list(range(tasks))
        if len(groups) != tasks:
            raise InvalidArgumentError(f"groups: expected {tasks} entries, got {len(groups)}")
        self.n = tasks
        # [clock of task t]
        self.clocks: list[int] = list(start) if start is not None else [0] * tasks
        if len(self.clocks) != tasks or any(c < 0 for c in self.clocks):
            raise InvalidArgumentError(f"start: expected {tasks} clocks >= 0, got {start!r}")
        # {task ids that finished}
        self.done: set[int] = set()
        # [group of task t]
        self.group_of: list[int] = groups
        # {group: [tasks]}
        self.members: dict[int, list[int]] = {}
        for t, g in enumerate(groups):
            self.members.setdefault(g, []).append(t)
        # {clock: number of running tasks at that clock}
        self._count: dict[int, int] = {}
        # {group: {clock: number of running members at that clock}}
        self._gcount: dict[int, dict[int, int]] = {g: {} for g in self.members}
        for t, c in enumerate(self.clocks):
            self._add(t, c, 1)
        # the largest (clock - slowest clock) of a task allowed to run, ever
        self.max_lead = 0

    def _add(self, task: int, clock: int, k: int) -> None:
        for counts in (self._count, self._gcount[self.group_of[task]]):
            v = counts.get(clock, 0) + k
            if v:
                counts[clock] = v
            else:
                del counts[clock]

    @property
    def min_clock(self) -> int | None:
        """Clock of the slowest running task; ``None`` when all have finished."""
        return min(self._count) if self._count else None

    @property
    def max_clock(self) -> int | None:
        return max(self._count) if self._count else None

    def group_min(self, group: int) -> int | None:
        counts = self._gcount[group]
        return min(counts) if counts else None

    def check_task(self, task: int) -> None:
        if not 0 <= task < self.n:
            raise InvalidArgumentError(f"task: expected a task id in [0, {self.n}), got {task}")

    def tick(self, task: int, clock: int) -> int:
        """Task ``task`` completed clock ``clock``; return its new clock.

        Idempotent: a repeated tick for a clock already completed changes nothing,
        so a retried message never advances a task twice.
        """
        self.check_task(task)
        old = self.clocks[task]
        new = max(old, clock + 1)
        if new != old and task not in self.done:
            self._add(task, old, -1)
            self._add(task, new, 1)
        self.clocks[task] = new
        return new

    def finish(self, task: int) -> None:
        """Task ``task`` is done: it no longer holds anyone back."""
        self.check_task(task)
        if task not in self.done:
            self.done.add(task)
            self._add(task, self.clocks[task], -1)

    def ready(self, task: int, staleness: int | None) -> bool:
        """May ``task`` run at its current clock (protocol across, BSP within groups)?"""
        return self.ready_at(task, self.clocks[task], staleness)

    def ready_at(self, task: int, clock: int, staleness: int | None) -> bool:
        gmin = self.group_min(self.group_of[task])
        if gmin is not None and gmin < clock:
            return False
        return may_proceed(clock, self.min_clock, staleness)

    def note_release(self, clock: int) -> None:
        """Record that a task was let run at ``clock`` (for :attr:`max_lead`)."""
        m = self.min_clock
        if m is not None:
            self.max_lead = max(self.max_lead, clock - m)

    def floor_met(self, floor: int | None) -> bool:
        """Has the slowest running task reached ``floor``?"""
        m = self.min_clock
        return floor is None or m is None or m >= floor
