"""Group coordination: barriers and the leader's command/acknowledge mailboxes.

Angel's model-parallel scheduling (its Fig. 4): inside a worker group the
leader sends each member a command (e.g. which parameter slice to work on this
round), every member acknowledges when done, and the leader moves to the next
round once all acknowledgements are in.  This service holds those mailboxes on
the scheduler, next to the clocks; waiting is an ``await`` on an event, never a
blocked loop, and a stopped job wakes every waiter with ``JobAbortedError``.

Rounds are numbered by ``seq``; each member counts its own calls, so all members
agree on ``seq`` as long as they follow the same protocol.  A task numbers them per
clock (``(clock << SEQ_BITS) | k``, see ``_clock_rule``), and a round once complete is
remembered: under ``recovery="continue"`` a member restarted at its clock (its
worker lost) redoes that clock's rounds, and those its partners already passed
answer at once (a barrier passes, a command is handed out again, an ack or a
resent command is taken as done) instead of waiting for partners that are on a
later round; then it joins them where they wait.  Before, its counters restarted
at 0 and it waited at a round its partners had passed while they waited for it at
theirs, until ``daskangel.clock.wait-timeout`` failed the job.  Every call carries
the caller's run (``epoch``, see ``Job.epoch``): a rollback wakes every waiter
(they end as aborted) and forgets every round, and a task of the run it abandoned
that is still alive is refused (``{"aborted": ...}``), so it can neither count as
a member of a barrier of the restarted run, nor post, take or acknowledge one of
its commands.  A *job barrier*
(``daskangel_job_barrier``) spans every task of a job, across groups: e.g. "every
task has read this clock's model" before anyone pushes its writes of the clock.

Example
-------
Leader and members, through ``TaskContext``::

    await scheduler.daskangel_group_send(job="j", group=0, seq=4, commands=[{...}, {...}])
    cmd = await scheduler.daskangel_group_recv(job="j", group=0, seq=4, rank=1)
    await scheduler.daskangel_group_ack(job="j", group=0, seq=4, rank=1, payload=None)
    acks = await scheduler.daskangel_group_acks(job="j", group=0, seq=4)
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from ..errors import SyncError
from ._clock_rule import seq_clock
from ._clocks import ClockService, Job, reports_abort

if TYPE_CHECKING:
    from distributed.scheduler import Scheduler

__all__ = ["GroupService"]


class _Round:
    """One round of one group: the leader's commands and the members' replies."""

    __slots__ = ("acks", "arrived", "commands", "event_acks", "event_cmd")

    def __init__(self) -> None:
        # [payload per rank] once the leader has sent them
        self.commands: list[Any] | None = None
        # {rank: ack payload}
        self.acks: dict[int, Any] = {}
        # {ranks that reached the barrier}
        self.arrived: set[int] = set()
        self.event_cmd = asyncio.Event()
        self.event_acks = asyncio.Event()


class GroupService:
    """Barriers and mailboxes of every group of every job."""

    def __init__(self, scheduler: Scheduler, clocks: ClockService) -> None:
        self.clocks = clocks
        # {(job, group, kind, seq): _Round}; kind is "mail" or "barrier"
        self.rounds: dict[tuple[str, int, str, int], _Round] = {}
        # {(job, group, kind): seq} the newest barrier every member passed (group -1,
        # kind "job": the job barrier); an arrival at or below it is a redo (continue)
        self.passed: dict[tuple[str, int, str], int] = {}
        # {(job, group, seq): round} mailbox rounds whose acks the leader collected,
        # kept while a member may redo them (clocks not behind the group's slowest)
        self.done: dict[tuple[str, int, int], _Round] = {}
        clocks.stop_listeners.append(self._wake_all)  # also run by a rollback request
        scheduler.handlers.update(
            {
                "daskangel_group_barrier": self.barrier,
                "daskangel_job_barrier": self.job_barrier,
                "daskangel_group_send": self.send,
                "daskangel_group_recv": self.recv,
                "daskangel_group_ack": self.ack,
                "daskangel_group_acks": self.acks,
            }
        )

    def _job(self, job: str, group: int, epoch: int | None) -> Job:
        s = self.clocks.job(job)
        s.check_run(epoch)
        s.check_alive()
        if group not in s.table.members:
            raise SyncError(f"group: job {job!r} has no group {group}")
        return s

    def _round(self, job: str, group: int, kind: str, seq: int) -> _Round:
        key = (job, group, kind, seq)
        r = self.rounds.get(key)
        if r is None:
            r = self.rounds[key] = _Round()
        return r

    def _wake_all(self, job: str) -> None:
        for key, r in list(self.rounds.items()):
            if key[0] == job:
                r.event_cmd.set()
                r.event_acks.set()
                del self.rounds[key]
        # a rollback rewinds the clocks: the restarted run's rounds are new ones
        for p in [k for k in self.passed if k[0] == job]:
            del self.passed[p]
        for d in [k for k in self.done if k[0] == job]:
            del self.done[d]

    def _redo(self, job: str, group: int, kind: str, seq: int) -> bool:
        """True when every member already passed round ``seq`` (a restarted member's)."""
        return seq <= self.passed.get((job, group, kind), -1)

    def _complete(self, job: str, group: int, kind: str, seq: int) -> None:
        r = self.rounds.pop((job, group, kind, seq), None)
        if r is not None:
            r.event_acks.set()
        key = (job, group, kind)
        self.passed[key] = max(seq, self.passed.get(key, -1))

    def _finish_mail(self, s: Job, group: int, seq: int, r: _Round) -> None:
        """Keep a collected mailbox round for members that may redo it; forget those
        of clocks every member of the group has left."""
        self.rounds.pop((s.id, group, "mail", seq), None)
        self.done[(s.id, group, seq)] = r
        low = s.table.group_min(group)
        if low is not None:
            for k in [k for k in self.done if k[:2] == (s.id, group) and seq_clock(k[2]) < low]:
                del self.done[k]

    def _size(self, s: Job, group: int) -> int:
        return len(s.table.members[group])

    @reports_abort
    async def barrier(
        self, job: str, group: int, seq: int, rank: int, epoch: int | None = None
    ) -> dict[str, Any]:
        """Return once every member of ``group`` has called the barrier ``seq``."""
        s = self._job(job, group, epoch)
        if self._redo(job, group, "barrier", seq):
            return {}
        r = self._round(job, group, "barrier", seq)
        r.arrived.add(rank)
        if len(r.arrived) >= self._size(s, group):
            self._complete(job, group, "barrier", seq)
        await r.event_acks.wait()
        s.check_run(epoch)
        s.check_alive()
        return {}

    @reports_abort
    async def job_barrier(
        self, job: str, seq: int, task: int, epoch: int | None = None
    ) -> dict[str, Any]:
        """Return once every task of ``job`` (all groups) has called the job barrier ``seq``.

        Tasks that already finished the job are not waited for.  A task entering the
        same barrier twice (a retried call, a restarted task) counts once, and one
        entering a barrier every task passed already (a restarted task redoing its
        clock) passes at once: ``seq`` must grow from one barrier to the next.
        """
        s = self.clocks.job(job)
        s.check_run(epoch)
        s.check_alive()
        s.table.check_task(task)
        if self._redo(job, -1, "job", seq):
            return {}
        r = self._round(job, -1, "job", seq)
        r.arrived.add(task)
        if r.arrived.issuperset(set(range(s.table.n)) - set(s.table.done)):
            self._complete(job, -1, "job", seq)
        await r.event_acks.wait()
        s.check_run(epoch)
        s.check_alive()
        return {}

    @reports_abort
    def send(
        self, job: str, group: int, seq: int, commands: list[Any], epoch: int | None = None
    ) -> dict[str, Any]:
        """The leader posts one command per rank for round ``seq``."""
        s = self._job(job, group, epoch)
        size = self._size(s, group)
        if len(commands) != size:
            raise SyncError(f"commands: group {group} has {size} members, got {len(commands)}")
        if (job, group, seq) in self.done:
            return {}  # a restarted leader's: its members worked on the first one
        r = self._round(job, group, "mail", seq)
        if r.commands is None:  # else: a retried send
            r.commands = list(commands)
            r.event_cmd.set()
        return {}

    @reports_abort
    async def recv(
        self, job: str, group: int, seq: int, rank: int, epoch: int | None = None
    ) -> dict[str, Any]:
        """A member waits for its command of round ``seq``."""
        s = self._job(job, group, epoch)
        r = self.done.get((job, group, seq)) or self._round(job, group, "mail", seq)
        await r.event_cmd.wait()
        s.check_run(epoch)
        s.check_alive()
        assert r.commands is not None
        return {"payload": r.commands[rank]}

    @reports_abort
    def ack(
        self,
        job: str,
        group: int,
        seq: int,
        rank: int,
        payload: Any = None,
        epoch: int | None = None,
    ) -> dict[str, Any]:
        """A member reports round ``seq`` done."""
        s = self._job(job, group, epoch)
        if (job, group, seq) in self.done:
            return {}  # a restarted member's, of a round the leader closed
        r = self._round(job, group, "mail", seq)
        r.acks[rank] = payload
        if len(r.acks) >= self._size(s, group):
            r.event_acks.set()
        return {}

    @reports_abort
    async def acks(
        self, job: str, group: int, seq: int, epoch: int | None = None
    ) -> dict[str, Any]:
        """The leader waits for every member's acknowledgement of round ``seq``."""
        s = self._job(job, group, epoch)
        r = self.done.get((job, group, seq)) or self._round(job, group, "mail", seq)
        await r.event_acks.wait()
        s.check_run(epoch)
        s.check_alive()
        self._finish_mail(s, group, seq, r)
        return {"acks": [r.acks[i] for i in range(self._size(s, group))]}
