"""Snapshots and recovery, coordinated from the scheduler plugin.

:class:`SnapshotService` takes consistent snapshots of a context's arrays to zarr
(``daskangel/_snapshot_format.py`` has the layout), restores arrays from them,
and rebuilds the blocks of a lost server on surviving ones.

State:

* ``policies: {ctx_id: Policy}`` where and how often to snapshot, recovery mode;
* ``latest: {ctx_id: {"url", "version", "clock"}}`` the newest complete snapshot;
* ``_locks: {ctx_id: asyncio.Lock}`` one snapshot or restore at a time.

Handlers: ``daskangel_snapshot_config``, ``daskangel_snapshot``,
``daskangel_restore``, ``daskangel_snapshot_info``.

.. warning::
   A snapshot without a clock (``ps.snapshot()`` outside training, or under
   ``ASP``) is best effort: every server starts its cut when the request reaches
   it, so a write racing with the start may be in some blocks and not others.
   Snapshots at a clock (BSP/SSP training) are exact: they hold every write tagged
   with a clock ``<= t`` and none after.

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
from ._placement import place_blocks

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


class SnapshotService:
    """Consistent snapshots, restores and recovery of lost blocks."""

    def __init__(self, scheduler: Scheduler, registry: ArrayRegistry) -> None:
        self.scheduler = scheduler
        self.registry = registry
        self.policies: dict[str, Policy] = {}
        self.latest: dict[str, dict[str, Any]] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._timers: dict[str, asyncio.Task[None]] = {}
        self._recovering: set[asyncio.Task[None]] = set()
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
        """The context closed: stop its timer, keep its files."""
        self.policies.pop(ctx, None)
        self.latest.pop(ctx, None)
        timer = self._timers.pop(ctx, None)
        if timer is not None:
            timer.cancel()

    def info(self, ctx: str) -> dict[str, Any] | None:
        return self.latest.get(ctx)

    async def wait_recovered(self, ctx: str, timeout: float) -> list[str]:
        """Wait until no recovery of this context runs; return arrays still lost."""
        tasks = [t for t in self._recovering if t.get_name() == ctx]
        if tasks:
            await asyncio.wait(tasks, timeout=timeout)
        return sorted(
            n for n, m in self.registry.arrays.items() if m["ctx"] == ctx and m.get("lost")
        )

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

    async def on_tick(self, job: Any, new_clock: int) -> None:
        """Called by the clock service on every tick of a job.

        Every ``every_clocks`` clocks: when the first task reaches clock ``t`` the
        servers start a cut (writes of clock ``>= t`` are after it) before that
        task goes on; when the slowest task reaches ``t`` every write of clock
        ``< t`` has arrived (``clock()`` flushes first), and the snapshot "at
        clock t" is written in the background.
        """
        policy = self.policies.get(job.ctx)
        if policy is None or not policy.every_clocks or policy.url is None:
            return
        st = self.cuts.setdefault(job.ctx, {"pending": None, "last": 0, "job": job.id})
        boundary = new_clock % policy.every_clocks == 0 and new_clock > st["last"]
        if boundary and st["pending"] is None and not self._lock(job.ctx).locked():
            # a boundary reached while the previous snapshot is still being written
            # is skipped: a server holds one cut at a time
            cut = uuid.uuid4().hex
            st.update(pending=new_clock, job=job.id, cut=cut)
            servers = self._servers(job.ctx)
            # a server that fails (or hangs) here is being lost; recovery deals with it,
            # and the task waiting for this tick must not wait for a dead server
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    asyncio.gather(
                        *(
                            self._call(job.ctx, s, "cut_begin", clock=new_clock - 1, cut=cut)
                            for s in servers
                        ),
                        return_exceptions=True,
                    ),
                    config.get_seconds("daskangel.client.connect-timeout"),
                )
        m = job.table.min_clock
        t = st["pending"]
        if t is not None and st["job"] == job.id and (m is None or m >= t):
            st.update(pending=None, last=t)
            task = asyncio.ensure_future(self._clock_snapshot(job.ctx, t, job.id, st["cut"]))
            self._writing.add(task)
            task.add_done_callback(self._writing.discard)

    async def _clock_snapshot(self, ctx: str, clock: int, job: str, cut: str) -> None:
        try:
            await self.snapshot(ctx, clock=clock, cut_begun=True, job=job, cut=cut)
        except SnapshotAbandonedError as e:  # the job freed its arrays: nothing to save
            logger.info("daskangel: snapshot of %s at clock %d: %s", ctx, clock, e)
        except Exception as e:  # noqa: BLE001 - training goes on; the next boundary retries
            logger.log(
                self._level(), "daskangel: snapshot of %s at clock %d failed: %s", ctx, clock, e
            )

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
        removed once a newer snapshot is complete (:meth:`_prune`).
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
        await asyncio.to_thread(self._prune, root, version, policy.keep if policy else 2)
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

    @staticmethod
    def _prune(root: str, current: str, keep: int) -> None:
        """Keep the newest ``keep`` versions up to ``current`` (unfinished ones
        included) but for rollback points: those older than ``current`` are
        superseded by it and removed; ``current`` itself, when it is one, is kept
        beside the ``keep`` others."""
        versions = fmt.list_versions(root)
        if current not in versions:
            return
        counted = []
        for v in versions[: versions.index(current) + 1]:
            if not _rollback_point(root, v):
                counted.append(v)
            elif v != current:
                fmt.remove_version(root, v)
        for v in counted[:-keep]:
            fmt.remove_version(root, v)

    # -- restoring ----------------------------------------------------------------------

    async def restore(
        self,
        ctx: str,
        url: str,
        arrays: list[str] | None = None,
        blocks: dict[str, list[int]] | None = None,
        targets: dict[str, list[list[Any]]] | None = None,
        rename: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """Load arrays (or some of their blocks) from a snapshot or saved model.

        Every block is read and verified on its server before any is installed,
        so a damaged or mismatching snapshot changes nothing.  ``targets`` gives,
        per array, the server of each restored block when it moves; ``rename``
        (``{array: stored name}``) loads a stored array into one of another name.
        """
        version_url, manifest = await asyncio.to_thread(fmt.resolve, url)
        metas = self._arrays(ctx, arrays)
        stored = {n: (rename or {}).get(n, n) for n in metas}
        for name, m in metas.items():
            self._check_compatible(stored[name], m, manifest, version_url)
        token = uuid.uuid4().hex
        staged: list[ServerId] = []
        try:
            for name, m in metas.items():
                info = manifest["arrays"][stored[name]]
                want = set(blocks[name]) if blocks and name in blocks else None
                servers = targets[name] if targets and name in targets else m["servers"]
                per_server: dict[ServerId, list[dict[str, Any]]] = {}
                for spec, s in zip(m["blocks"], servers, strict=True):
                    if want is None or spec["block"] in want:
                        per_server.setdefault((s[0], int(s[1])), []).append(spec)
                await asyncio.gather(
                    *(
                        self._call(
                            ctx,
                            s,
                            "restore_stage",
                            url=version_url,
                            array=name,
                            storage=info["storage"],
                            ndim=m["ndim"],
                            parts=parts,
                            checksums=info["checksums"],
                            token=token,
                            stored=stored[name],
                        )
                        for s, parts in per_server.items()
                    )
                )
                staged.extend(per_server)
        except BaseException:
            await asyncio.gather(
                *(self._call(ctx, s, "restore_abort", token=token) for s in set(staged)),
                return_exceptions=True,
            )
            raise
        await asyncio.gather(
            *(self._call(ctx, s, "restore_commit", token=token) for s in set(staged))
        )
        return {"url": version_url, "clock": manifest.get("clock"), "arrays": sorted(metas)}

    @staticmethod
    def _check_compatible(
        name: str, meta: dict[str, Any], manifest: dict[str, Any], url: str
    ) -> None:
        info = manifest["arrays"].get(name)
        if info is None:
            raise SnapshotError(
                f"snapshot {url}: has no array {name!r} (it has {sorted(manifest['arrays'])})"
            )
        for key in ("shape", "dtype", "sparse"):
            there, here = _plain(info[key]), _plain(meta[key])
            if there != here:
                raise SnapshotError(
                    f"snapshot {url}: array {name!r} has {key} {there!r} there but {here!r} here"
                )
        if _plain(info["layout"]) != _plain(meta["layout"]):
            raise SnapshotError(
                f"snapshot {url}: array {name!r} is partitioned differently there "
                f"({info['layout']}) than here ({meta['layout']}); load it into a new context"
            )

    # -- recovery -----------------------------------------------------------------------

    def remove_worker(self, worker: str) -> None:
        """Called after the registry marked blocks lost: rebuild them if we can.

        In ``rollback`` mode with a training job running, the job is stopped first
        and the driver asks for the restore (:meth:`rollback`) once every task
        has ended, so no late write lands on the restored state.
        """
        if self.lifecycle is not None and self.lifecycle.quiet:
            return  # the cluster is closing: no worker to rebuild anything on
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
        """A worker joined (the registry already gave it servers): contexts whose
        lost blocks wait for a server, or whose rebuild failed, try again."""
        for ctx in list(self.policies):
            if self._lost(ctx) and ctx in self.latest:
                self.kick(ctx)

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
                    await self._recover_once(ctx, policy, snap)
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

    async def _recover(self, ctx: str, policy: Policy, snap: dict[str, Any]) -> None:
        """One rebuild (used by :meth:`rollback`); a failure is recorded on the arrays."""
        names = self._lost(ctx)
        try:
            await self._recover_once(ctx, policy, snap)
        except Exception as e:
            if self._level() == logging.INFO:  # the survivors are closing too
                logger.info("daskangel: no recovery of %s: the cluster is closing", names)
            else:
                logger.error("daskangel: recovery of %s failed: %s", names, e, exc_info=True)
            for n in names:
                if n in self.registry.arrays:
                    self.registry.arrays[n].pop("recovering", None)
                    self.registry.arrays[n]["recovery_error"] = repr(e)
        finally:
            self.registry.notify()

    async def _recover_once(self, ctx: str, policy: Policy, snap: dict[str, Any]) -> None:
        # under the context's lock: no hand-off or rebalance moves a block between
        # its restore being staged and committed (it would land where no route goes)
        async with self._lock(ctx):
            await self._rebuild(ctx, policy, snap)

    async def _rebuild(self, ctx: str, policy: Policy, snap: dict[str, Any]) -> None:
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
        snap = self.latest.get(ctx)
        policy = self.policies.get(ctx)
        if snap is None or policy is None:
            raise SnapshotError(f"rollback: context {ctx!r} has no snapshot to roll back to")
        if snap.get("job") not in (job, None) or snap.get("clock") is None:
            raise SnapshotError(
                f"rollback: the newest snapshot ({snap['version']}) was not taken by job {job!r}"
            )
        forced = Policy(
            policy.url, policy.every_clocks, policy.every_seconds, policy.keep, "rollback"
        )
        task = asyncio.ensure_future(self._recover(ctx, forced, snap))
        task.set_name(ctx)
        self._recovering.add(task)
        task.add_done_callback(self._recovering.discard)
        await task
        still = sorted(
            n for n, m in self.registry.arrays.items() if m["ctx"] == ctx and m.get("lost")
        )
        if still:
            raise SnapshotError(f"rollback: arrays {still} could not be rebuilt")
        clock = int(snap["clock"])
        self.clocks.rewind(job, clock)
        self.cuts[ctx] = {"pending": None, "last": clock, "job": job}
        return {"clock": clock, "version": snap["version"]}

    # -- helpers ----------------------------------------------------------------------

    async def _call(self, ctx: str, server: ServerId, op: str, **kwargs: Any) -> Any:
        transport = self.registry.ctx_transport.get(ctx, "handlers")
        return await self.registry.call(server, op, transport, **kwargs)


def _rollback_point(root: str, version: str) -> bool:
    """Whether ``version`` is a job's starting snapshot (False when unfinished)."""
    try:
        return bool(fmt.read_manifest(fmt.join(root, version)).get("rollback_point"))
    except FileNotFoundError:
        return False


def _plain(x: Any) -> Any:
    """Tuples as lists, recursively (comms give tuples, JSON gives lists)."""
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    return x


def _fail_at(stage: str) -> None:
    """Test hook ``daskangel.snapshot.fail-at``: stop a snapshot after a stage
    (``"chunks"`` written, ``"manifest"`` written) as a crash of the coordinator
    would, leaving the files as they are."""
    if dask.config.get("daskangel.snapshot.fail-at", None) == stage:
        raise SnapshotError(
            f"snapshot: injected failure after {stage} (daskangel.snapshot.fail-at)"
        )
