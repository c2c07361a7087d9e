"""Snapshots at the clock boundaries of training jobs: the cut protocol of
:class:`~daskangel.scheduler._snapshots.SnapshotService`.

Every ``every_clocks`` clocks of a BSP/SSP job, a snapshot "at clock t" holds every
write tagged with a clock ``< t`` and none after:

1. when the first task reaches clock ``t``, every server of the context begins a
   cut (``cut_begin``, ``psarray/_snapshot_ops.py``) before that task goes on:
   from then on a write tagged with a clock ``>= t`` copies its block before
   changing it, so the state of clock ``< t`` stays readable;
2. when the slowest task reaches ``t``, every write of clock ``< t`` has arrived
   (``clock()`` flushes first), and the snapshot is written in the background;
3. ``cut_end`` drops the copies.

State (on the service):

* ``cuts: {ctx_id: {"pending": clock of a begun cut or None, "last": last snapshot
  clock, "job": job id, "cut": cut id}}``.

.. warning::
   A boundary reached while the previous snapshot is still being written is
   skipped (a server holds one cut at a time): under load, snapshots may be
   further apart than ``every_clocks``.

Example
-------
::

    # the clock service calls this on every tick of a job
    await snapshots.on_tick(job, new_clock=4)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from .. import config
from ..errors import SnapshotAbandonedError

__all__ = ["ClockSnapshotMixin"]

logger = logging.getLogger(__name__)
ServerId = tuple[str, int]


class ClockSnapshotMixin:
    """Clock-driven snapshots for :class:`SnapshotService` (which provides the
    attributes below)."""

    policies: dict[str, Any]  # {ctx_id: _snapshots.Policy}
    cuts: dict[str, dict[str, Any]]
    _writing: set[asyncio.Task[Any]]

    if TYPE_CHECKING:  # provided by SnapshotService

        def _lock(self, ctx: str) -> asyncio.Lock: ...

        def _level(self) -> int: ...

        def _servers(self, ctx: str) -> list[ServerId]: ...

        async def _call(self, ctx: str, server: ServerId, op: str, **kwargs: Any) -> Any: ...

        snapshot: Callable[..., Awaitable[dict[str, Any]]]  # SnapshotService.snapshot

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
