"""Snapshots and recovery, coordinated from the scheduler plugin.

:class:`SnapshotService` takes consistent snapshots of a context's arrays to zarr
(``daskangel/_snapshot_format.py`` has the layout), restores arrays from them
(``_restore.py``), takes them at the clock boundaries of training jobs
(``_clock_snapshots.py``: the cut protocol) and rebuilds the blocks of a lost
server on surviving ones (``_recovery.py``); each part is a mixin of this class.

State:

* ``policies: {ctx_id: Policy}`` where and how often to snapshot, recovery mode;
* ``latest: {ctx_id: {"url", "version", "clock"}}`` the newest complete snapshot;
* ``_locks: {ctx_id: asyncio.Lock}`` one snapshot or restore at a time.

Handlers: ``daskangel_snapshot_config``, ``daskangel_snapshot``,
``daskangel_restore``, ``daskangel_snapshot_info``, ``daskangel_wait_recovered``,
``daskangel_rollback``.

.. warning::
   A snapshot without a clock (``ps.snapshot()`` outside training, or under
   ``ASP``) is best effort: every server starts its cut when the request reaches
   it, so a write racing with the start may be in some blocks and not others.
   Snapshots at a clock ``t`` (BSP/SSP training) are exact: they hold every write
   tagged with a clock ``< t`` (every task's first ``t`` clocks) and none after.

Example
-------
::

    await scheduler.daskangel_snapshot_config(ctx="c1", url="/tmp/ckpt", keep=3)
    info = await scheduler.daskangel_snapshot(ctx="c1")
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import dask.config

from .. import _snapshot_format as fmt
from .. import config
from ..errors import (
    ContextClosedError,
    InvalidArgumentError,
    SnapshotAbandonedError,
    SnapshotError,
)
from ._clock_snapshots import ClockSnapshotMixin
from ._recovery import RecoveryMixin
from ._restore import RestoreMixin

if TYPE_CHECKING:
    from distributed.scheduler import Scheduler

    from ._registry import ArrayRegistry

__all__ = ["Policy", "SnapshotService"]

logger = logging.getLogger(__name__)
ServerId = tuple[str, int]
RECOVERY_MODES = ("continue", "rollback")


@dataclass(frozen=True, slots=True)
class Policy:
    """Where and how often a context snapshots, and how it recovers."""

    url: str | None
    every_clocks: int | None
    every_seconds: float | None
    keep: int
    recovery: str


class SnapshotService(ClockSnapshotMixin, RestoreMixin, RecoveryMixin):
    """Consistent snapshots, restores and recovery of lost blocks."""

    def __init__(self, scheduler: Scheduler, registry: ArrayRegistry) -> None:
        self.scheduler = scheduler
        self.registry = registry
        self.policies: dict[str, Policy] = {}
        self.latest: dict[str, dict[str, Any]] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._timers: dict[str, asyncio.Task[None]] = {}
        self._recovering: set[asyncio.Task[Any]] = set()
        self.fences: dict[str, dict[str, int]] = {}  # {ctx: {job: run}} (_recovery: fences)
        # {ctx_id: {"pending": clock of a begun cut or None, "last": last snapshot clock,
        #           "job": job id}} clock-driven snapshots of training jobs
        self.cuts: dict[str, dict[str, Any]] = {}
        self._writing: set[asyncio.Task[Any]] = set()
        # {array name: futures of the snapshots writing it now}: a drop waits for them
        self._inflight: dict[str, list[asyncio.Future[None]]] = {}
        registry.before_drop.append(self.settle)
        # workers being handed off (set by the plugin): no block is rebuilt there
        self.leaving: set[str] = set()
        # the clock service (set by the plugin): running jobs, rollbacks
        self.clocks: Any = None
        # the lifecycle service (set by the plugin): is the cluster shutting down?
        self.lifecycle: Any = None
        scheduler.handlers.update(
            {
                "daskangel_snapshot_config": self.configure,
                "daskangel_snapshot": self.snapshot,
                "daskangel_restore": self.restore,
                "daskangel_snapshot_info": self.info,
                "daskangel_wait_recovered": self.wait_recovered,
                "daskangel_rollback": self.rollback,
            }
        )

    # -- configuration ----------------------------------------------------------

    def configure(
        self,
        ctx: str,
        url: str | None = None,
        every_clocks: int | None = None,
        every_seconds: float | None = None,
        keep: int = 2,
        recovery: str = "continue",
    ) -> None:
        if recovery not in RECOVERY_MODES:
            raise InvalidArgumentError(
                f"recovery: expected one of {RECOVERY_MODES}, got {recovery!r}"
            )
        if keep < 1:
            raise InvalidArgumentError(f"keep: expected >= 1 snapshots to keep, got {keep}")
        self.policies[ctx] = Policy(url, every_clocks, every_seconds, keep, recovery)
        if url is not None:
            latest = fmt.read_latest(url)
            if latest is not None:  # a restarted job can recover from earlier snapshots
                try:
                    man = fmt.read_manifest(fmt.join(url, latest))
                    self.latest[ctx] = {
                        "url": fmt.join(url, latest),
                        "version": latest,
                        "clock": man.get("clock"),
                    }
                except FileNotFoundError:
                    pass
        if every_seconds:
            self._timers[ctx] = asyncio.ensure_future(self._every(ctx, every_seconds))

    async def _every(self, ctx: str, seconds: float) -> None:
        while ctx in self.policies:
            await asyncio.sleep(seconds)
            if ctx not in self.policies:
                return
            try:
                await self.snapshot(ctx)
            except Exception as e:  # noqa: BLE001 - a periodic snapshot must not kill the timer
                logger.log(self._level(), "daskangel: periodic snapshot of %s failed: %s", ctx, e)

    def forget(self, ctx: str) -> None:
        """The context closed: stop its timer, keep its files, drop its fences (its
        servers are gone: a joining worker has nothing of it to fence)."""
        self.policies.pop(ctx, None)
        self.latest.pop(ctx, None)
        self.fences.pop(ctx, None)
        timer = self._timers.pop(ctx, None)
        if timer is not None:
            timer.cancel()

    def info(self, ctx: str) -> dict[str, Any] | None:
        return self.latest.get(ctx)

    def _lock(self, ctx: str) -> asyncio.Lock:
        return self._locks.setdefault(ctx, asyncio.Lock())

    async def settle(self, name: str) -> None:
        """Called before the blocks of array ``name`` are freed: wait (at most
        ``daskangel.snapshot.drop-wait``) for the snapshots writing it to finish.

        A snapshot still writing after that is abandoned when it meets the freed
        blocks: its version is removed, so it is either complete or absent.
        """
        running = [f for f in self._inflight.get(name, ()) if not f.done()]
        if not running:
            return
        try:
            await asyncio.wait_for(
                asyncio.shield(asyncio.gather(*running, return_exceptions=True)),
                config.get_seconds("daskangel.snapshot.drop-wait"),
            )
        except TimeoutError:
            logger.info("daskangel: array %s dropped while a snapshot writes it", name)

    @contextlib.contextmanager
    def _writing_arrays(self, names: list[str]) -> Any:
        """Mark ``names`` as being written by one snapshot for :meth:`settle`."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        for n in names:
            self._inflight.setdefault(n, []).append(done)
        try:
            yield
        finally:
            done.set_result(None)
            for n in names:
                futs = self._inflight.get(n, [])
                if done in futs:
                    futs.remove(done)
                if not futs:
                    self._inflight.pop(n, None)

    # -- taking snapshots ----------------------------------------------------------

    def _arrays(self, ctx: str, names: list[str] | None) -> dict[str, dict[str, Any]]:
        if ctx not in self.registry.ctx_servers:
            raise ContextClosedError(f"ctx: PSContext {ctx!r} is not open")
        own = {n: m for n, m in self.registry.arrays.items() if m["ctx"] == ctx}
        if names is not None:
            missing = sorted(set(names) - set(own))
            if missing:
                raise SnapshotError(f"arrays: not arrays of this context: {missing}")
            own = {n: own[n] for n in names}
        return own

    def _level(self) -> int:
        """WARNING for a failed snapshot, INFO while the cluster itself is closing."""
        closing = self.lifecycle is not None and self.lifecycle.closing()
        return logging.INFO if closing else logging.WARNING

    def _servers(self, ctx: str) -> list[ServerId]:
        return sorted(
            {
                (s[0], int(s[1]))
                for m in self.registry.arrays.values()
                if m["ctx"] == ctx
                for s in m["servers"]
            }
        )

    async def snapshot(
        self,
        ctx: str,
        clock: int | None = None,
        url: str | None = None,
        arrays: list[str] | None = None,
        cut_begun: bool = False,
        job: str | None = None,
        cut: str | None = None,
        rollback_point: bool = False,
    ) -> dict[str, Any]:
        """Write a snapshot; with ``url`` a one-off copy there (``ps.save``), else a
        new version in the context's snapshot directory.  Returns its summary.

        ``cut_begun``: the servers already started the cut (clock-driven snapshots).
        ``rollback_point``: the snapshot a training job takes as it starts, so a
        rollback has somewhere to go; it does not count against ``keep`` and is
        removed once a newer snapshot is complete (``fmt.prune_versions``).
        """
        policy = self.policies.get(ctx)
        root = url if url is not None else (policy.url if policy else None)
        if root is None:
            raise SnapshotError("snapshot: this PSContext has no snapshot= URL; pass one")
        async with self._lock(ctx):
            metas = self._arrays(ctx, arrays)
            lost = {n: m["lost"] for n, m in metas.items() if m.get("lost")}
            if lost:
                raise SnapshotError(f"snapshot: arrays have blocks on lost servers: {lost}")
            with self._writing_arrays(list(metas)):
                return await self._take(
                    ctx, clock, url, root, policy, metas, cut_begun, job, cut, rollback_point
                )

    async def _take(
        self,
        ctx: str,
        clock: int | None,
        url: str | None,
        root: str,
        policy: Policy | None,
        metas: dict[str, dict[str, Any]],
        cut_begun: bool,
        job: str | None,
        cut: str | None,
        rollback_point: bool = False,
    ) -> dict[str, Any]:
        """Write one snapshot of ``metas`` (under the context's snapshot lock)."""
        versioned = url is None
        if versioned:
            old = await asyncio.to_thread(fmt.list_versions, root)
            number = 1 + max((int(v[1:7]) for v in old), default=0)
            version = fmt.new_version_name(number)
            target = fmt.join(root, version)
        else:
            target = root
        storage = await asyncio.to_thread(fmt.create_arrays, target, metas)
        servers = sorted({(s[0], int(s[1])) for m in metas.values() for s in m["servers"]})
        if not cut_begun:
            if self.cuts.get(ctx, {}).get("pending") is not None:
                raise SnapshotError(
                    f"snapshot: a snapshot of training at clock {self.cuts[ctx]['pending']} "
                    "is under way; try again when it is written"
                )
            cut = uuid.uuid4().hex
            await asyncio.gather(
                *(self._call(ctx, s, "cut_begin", clock=clock, cut=cut) for s in servers)
            )
        try:
            checksums = {}
            for name, m in metas.items():
                checksums[name] = await self._write_array(ctx, target, name, m, storage[name])
        except Exception as e:
            gone = [n for n, m in metas.items() if not self._same_array(n, m)]
            if not gone:
                raise
            # an array was dropped while this wrote it (past daskangel.snapshot.drop-wait):
            # abandon the snapshot, leaving no half-written version behind
            if versioned:
                await asyncio.to_thread(fmt.remove_version, root, version)
            raise SnapshotAbandonedError(
                f"snapshot: abandoned, arrays {gone} were dropped while it wrote them"
            ) from e
        finally:
            await asyncio.gather(
                *(self._call(ctx, s, "cut_end", cut=cut) for s in servers),
                return_exceptions=True,
            )
        _fail_at("chunks")
        running = self.clocks.jobs.get(job) if job and self.clocks is not None else None
        manifest = {
            "format": fmt.FORMAT,
            "clock": clock,
            "job": job,
            "rollback_point": bool(rollback_point),
            # what train(..., resume=url) checks and continues from
            # (with the arrays in creation order: a model's resumed fit matches its own)
            "job_state": (
                {**running.state(), "arrays": list(metas)} if running is not None else None
            ),
            "created": datetime.datetime.now(datetime.UTC).isoformat(),
            "arrays": {
                n: {
                    **{k: m[k] for k in ("shape", "ndim", "dtype", "sparse", "layout", "init")},
                    "storage": storage[n],
                    "blocks": m["blocks"],
                    "checksums": checksums[n],
                }
                for n, m in metas.items()
            },
        }
        await asyncio.to_thread(fmt.write_manifest, target, manifest)
        _fail_at("manifest")
        if not versioned:
            return {"url": target, "clock": clock, "arrays": sorted(metas)}
        await asyncio.to_thread(fmt.write_latest, root, version)
        self.latest[ctx] = {"url": target, "version": version, "clock": clock, "job": job}
        await asyncio.to_thread(fmt.prune_versions, root, version, policy.keep if policy else 2)
        return {"url": target, "version": version, "clock": clock, "arrays": sorted(metas)}

    def _same_array(self, name: str, meta: dict[str, Any]) -> bool:
        """Whether ``name`` is still the array ``meta`` describes (not dropped)."""
        return self.registry.arrays.get(name) is meta

    async def _write_array(
        self, ctx: str, target: str, name: str, meta: dict[str, Any], storage: str
    ) -> dict[str, int]:
        per_server: dict[ServerId, list[dict[str, Any]]] = {}
        for spec, s in zip(meta["blocks"], meta["servers"], strict=True):
            per_server.setdefault((s[0], int(s[1])), []).append(spec)
        results = await asyncio.gather(
            *(
                self._call(
                    ctx,
                    s,
                    "snapshot_write",
                    url=target,
                    array=name,
                    storage=storage,
                    ndim=meta["ndim"],
                    parts=parts,
                )
                for s, parts in per_server.items()
            )
        )
        out: dict[str, int] = {}
        for parts, crcs in zip(per_server.values(), results, strict=True):
            out.update({str(p["block"]): int(c) for p, c in zip(parts, crcs, strict=True)})
        return out

    # -- helpers ----------------------------------------------------------------------

    async def _call(self, ctx: str, server: ServerId, op: str, **kwargs: Any) -> Any:
        transport = self.registry.ctx_transport.get(ctx, "handlers")
        return await self.registry.call(server, op, transport, **kwargs)


def _fail_at(stage: str) -> None:
    """Test hook ``daskangel.snapshot.fail-at``: stop a snapshot after a stage
    (``"chunks"`` written, ``"manifest"`` written) as a crash of the coordinator
    would, leaving the files as they are."""
    if dask.config.get("daskangel.snapshot.fail-at", None) == stage:
        raise SnapshotError(
            f"snapshot: injected failure after {stage} (daskangel.snapshot.fail-at)"
        )
