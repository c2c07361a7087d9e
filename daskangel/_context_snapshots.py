"""Snapshots, saved models and recovery of a context: :class:`SnapshotMixin` of
:class:`~daskangel.PSContext`.

``snapshot`` / ``save`` / ``load`` write and read zarr stores (through the
scheduler plugin's snapshot service and :mod:`daskangel.persist`);
``wait_until_recovered`` waits for the rebuilding of lost servers' blocks and
``rebalance`` moves blocks between the context's servers.  ``_every`` reads
``snapshot_every`` and ``_check_shared_url`` refuses a ``memory://`` store that
the workers' processes could not share; the context's constructor uses both.

Example
-------
::

    ps.save("file://./model")               # a zarr group, readable with zarr alone
    ps.load("file://./model", rename={"w": "w0"})
    ps.wait_until_recovered()               # after a worker was lost
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import numpy as np
from dask.utils import parse_timedelta
from distributed import Client

from . import config
from .errors import InvalidArgumentError, InvalidTypeError
from .persist import load_into

if TYPE_CHECKING:
    from .persist import _Context
    from .psarray import PSArray

__all__ = ["SnapshotMixin"]


class SnapshotMixin:
    """Snapshots, saving, loading and recovery of :class:`~daskangel.PSContext`
    (which provides the attributes below)."""

    client: Client
    id: str
    _scheduler: Any

    if TYPE_CHECKING:  # provided by PSContext

        def _check_open(self) -> None: ...

        def refresh(self) -> None: ...

    def snapshot(self, arrays: list[str] | None = None) -> dict[str, Any]:
        """Take a snapshot now into the ``snapshot=`` directory; return its summary.

        .. warning::
           Outside training this cut is best effort: a write racing with it may be
           in some blocks and not in others.  Snapshots taken by training at a
           clock (BSP/SSP) are exact.
        """
        self._check_open()
        return dict(
            self.client.sync(self._scheduler.daskangel_snapshot, ctx=self.id, arrays=arrays)
        )

    def save(self, url: str, arrays: list[str] | None = None) -> dict[str, Any]:
        """Save arrays (default: all of this context's) as a zarr group at ``url``.

        The store is readable with plain ``zarr`` / ``dask.array.from_zarr`` (see
        docs/snapshot-format.md) and by :meth:`load` / :func:`daskangel.load_arrays`.
        """
        self._check_open()
        _check_shared_url(self.client, url, "url")
        return dict(
            self.client.sync(
                self._scheduler.daskangel_snapshot, ctx=self.id, url=url, arrays=arrays
            )
        )

    def load(
        self, url: str, arrays: list[str] | None = None, rename: dict[str, str] | None = None
    ) -> dict[str, PSArray]:
        """Load a saved model or a snapshot directory's newest snapshot.

        Missing arrays are created with their stored layout; existing ones must
        match in shape, dtype and partitioning.  Nothing changes if anything does
        not match or a block fails its checksum.  ``rename`` (``{stored name:
        name here}``) loads arrays under other names: stored arrays that shared
        a layout are created co-placed again, whatever their names.
        """
        self._check_open()
        _check_shared_url(self.client, url, "url")
        # a PSContext, this mixin's one user, is the persist._Context that loading needs
        return load_into(cast("_Context", self), url, arrays, rename)

    def wait_until_recovered(self, timeout: float | None = None) -> list[str]:
        """Block until the rebuilding of lost servers' blocks has finished.

        Returns the arrays that still have lost blocks (none when a snapshot
        covered them).  In ``recovery="rollback"`` mode, reads made before this
        returns may still see surviving blocks as they were before the rollback.
        """
        wait = config.get_seconds("daskangel.client.recovery-wait") if timeout is None else timeout
        self.refresh()
        return list(
            self.client.sync(self._scheduler.daskangel_wait_recovered, ctx=self.id, timeout=wait)
        )

    def rebalance(self) -> dict[str, Any]:
        """Move blocks so that this context's servers hold about the same bytes
        (after workers joined, say), online: gets and increments made meanwhile
        wait for a moving block and are neither lost nor applied twice.

        Returns ``{"blocks", "bytes", "seconds"}`` moved, and ``"deferred"``: True
        when a rebuild of lost blocks was running or due, and nothing moved (call
        again after it).  Raises
        :class:`~daskangel.errors.InvalidStateError` while another rebalance or a
        hand-off of leaving workers runs.  With ``daskangel.ps.rebalance-on-join``
        (the default) a context running servers on every worker rebalances by
        itself when workers join.
        """
        self._check_open()
        out = dict(self.client.sync(self._scheduler.daskangel_rebalance, ctx=self.id))
        self.refresh()
        return out


def _check_shared_url(client: Client, url: str | None, arg: str) -> None:
    """Refuse an fsspec ``memory://`` URL when the workers run in processes of their own.

    A memory filesystem lives in one process: each worker would write its blocks
    into its own, and nothing written could be read back by anyone else.
    """
    if not isinstance(url, str) or not url.startswith("memory://"):
        return
    from ._compat import workers_info

    if any(w.get("nanny") for w in workers_info(client).values()):
        raise InvalidArgumentError(
            f"{arg}: {url!r} is an fsspec memory:// filesystem, which lives inside one "
            "process, and this cluster's workers run in processes of their own (each "
            "would write to its own memory, and nothing could be read back); use a "
            "directory (a local path) or an object store (s3://, gs://, ...), or "
            "memory:// only with LocalCluster(processes=False)"
        )


def _every(value: int | float | str | None) -> tuple[int | None, float | None]:
    """``snapshot_every`` as ``(clocks, seconds)``."""
    if value is None:
        return None, None
    if isinstance(value, bool):
        raise InvalidTypeError(f"snapshot_every: expected clocks (int) or seconds, got {value!r}")
    if isinstance(value, (int, np.integer)):
        if value < 1:
            raise InvalidArgumentError(f"snapshot_every: expected >= 1 clocks, got {value}")
        return int(value), None
    seconds = parse_timedelta(value, default="seconds")
    if seconds is None or seconds <= 0:
        raise InvalidArgumentError(f"snapshot_every: expected a positive duration, got {value!r}")
    return None, float(seconds)
