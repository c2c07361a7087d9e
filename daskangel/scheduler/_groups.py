"""Group coordination: barriers and the leader's command/acknowledge mailboxes.

Angel's model-parallel scheduling (its Fig. 4): inside a worker group the
leader sends each member a command (e.g. which parameter slice to work on this
round), every member acknowledges when done, and the leader moves to the next
round once all acknowledgements are in.  This service holds those mailboxes on
the scheduler, next to the clocks; waiting is an ``await`` on an event, never a
blocked loop, and a stopped job wakes every waiter with ``JobAbortedError``.

Rounds are numbered by ``seq``; each member counts its own calls, so all members
agree on ``seq`` as long as they follow the same protocol.  Every call carries
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

    def _size(self, s: Job, group: int) -> int:
        return len(s.table.members[group])

    @reports_abort
    async def barrier(
        self, job: str, group: int, seq: int, rank: int, epoch: int | None = None
    ) -> dict[str, Any]:
        """Return once every member of ``group`` has called the barrier ``seq``."""
        s = self._job(job, group, epoch)
        r = self._round(job, group, "barrier", seq)
        r.arrived.add(rank)
        if len(r.arrived) >= self._size(s, group):
            r.event_acks.set()
            self.rounds.pop((job, group, "barrier", seq), None)
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
        same barrier twice (a retried call, a restarted task) counts once.
        """
        s = self.clocks.job(job)
        s.check_run(epoch)
        s.check_alive()
        s.table.check_task(task)
        r = self._round(job, -1, "job", seq)
        r.arrived.add(task)
        if r.arrived.issuperset(set(range(s.table.n)) - set(s.table.done)):
            r.event_acks.set()
            self.rounds.pop((job, -1, "job", seq), None)
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
        r = self._round(job, group, "mail", seq)
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
        r = self._round(job, group, "mail", seq)
        await r.event_acks.wait()
        s.check_run(epoch)
        s.check_alive()
        self.rounds.pop((job, group, "mail", seq), None)
        return {"acks": [r.acks[i] for i in range(self._size(s, group))]}
