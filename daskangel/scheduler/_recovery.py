"""Recovery of lost blocks: the recovery half of
:class:`~daskangel.scheduler._snapshots.SnapshotService`.

When a worker holding PS blocks is lost, the registry marks its blocks lost and
calls :meth:`RecoveryMixin.remove_worker`.  With ``recovery="continue"`` the lost
blocks are rebuilt on surviving servers from the newest snapshot (one recovery
task per context, retried ``daskangel.recovery.attempts`` times, every
``daskangel.recovery.retry-interval``); with ``recovery="rollback"`` and a training
job running, the job is stopped and the driver asks for :meth:`rollback`, which
restores every array of the context and rewinds the job's clocks.

State (on the service):

* ``_recovering: {asyncio.Task}`` running recoveries, each named after its context;
* ``fences: {ctx_id: {job: run}}`` the run each rolled-back job restarted in: every
  server of the context refuses the writes of the job's older runs (a rollback
  fences the servers before it restores anything; a joining worker's servers
  are fenced as they come).

.. warning::
   ``recovery="continue"`` rebuilds only the lost blocks, from the newest snapshot:
   they go back to that snapshot's clock while the surviving blocks keep every later
   write. Use ``recovery="rollback"`` for a state that is consistent as a whole.

Example
-------
::

    lost = await scheduler.daskangel_wait_recovered(ctx="c1", timeout=30)
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from .. import config
from ..errors import SnapshotError
from ._job import next_run
from ._placement import place_blocks

if TYPE_CHECKING:
    from distributed.scheduler import Scheduler

    from ._registry import ArrayRegistry

__all__ = ["RecoveryMixin"]

logger = logging.getLogger(__name__)
ServerId = tuple[str, int]


class RecoveryMixin:
    """Rebuilds and rollbacks for :class:`SnapshotService` (which provides the
    attributes below)."""

    scheduler: Scheduler
    registry: ArrayRegistry
    policies: dict[str, Any]  # {ctx_id: _snapshots.Policy}
    latest: dict[str, dict[str, Any]]
    cuts: dict[str, dict[str, Any]]
    leaving: set[str]
    clocks: Any
    lifecycle: Any
    _recovering: set[asyncio.Task[Any]]
    fences: dict[str, dict[str, int]]  # {ctx_id: {job: run}} runs of rolled-back jobs

    if TYPE_CHECKING:  # provided by SnapshotService and RestoreMixin

        def _lock(self, ctx: str) -> asyncio.Lock: ...

        def _level(self) -> int: ...

        async def _call(self, ctx: str, server: ServerId, op: str, **kwargs: Any) -> Any: ...

        restore: Callable[..., Awaitable[dict[str, Any]]]  # SnapshotService.restore

    async def wait_recovered(self, ctx: str, timeout: float) -> list[str]:
        """Wait until no recovery of this context runs; return arrays still lost."""
        tasks = [t for t in self._recovering if t.get_name() == ctx]
        if tasks:
            await asyncio.wait(tasks, timeout=timeout)
        return sorted(
            n for n, m in self.registry.arrays.items() if m["ctx"] == ctx and m.get("lost")
        )

    def remove_worker(self, worker: str) -> None:
        """Called after the registry marked blocks lost: rebuild them if we can.

        In ``rollback`` mode with a training job running, the job is stopped first
        and the driver asks for the restore (:meth:`rollback`) once every task
        has ended, so no late write lands on the restored state.
        """
        if self.lifecycle is not None and self.lifecycle.quiet:
            return  # the cluster is closing: no worker to rebuild anything on
        task = asyncio.ensure_future(self._release_origin(worker))
        self._recovering.add(task)
        task.add_done_callback(self._recovering.discard)
        for ctx, policy in list(self.policies.items()):
            lost = self._lost(ctx)
            if not lost:
                continue
            snap = self.latest.get(ctx)
            if snap is None:
                why = (
                    "there is no snapshot to rebuild them from (the PSContext has no snapshot= URL)"
                    if policy.url is None
                    else "there is no snapshot to rebuild them from (none was taken yet "
                    f"under {policy.url})"
                )
                for n in lost:
                    self.registry.arrays[n]["recovery_note"] = why
                continue
            jobs = self.clocks.running_jobs(ctx) if self.clocks is not None else []
            if policy.recovery == "rollback" and jobs:
                for n in lost:
                    self.registry.arrays[n]["recovery_error"] = (
                        "the training job is rolling back to the newest snapshot"
                    )
                for j in jobs:
                    self.clocks.request_rollback(j.id, f"worker {worker} was lost")
                self.cuts.pop(ctx, None)
                continue
            self.kick(ctx)

    def add_worker(self, worker: str) -> None:
        """A worker joined (the registry already gave it servers): they get the fences
        of their contexts' rolled-back jobs; contexts whose lost blocks wait for a
        server, or whose rebuild failed, try again."""
        for ctx in self.fences:
            new = [(str(s[0]), int(s[1])) for s in self.registry.ctx_servers.get(ctx, [])]
            new = [s for s in new if s[0] == worker]
            if new:
                task = asyncio.ensure_future(self._fence(ctx, new))
                self._recovering.add(task)
                task.add_done_callback(self._recovering.discard)
        for ctx in list(self.policies):
            if self._lost(ctx) and ctx in self.latest:
                self.kick(ctx)

    async def _fence(self, ctx: str, servers: list[ServerId]) -> None:
        """Tell ``servers`` the context's fences (``{job: run}``): each refuses the
        writes of runs a rollback abandoned.  A server that does not answer within
        ``daskangel.client.connect-timeout`` is being lost (its blocks are rebuilt)."""
        fences = self.fences.get(ctx, {})
        calls = [
            self._call(ctx, s, "fence", job=j, epoch=e) for s in servers for j, e in fences.items()
        ]
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(
                asyncio.gather(*calls, return_exceptions=True),
                config.get_seconds("daskangel.client.connect-timeout"),
            )

    async def _release_origin(self, worker: str) -> None:
        """Every server still running aborts the two-phase psf updates ``worker``
        prepared: their commit cannot come.  Before, under ``recovery="continue"``
        (no run is fenced there) a task lost between ``psf_prepare`` and
        ``psf_commit`` left its blocks on the surviving servers held, and every write
        to them, the restarted task's and its partners', waited for
        ``daskangel.ops.prepare-timeout``."""
        calls = [
            self._call(ctx, (str(s[0]), int(s[1])), "release_origin", worker=worker)
            for ctx, servers in list(self.registry.ctx_servers.items())
            for s in servers
            if s[0] != worker
        ]
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(
                asyncio.gather(*calls, return_exceptions=True),
                config.get_seconds("daskangel.client.connect-timeout"),
            )

    def _lost(self, ctx: str) -> list[str]:
        return [n for n, m in self.registry.arrays.items() if m["ctx"] == ctx and m.get("lost")]

    def kick(self, ctx: str) -> None:
        """Rebuild the lost blocks of ``ctx`` (one recovery task per context, which
        goes on until nothing is lost, retrying failures)."""
        for n in self._lost(ctx):
            m = self.registry.arrays[n]
            m["recovering"] = True
            m.pop("recovery_error", None)
        self.registry.notify()
        if any(t.get_name() == ctx and not t.done() for t in self._recovering):
            return  # the running task sees the new losses on its next pass
        task = asyncio.ensure_future(self._recovery_loop(ctx))
        task.set_name(ctx)
        self._recovering.add(task)
        task.add_done_callback(self._recovering.discard)

    async def _recovery_loop(self, ctx: str) -> None:
        failures = 0
        try:
            while True:
                names = self._lost(ctx)
                policy = self.policies.get(ctx)
                snap = self.latest.get(ctx)
                if not names or policy is None or snap is None:
                    return
                servers = self.registry.adopt(ctx, exclude=self.leaving)
                if not [s for s in servers if s[0] not in self.leaving]:
                    for n in names:  # readers wait (daskangel.client.recovery-wait)
                        self.registry.arrays[n]["recovery_note"] = (
                            "no live worker to rebuild them on yet (waiting for one to join)"
                        )
                    return
                try:
                    await self._recover_once(ctx, policy)
                    failures = 0
                except Exception as e:  # noqa: BLE001 - retried, then reported
                    failures += 1
                    attempts = int(config.get("daskangel.recovery.attempts"))
                    logger.warning(
                        "daskangel: rebuilding %s of %s failed (attempt %d of %d): %r",
                        names,
                        ctx,
                        failures,
                        attempts,
                        e,
                    )
                    if failures >= attempts:
                        for n in names:
                            m = self.registry.arrays.get(n)
                            if m is not None:
                                m.pop("recovering", None)
                                m["recovery_error"] = repr(e)
                        return
                    await asyncio.sleep(config.get_seconds("daskangel.recovery.retry-interval"))
        finally:
            self.registry.notify()

    async def _recover(
        self, ctx: str, policy: Any, job: str | None = None
    ) -> dict[str, Any] | None:
        """One rebuild (used by :meth:`rollback`); returns the snapshot it restored,
        or ``None`` after a failure, which is recorded on the arrays."""
        names = self._lost(ctx)
        try:
            return await self._recover_once(ctx, policy, job)
        except Exception as e:
            if self._level() == logging.INFO:  # the survivors are closing too
                logger.info("daskangel: no recovery of %s: the cluster is closing", names)
            else:
                logger.error("daskangel: recovery of %s failed: %s", names, e, exc_info=True)
            for n in names:
                if n in self.registry.arrays:
                    self.registry.arrays[n].pop("recovering", None)
                    self.registry.arrays[n]["recovery_error"] = repr(e)
            return None
        finally:
            self.registry.notify()

    async def _recover_once(self, ctx: str, policy: Any, job: str | None = None) -> dict[str, Any]:
        """Rebuild from the newest snapshot (``job``: one of that job's clocks); return it."""
        # under the context's lock: no hand-off or rebalance moves a block between
        # its restore being staged and committed (it would land where no route goes).
        # The snapshot is chosen under it too: one that finished while this waited for
        # the lock is the newest, and may have pruned the one that was newest before
        # (a rollback point is removed once a newer snapshot is complete)
        async with self._lock(ctx):
            snap = self._newest(ctx, job)
            await self._rebuild(ctx, policy, snap)
            return snap

    def _newest(self, ctx: str, job: str | None = None) -> dict[str, Any]:
        """The newest complete snapshot of ``ctx`` (with ``job``: taken by that job at a
        clock, as a rollback needs); :class:`SnapshotError` if there is none."""
        snap = self.latest.get(ctx)
        if snap is None:
            raise SnapshotError(f"recovery: context {ctx!r} has no snapshot to rebuild from")
        if job is not None and (snap.get("job") not in (job, None) or snap.get("clock") is None):
            raise SnapshotError(
                f"rollback: the newest snapshot ({snap['version']}) was not taken by job {job!r}"
            )
        return snap

    async def _rebuild(self, ctx: str, policy: Any, snap: dict[str, Any]) -> None:
        names = self._lost(ctx)
        load = self.registry.load()
        servers = [s for s in self.registry.ctx_servers[ctx] if s[0] not in self.leaving]
        if not servers:
            raise SnapshotError(f"recovery: PSContext {ctx!r} has no live PS server")
        targets: dict[str, list[list[Any]]] = {}
        blocks: dict[str, list[int]] = {}
        # {(block servers before the loss, lost blocks): new servers}: arrays that
        # were co-partitioned (psfs, optimiser state) move their blocks together
        moved: dict[tuple[Any, ...], list[ServerId]] = {}
        for n in names:
            m = self.registry.arrays[n]
            lost = sorted(m["lost"])
            key = (tuple(tuple(s) for s in m["servers"]), tuple(lost))
            new = moved.get(key) or place_blocks(
                [int(m["blocks"][b]["bytes"]) for b in lost], servers, load
            )
            moved[key] = new
            tgt = [list(s) for s in m["servers"]]
            for b, s in zip(lost, new, strict=True):
                tgt[b] = [s[0], s[1]]
            targets[n], blocks[n] = tgt, lost
        if policy.recovery == "rollback":
            everything = [n for n, m in self.registry.arrays.items() if m["ctx"] == ctx]
            for n in everything:
                targets.setdefault(n, self.registry.arrays[n]["servers"])
            await self.restore(ctx, snap["url"], everything, None, targets)
        else:
            await self.restore(ctx, snap["url"], names, blocks, targets)
        for n in names:
            if n not in self.registry.arrays:
                continue
            m = self.registry.arrays[n]
            m["servers"] = targets[n]
            # blocks lost while this rebuild ran stay lost (the next pass takes them),
            # and so do blocks rebuilt on a server that has left since
            gone = {b for b in blocks[n] if targets[n][b][0] not in self.scheduler.workers}
            m["lost"] = sorted((set(m["lost"]) - set(blocks[n])) | gone)
            m["generation"] += 1
            if not m["lost"]:
                m.pop("recovering", None)
                m.pop("recovery_error", None)
                m.pop("recovery_note", None)
            m["recovered_from"] = snap
        logger.warning("daskangel: rebuilt %s of %s from %s", blocks, ctx, snap["url"])

    def can_roll_back(self, ctx: str | None, job: str) -> bool:
        """Whether ``ctx`` recovers by rollback and has a snapshot of ``job``'s clocks."""
        policy = self.policies.get(ctx) if ctx is not None else None
        snap = self.latest.get(ctx) if ctx is not None else None
        return (
            policy is not None
            and policy.recovery == "rollback"
            and snap is not None
            and snap.get("job") in (job, None)
            and snap.get("clock") is not None
        )

    async def rollback(self, ctx: str, job: str) -> dict[str, Any]:
        """Restore every array of ``ctx`` (lost blocks onto survivors) from the newest
        snapshot and rewind ``job``'s clocks to the snapshot's clock."""
        policy = self.policies.get(ctx)
        if self.latest.get(ctx) is None or policy is None:
            raise SnapshotError(f"rollback: context {ctx!r} has no snapshot to roll back to")
        self._newest(ctx, job)  # refused now, before anything is restored
        # a new run for the job; from here on the servers refuse the old run's writes,
        # so none still in flight (or being resent to a rebuilt block) lands on the
        # restored state
        epoch = next_run()
        self.fences.setdefault(ctx, {})[job] = epoch
        await self._fence(ctx, [(str(s[0]), int(s[1])) for s in self.registry.ctx_servers[ctx]])
        forced = dataclasses.replace(policy, recovery="rollback")
        # the snapshot is chosen once the recovery holds the context's snapshot lock
        task = asyncio.ensure_future(self._recover(ctx, forced, job))
        task.set_name(ctx)
        self._recovering.add(task)
        task.add_done_callback(self._recovering.discard)
        snap = await task
        still = sorted(
            n for n, m in self.registry.arrays.items() if m["ctx"] == ctx and m.get("lost")
        )
        if still or snap is None:
            raise SnapshotError(f"rollback: arrays {still} could not be rebuilt")
        clock = int(snap["clock"])
        self.clocks.rewind(job, clock, epoch)
        self.cuts[ctx] = {"pending": None, "last": clock, "job": job}
        return {"clock": clock, "version": snap["version"]}
