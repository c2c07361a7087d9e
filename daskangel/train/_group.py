"""Group coordination from a task: barrier, leader commands, acknowledgements.

This is what Angel's model-parallel *leader scheduling* needs (its Fig. 4): in
each round the leader sends every member a command (e.g. the parameter slice to
work on), each member works and acknowledges, and the leader starts the next
round once every acknowledgement is in.  :meth:`GroupChannel.round_robin` is
the rotation Angel shows: over ``group_size`` rounds each member visits every
slice once and no two members hold the same slice in the same round.

Payloads are plain values (numbers, strings, lists, dicts).  Every wait
secedes from the worker's thread pool.

Example
-------
>>> def step(ctx, part):                                            # doctest: +SKIP
...     for epoch in ctx.epochs(5):  # doctest: +SKIP
...         for s in ctx.round_robin():          # slice s is this member's this round  # doctest: +SKIP
...             cols = slices[s]  # doctest: +SKIP
...             w = ctx.array("W").get(cols=cols)  ...  # doctest: +SKIP
...         ctx.clock()  # doctest: +SKIP
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import InvalidArgumentError, JobAbortedError, SyncError
from ..scheduler._clock_rule import SEQ_BITS

if TYPE_CHECKING:
    from ._spec import TaskSpec

__all__ = ["GroupChannel", "PendingBarrier"]


class PendingBarrier:
    """A job barrier entered without waiting (:meth:`GroupChannel.job_barrier`)."""

    def __init__(self, ctx: GroupChannel, future: concurrent.futures.Future[Any]) -> None:
        self._ctx = ctx
        self._future = future

    def wait(self) -> None:
        """Return once every task of the job has entered the barrier (seceded meanwhile)."""
        r = self._ctx._wait_future(self._future)
        if isinstance(r, dict) and "aborted" in r:
            raise JobAbortedError(r["aborted"])


class GroupChannel:
    """Mixin of :class:`TaskContext`: barrier and mailboxes of the task's group."""

    spec: TaskSpec
    _binding: Any
    _clock: int  # the task's clock (TaskContext)
    epoch: int  # the job's run this task belongs to (TaskContext)

    def __init__(self) -> None:
        # counted per clock: a group call's ``seq`` is ``(clock << SEQ_BITS) | k`` for
        # the k-th barrier (or mailbox round) of the clock, so a member restarted at
        # its clock (``recovery="continue"``) redoes exactly that clock's rounds, which
        # the scheduler lets it pass where its partners already did
        self._seq_clock = self._clock
        self._barrier_seq = 0  # barriers passed in this clock
        self._mail_seq = 0  # rounds acknowledged in this clock
        self._received: int | None = None  # round whose command was received

    def _seq(self, k: int) -> int:
        """The scheduler's ``seq`` of round ``k`` of the current clock."""
        if self._seq_clock != self._clock:  # a new clock: its rounds count from 0
            self._seq_clock = self._clock
            self._barrier_seq = self._mail_seq = 0
            self._received = None
            k = 0
        return (self._clock << SEQ_BITS) | k

    def _call(self, handler: str, timeout: float | None = None, **kwargs: Any) -> Any:
        raise NotImplementedError

    def _wait_call(self, handler: str, **kwargs: Any) -> Any:
        raise NotImplementedError

    def _wait_future(self, future: concurrent.futures.Future[Any]) -> Any:
        raise NotImplementedError

    def _where(self) -> dict[str, Any]:
        # the run: once a rollback abandons it, the scheduler refuses this task's
        # group calls (it must not count in, or command, the restarted run's rounds)
        return {"job": self.spec.job, "group": self.spec.group, "epoch": self.epoch}

    def barrier(self) -> None:
        """Return once every member of this task's group has reached this barrier."""
        seq = self._seq(self._barrier_seq)
        self._barrier_seq += 1
        if self.spec.group_size == 1:
            return
        self._wait_call("daskangel_group_barrier", seq=seq, rank=self.spec.rank, **self._where())

    def job_barrier(self, seq: int, *, wait: bool = True) -> PendingBarrier:
        """Barrier ``seq`` of every task of the job (all groups, finished ones excepted).

        ``wait=False`` enters the barrier and returns at once: the returned
        :class:`PendingBarrier`'s ``wait()`` blocks until every task has entered it,
        so the round trip overlaps the caller's work (e.g. "every task has read the
        model of this clock" before the first write of the clock is pushed).
        ``seq`` is the caller's to choose (e.g. the clock); every task must use the
        same sequence.
        """
        b = self._binding
        kw = {"job": self.spec.job, "seq": int(seq), "task": self.spec.task, "epoch": self.epoch}
        pending = PendingBarrier(self, b.submit(lambda: b.scheduler.daskangel_job_barrier(**kw)))
        if wait:
            pending.wait()
        return pending

    def send(self, commands: Sequence[Any] | Mapping[int, Any]) -> None:
        """Leader only: post this round's command for every rank (itself included)."""
        if self.spec.rank != 0:
            raise SyncError(
                f"send: only the group leader (rank 0) sends; this is rank {self.spec.rank}"
            )
        size = self.spec.group_size
        if isinstance(commands, Mapping):
            missing = [r for r in range(size) if r not in commands]
            if missing:
                raise InvalidArgumentError(f"commands: no command for ranks {missing}")
            cmds = [commands[r] for r in range(size)]
        else:
            cmds = list(commands)
            if len(cmds) != size:
                raise InvalidArgumentError(
                    f"commands: expected {size} (one per rank), got {len(cmds)}"
                )
        self._call(
            "daskangel_group_send", seq=self._seq(self._mail_seq), commands=cmds, **self._where()
        )

    def receive(self) -> Any:
        """Wait for the leader's command to this task for the current round."""
        seq = self._seq(self._mail_seq)
        r = self._wait_call("daskangel_group_recv", seq=seq, rank=self.spec.rank, **self._where())
        self._received = seq
        return r["payload"]

    def ack(self, payload: Any = None) -> None:
        """Report this round done (with an optional plain-value payload for the leader)."""
        seq = self._seq(self._mail_seq)
        if self._received != seq:
            raise SyncError("ack: call receive() for this round first")
        self._call(
            "daskangel_group_ack", seq=seq, rank=self.spec.rank, payload=payload, **self._where()
        )
        self._mail_seq += 1

    def wait_acks(self) -> list[Any]:
        """Leader only: wait for every member's ack of the round just acknowledged."""
        if self.spec.rank != 0:
            raise SyncError("wait_acks: only the group leader (rank 0) collects acks")
        if self._mail_seq == 0 or self._seq_clock != self._clock:
            raise SyncError("wait_acks: ack() this round's own command first")
        r = self._wait_call(
            "daskangel_group_acks", seq=self._seq(self._mail_seq - 1), **self._where()
        )
        return list(r["acks"])

    def round_robin(self, n_rounds: int | None = None) -> Iterator[int]:
        """Angel's rotation: in round ``r`` rank ``k`` works on slice ``(k + r) % size``.

        Yields this member's slice index each round; between rounds the leader
        waits for every member's acknowledgement (BSP inside the group).
        """
        size = self.spec.group_size
        rounds = size if n_rounds is None else n_rounds
        for r in range(rounds):
            if self.spec.rank == 0:
                self.send([(k + r) % size for k in range(size)])
            s = self.receive()
            yield int(s)
            self.ack(s)
            if self.spec.rank == 0:
                self.wait_acks()
