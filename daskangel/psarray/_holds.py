"""Blocks held by prepared two-phase writes, and the writes that wait for them.

A multi-server psf update first *prepares* on every server: it computes and
stages its changes and holds the blocks it writes (:meth:`Holds.reserve`), then
commits or aborts (:meth:`Holds.release`).  While a block is held, ops that
write it (registered with ``server_op(name, writes=True)``, listed in
:data:`WRITE_OPS`) wait in :meth:`Holds.wait_unreserved`, so a plain increment
arriving between prepare and commit is applied after the commit instead of
being overwritten by it.  Reads never wait.  A hold whose commit does not come
within ``daskangel.ops.prepare-timeout`` expires.

Example
-------
>>> h = Holds(); h.init_holds()
>>> h.reserve("t1", [("w", 0)], staged=None, timeout=60.0)
>>> h.reserved
{('w', 0): 't1'}
>>> h.release("t1").keys
(('w', 0),)
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from typing import Any

from ..errors import BlockBusyError

__all__ = ["WRITE_OPS", "Holds", "Prepared", "written_keys"]

# names of the ops that write blocks: they wait while a prepared two-phase write
# holds one of their blocks
WRITE_OPS: set[str] = set()


@dataclass(frozen=True, slots=True)
class Prepared:
    """Staged changes of a prepared two-phase write, held until commit or abort."""

    deadline: float
    keys: tuple[tuple[str, int], ...]
    staged: Any
    # the preparing task's run ``[job, epoch]`` (None: not a training task's write):
    # a rollback's fence aborts the transactions of the runs it abandons
    fence: tuple[str, int] | None = None
    # the worker that prepared it (None: a client): if that worker leaves, its
    # commit cannot come, and the scheduler aborts it (``release_origin``)
    origin: str | None = None


def written_keys(kwargs: dict[str, Any]) -> list[tuple[str, int]]:
    """``(array, block)`` pairs a write op's arguments say it writes."""
    names = kwargs.get("written") or [kwargs.get("array")]
    parts = kwargs.get("parts")
    if parts is None:
        return [(str(n), -1) for n in names]  # the whole array (e.g. drop)
    return [(str(n), int(p["block"])) for n in names for p in parts]


class Holds:
    """Mixin of :class:`~daskangel.psarray._server.PSServer`: holds and waiting writes."""

    address: str = ""
    index: int = 0

    def init_holds(self) -> None:
        # {(array_name, block_id): txn_id}: blocks held by a prepared two-phase write
        self.reserved: dict[tuple[str, int], str] = {}
        # {txn_id: Prepared}: staged changes waiting for their commit or abort
        self.txns: dict[str, Prepared] = {}
        # workers that left (the scheduler said so): a prepare of theirs still in
        # flight is refused, as its commit cannot come
        self.departed: set[str] = set()
        self._cond: asyncio.Condition | None = None

    def reserve(
        self,
        txn: str,
        keys: list[tuple[str, int]],
        staged: Any,
        timeout: float,
        fence: list[Any] | None = None,
        origin: str | None = None,
    ) -> None:
        """Hold ``keys`` for transaction ``txn`` with its staged changes.

        Raises :class:`BlockBusyError` (and holds nothing) if another transaction
        holds one of them.  Writes to held blocks wait until :meth:`release`, or
        until ``timeout`` seconds pass, after which the transaction is dropped.
        ``fence``: the preparing task's run (:meth:`release_runs_before`);
        ``origin``: the preparing worker (:meth:`release_origin`).
        """
        self.expire()
        busy = [k for k in keys if self.reserved.get(k, txn) != txn]
        if busy:
            a, b = busy[0]
            raise BlockBusyError(
                f"block {b} of array {a!r} is held by another psf update in progress "
                f"(txn {self.reserved[busy[0]]}) on server {self.address}#{self.index}"
            )
        run = None if fence is None else (str(fence[0]), int(fence[1]))
        self.txns[txn] = Prepared(time.monotonic() + timeout, tuple(keys), staged, run, origin)
        for k in keys:
            self.reserved[k] = txn

    def release(self, txn: str) -> Prepared | None:
        """Forget transaction ``txn`` and free its blocks; its staged changes, if any."""
        p = self.txns.pop(txn, None)
        if p is not None:
            for k in p.keys:
                if self.reserved.get(k) == txn:
                    del self.reserved[k]
        return p

    def release_runs_before(self, job: str, epoch: int) -> list[str]:
        """Abort every prepared transaction of ``job`` from a run older than ``epoch``
        (a rollback's fence): their holds go and their staged changes are dropped,
        so the restarted run never waits for a commit that must not come."""
        old = [
            t
            for t, p in self.txns.items()
            if p.fence is not None and p.fence[0] == job and p.fence[1] < epoch
        ]
        for t in old:
            self.release(t)
        return old

    def release_origin(self, worker: str) -> list[str]:
        """Abort every prepared transaction of ``worker``, which left: its commit
        cannot come, and writes to the blocks it holds would wait for
        ``daskangel.ops.prepare-timeout`` (``recovery="continue"`` fences no run)."""
        self.departed.add(worker)
        gone = [t for t, p in self.txns.items() if p.origin == worker]
        for t in gone:
            self.release(t)
        return gone

    def release_blocks(self, keys: set[tuple[str, int]]) -> list[str]:
        """Abort every prepared transaction holding one of ``keys`` (blocks replaced
        by a restore: what it staged was computed on the replaced block, and its
        commit would be refused)."""
        gone = sorted({self.reserved[k] for k in keys if k in self.reserved})
        for t in gone:
            self.release(t)
        return gone

    def expire(self, now: float | None = None) -> None:
        """Drop prepared transactions whose commit did not come in time."""
        if not self.txns:
            return
        now = time.monotonic() if now is None else now
        for txn in [t for t, p in self.txns.items() if p.deadline <= now]:
            self.release(txn)

    def blocked_until(self, op: str, kwargs: dict[str, Any]) -> float | None:
        """Deadline of the earliest transaction holding a block ``op`` writes, or ``None``."""
        if op not in WRITE_OPS or not self.reserved or kwargs.get("txn_wait") is False:
            return None
        self.expire()
        own = kwargs.get("txn")
        deadline: float | None = None
        for name, block in written_keys(kwargs):
            if block < 0:
                holders = {t for (a, _), t in self.reserved.items() if a == name}
            else:
                t = self.reserved.get((name, block))
                holders = set() if t is None else {t}
            for t in holders - {own}:
                d = self.txns[t].deadline
                deadline = d if deadline is None else min(deadline, d)
        return deadline

    async def wait_unreserved(self, op: str, kwargs: dict[str, Any]) -> None:
        assert self._cond is not None
        while True:
            deadline = self.blocked_until(op, kwargs)
            if deadline is None:
                return
            # on timeout the holder has expired; blocked_until drops it
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._cond.wait(), max(0.0, deadline - time.monotonic()))
