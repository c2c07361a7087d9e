"""PSContext: where the user meets the parameter server.

A context attaches to any ``distributed.Client``, installs the daskangel scheduler
plugin (the registry, later the clocks) and the PS worker plugin, chooses the PS
servers, and creates arrays on them.  Leaving the ``with`` block frees every array
it created.

Example
-------
>>> from distributed import Client, LocalCluster
>>> import daskangel as angel
>>> with LocalCluster(n_workers=2, processes=False) as cl, Client(cl) as client:
...     with angel.PSContext(client) as ps:
...         w = ps.zeros("w", shape=(8,), dtype="float64")
...         w.increment([1.0, 2.0], cols=[0, 7])
...         w.get().tolist()
[1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 2.0]
"""

from __future__ import annotations

import asyncio
import re
import uuid
import warnings
import weakref
from typing import Any, cast

import numpy as np
from dask.utils import parse_timedelta
from distributed import Client, default_client

from . import _snapshot_format as fmt
from . import config
from ._resuming import stored_layout
from ._wire import TRANSPORTS, actor_key
from .errors import ContextClosedError, InvalidArgumentError, InvalidTypeError, ShapeMismatchError
from .persist import StoredLayout, load_into
from .psarray import PSArray
from .psarray._binding import Binding, get_binding
from .psarray._endpoints import PSServerActor, PSWorkerPlugin
from .psarray._initspec import InitSpec
from .psarray._layout import AutoPartitioner, BlockPartitioner, Partitioner
from .psarray._meta import DTYPES, ArrayMeta, ServerId
from .psarray._server import PLUGIN_NAME as WORKER_PLUGIN
from .scheduler import PLUGIN_NAME as SCHEDULER_PLUGIN
from .scheduler import DaskAngelSchedulerPlugin

__all__ = ["STATUS_COLUMNS", "PSContext"]

# columns of PSContext.status(), servers and tasks together
STATUS_COLUMNS = (
    "kind",
    "id",
    "worker",
    "job",
    "task",
    "group",
    "status",
    "clock",
    "ahead",
    "waited_s",
    "waits",
    "nbytes",
    "n_blocks",
    "bytes_in",
    "bytes_out",
    "calls",
    "latency_ms",
    "queue",
    "cache_hits",
    "metrics",
    "clock_s",
    "slowdown",
    "slow",
)


def _shape(shape: Any) -> tuple[int, ...]:
    if isinstance(shape, (int, np.integer)):
        shape = (int(shape),)
    try:
        out = tuple(int(s) for s in shape)
    except (TypeError, ValueError):
        raise ShapeMismatchError(
            f"shape: expected an int or a tuple of 1-2 ints, got {shape!r}"
        ) from None
    if len(out) not in (1, 2) or any(s < 1 for s in out):
        raise ShapeMismatchError(f"shape: expected 1 or 2 positive extents, got {shape!r}")
    return out


def _dtype(dtype: Any) -> np.dtype:
    try:
        dt = np.dtype(dtype)
    except TypeError:
        dt = None
    if dt is None or dt.name not in DTYPES:
        raise InvalidTypeError(f"dtype: expected one of {DTYPES}, got {dtype!r}")
    return dt


class PSContext:
    """Parameter-server context on an existing Dask cluster.

    Parameters
    ----------
    client
        Any ``distributed.Client``; default: the current client.  A context never
        starts a cluster.
    servers_per_worker
        PS servers on each chosen worker (each with its own lock and thread).
    workers
        Explicit worker addresses to run servers on (default: every worker, or the
        workers carrying ``resource``).
    resource
        Run servers only on workers with this resource (e.g. ``"daskangel-ps"``).
    transport
        ``"handlers"`` (default, faster: see benchmarks/RESULTS.md) or ``"actors"``.
    snapshot
        URL of a snapshot directory (any fsspec URL; a local path by default).  Lost
        servers are rebuilt from its newest snapshot.
    snapshot_every
        An int: snapshot every that many clocks of training; a number of seconds
        (float) or a duration string (``"30s"``): snapshot on a timer.
    keep
        Number of snapshots to keep (periodic ones, and ``ps.snapshot()``'s); the
        snapshot a training job takes as it starts (its rollback point) is kept
        apart, until a newer snapshot is complete.
    recovery
        ``"continue"`` (default, Angel's behaviour): only the lost blocks go back to
        the newest snapshot and everything else keeps going, so at most the updates
        those blocks received since that snapshot are lost; survivors keep their
        progress, which suits SGD-style training.  ``"rollback"``: every array
        (and, in training, every task) goes back to the snapshot, so a
        deterministic run ends exactly as it would have without the failure.
    close_with_client
        Close this context (free its arrays) when ``client`` disconnects from the
        scheduler, as every estimator's own context does.  Default: the context
        lives until :meth:`close` (or the cluster ends), so another client can
        still open its arrays by name.
    """

    def __init__(
        self,
        client: Client | None = None,
        *,
        servers_per_worker: int = 1,
        workers: list[str] | None = None,
        resource: str | None = None,
        transport: str | None = None,
        snapshot: str | None = None,
        snapshot_every: int | float | str | None = None,
        keep: int = 2,
        recovery: str = "continue",
        close_with_client: bool = False,
    ) -> None:
        self.client = client if client is not None else default_client()
        self.transport = transport or config.get("daskangel.transport")
        if self.transport not in TRANSPORTS:
            raise InvalidArgumentError(
                f"transport: expected one of {TRANSPORTS}, got {self.transport!r}"
            )
        self.id = f"ctx-{uuid.uuid4().hex[:12]}"
        self.closed = False
        self._actors: list[Any] = []
        # the handles this context gave out (a resume's relayout re-pins them)
        self._handles: weakref.WeakSet[PSArray] = weakref.WeakSet()
        if getattr(self.client, "direct_to_workers", None) is False:
            warnings.warn(
                "client was created with direct_to_workers=False, but PS traffic goes "
                "directly from callers to the workers holding blocks",
                UserWarning,
                stacklevel=2,
            )
        self.binding: Binding = get_binding(self.client)
        self._scheduler: Any = cast(Any, self.client.scheduler)
        timeout = config.get_seconds("daskangel.context.start-timeout")
        self.client.register_plugin(DaskAngelSchedulerPlugin(), name=SCHEDULER_PLUGIN)
        self.client.register_plugin(PSWorkerPlugin(), name=WORKER_PLUGIN)
        servers = self.client.sync(
            self._scheduler.daskangel_open,
            ctx=self.id,
            workers=workers,
            servers_per_worker=servers_per_worker,
            resource=resource,
            transport=self.transport,
            callback_timeout=timeout,
        )
        self._servers = [ServerId(str(a), int(i)) for a, i in servers]
        if close_with_client:
            self.client.sync(
                self._scheduler.daskangel_close_with_client, ctx=self.id, client=self.client.id
            )
        every_clocks, every_seconds = _every(snapshot_every)
        _check_shared_url(self.client, snapshot, "snapshot")
        if snapshot is None and snapshot_every is not None:
            raise InvalidArgumentError("snapshot_every: needs snapshot=<url> to write to")
        self.snapshot_url = snapshot
        self.snapshot_every_clocks = every_clocks
        self.recovery = recovery
        self.client.sync(
            self._scheduler.daskangel_snapshot_config,
            ctx=self.id,
            url=snapshot,
            every_clocks=every_clocks,
            every_seconds=every_seconds,
            keep=keep,
            recovery=recovery,
        )
        if self.transport == "actors":
            self._actors = [
                self.client.submit(
                    PSServerActor,
                    s.index,
                    actor=True,
                    workers=[s.address],
                    key=actor_key(s.address, s.index),
                    pure=False,
                )
                for s in self._servers
            ]
            self.client.gather(self._actors)

    @property
    def servers(self) -> list[ServerId]:
        """The context's PS servers now, as the scheduler knows them (workers that
        joined or left since the context opened included), or the last known
        list once the context is closed (or when read on an event loop, which
        cannot wait for the scheduler)."""
        try:
            asyncio.get_running_loop()
            on_loop = True
        except RuntimeError:
            on_loop = False
        if not self.closed and not on_loop and not getattr(self.client, "asynchronous", False):
            got = self.client.sync(self._scheduler.daskangel_servers, ctx=self.id)
            self._servers = [ServerId(str(a), int(i)) for a, i in got]
        return list(self._servers)

    # -- lifecycle -----------------------------------------------------------------

    def __enter__(self) -> PSContext:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Free every array of this context.  Handles to them then raise."""
        if self.closed:
            return
        try:
            names = self.client.sync(self._scheduler.daskangel_close, ctx=self.id)
            for n in names:
                self.binding.forget(n)
        finally:
            self.closed = True
            for f in self._actors:
                f.release()
            self._actors = []

    def _check_open(self) -> None:
        if self.closed:
            raise ContextClosedError("PSContext is closed")

    # -- creating arrays ---------------------------------------------------------------

    def _create(
        self,
        name: str,
        shape: Any,
        dtype: Any,
        init: InitSpec,
        sparse: bool,
        block_shape: Any = None,
        partitioner: Partitioner | None = None,
        like: str | None = None,
    ) -> PSArray:
        self._check_open()
        if not isinstance(name, str) or not _NAME.match(name):
            raise InvalidArgumentError(
                f"name: expected letters, digits, '_', '-' or '.' (not starting with '.'), "
                f"got {name!r}"
            )
        shp = _shape(shape)
        dt = _dtype(dtype)
        two_d = (1, shp[0]) if len(shp) == 1 else (shp[0], shp[1])
        if block_shape is not None and partitioner is not None:
            raise InvalidArgumentError("block_shape, partitioner: pass one or the other")
        if block_shape is not None:
            bs = _shape(block_shape)
            partitioner = BlockPartitioner((1, bs[0]) if len(bs) == 1 else (bs[0], bs[1]))
        part = partitioner or AutoPartitioner()
        # model.fit(..., resume=url): the layout of the snapshot array it will hold
        stored = stored_layout(self, name, (shp, dt.name, bool(sparse)))
        if stored is not None and like is None:
            part = StoredLayout(stored)
        layout = part.layout(two_d, dt.itemsize, len(self.servers), sparse)
        meta = ArrayMeta.new(name, shp, dt, sparse, layout, init, self.transport)
        full = self.client.sync(
            self._scheduler.daskangel_create,
            ctx=self.id,
            meta=meta.to_dict(),
            blocks=meta.block_specs(),
            like=like,
        )
        m = self.binding.metas[name] = ArrayMeta.from_dict(full)
        arr = PSArray(name, context=self, binding=self.binding)
        arr._uid = m.uid  # this creation, whatever later happens to the name
        self._handles.add(arr)
        return arr

    def zeros(
        self,
        name: str,
        shape: Any,
        dtype: Any = "float32",
        *,
        block_shape: Any = None,
        partitioner: Partitioner | None = None,
        sparse: bool = False,
    ) -> PSArray:
        """A new array of zeros.  ``sparse=True`` stores only touched keys."""
        return self._create(
            name, shape, dtype, InitSpec("const", 0.0), sparse, block_shape, partitioner
        )

    def full(
        self,
        name: str,
        shape: Any,
        fill_value: float,
        dtype: Any = "float32",
        *,
        block_shape: Any = None,
        partitioner: Partitioner | None = None,
        sparse: bool = False,
    ) -> PSArray:
        """A new array with every entry ``fill_value`` (missing sparse keys read it too)."""
        dt = _dtype(dtype)
        if dt.kind in "iu" and float(fill_value) != int(fill_value):
            raise InvalidTypeError(
                f"fill_value: {fill_value!r} is not an integer, the array is {dt}"
            )
        return self._create(
            name, shape, dt, InitSpec("const", float(fill_value)), sparse, block_shape, partitioner
        )

    def random(
        self,
        name: str,
        shape: Any,
        *,
        seed: int = 0,
        dist: str = "uniform",
        low: float = 0.0,
        high: float = 1.0,
        loc: float = 0.0,
        scale: float = 1.0,
        dtype: Any = "float32",
        block_shape: Any = None,
        partitioner: Partitioner | None = None,
        sparse: bool = False,
    ) -> PSArray:
        """A new array of counter-based random numbers.

        Entry ``(r, c)`` depends only on ``seed`` and ``r * n_cols + c``, so the
        values do not depend on the partitioning.  For ``sparse=True`` a key is
        drawn when first read or written (Angel's initAndGet).
        """
        if dist == "uniform":
            init = InitSpec("uniform", float(low), float(high), int(seed), lazy=sparse)
        elif dist == "normal":
            init = InitSpec("normal", float(loc), float(scale), int(seed), lazy=sparse)
        else:
            raise InvalidArgumentError(f"dist: expected 'uniform' or 'normal', got {dist!r}")
        return self._create(name, shape, dtype, init, sparse, block_shape, partitioner)

    def zeros_like(self, arr: PSArray, name: str | None = None, dtype: Any = None) -> PSArray:
        """A zero array co-partitioned with ``arr``: same shape, blocks and servers.

        Binary psfs (``ops.Axpy``, ``ops.Dot``, optimisers ...) need co-partitioned
        arrays.  ``name`` defaults to a fresh one derived from ``arr.name``.
        """
        return self.full_like(arr, 0.0, name, dtype)

    def full_like(
        self, arr: PSArray, fill_value: float, name: str | None = None, dtype: Any = None
    ) -> PSArray:
        """An array co-partitioned with ``arr`` with every entry ``fill_value``."""
        m = arr.meta
        shape = (m.shape[1],) if m.ndim == 1 else m.shape
        dt = _dtype(dtype or m.dtype)
        if dt.kind in "iu" and float(fill_value) != int(fill_value):
            raise InvalidTypeError(
                f"fill_value: {fill_value!r} is not an integer, the array is {dt}"
            )
        name = name or f"{m.name}-like-{uuid.uuid4().hex[:8]}"
        part = _SameLayout(m)
        init = InitSpec("const", float(fill_value))
        return self._create(name, shape, dt, init, m.sparse, None, part, like=m.name)

    # -- psf ------------------------------------------------------------------------------

    def psf(self, func: Any, *arrays: PSArray, atomic: bool = True) -> Any:
        """Run the PS function ``func`` over co-partitioned ``arrays``, next to the blocks.

        A get psf (``ops.Sum``, ``ops.Dot`` ...) returns its merged result; an update
        psf (``ops.Axpy``, ``ops.Scale`` ...) returns ``None`` once every block is
        updated.  ``ps.psf(ops.Axpy(alpha=a), x, y)`` does ``y += a * x``.  See
        :meth:`PSArray.psf` and ``docs/psf.md``.
        """
        self._check_open()
        if not arrays:
            raise InvalidArgumentError("arrays: expected at least one PSArray")
        return arrays[0].psf(func, *arrays[1:], atomic=atomic)

    def psf_async(self, func: Any, *arrays: PSArray, atomic: bool = True) -> Any:
        """Start :meth:`psf`; return a :class:`~daskangel.psarray.PSFuture`."""
        self._check_open()
        if not arrays:
            raise InvalidArgumentError("arrays: expected at least one PSArray")
        return arrays[0].psf_async(func, *arrays[1:], atomic=atomic)

    def from_array(
        self,
        name: str,
        array: Any,
        *,
        block_shape: Any = None,
        partitioner: Partitioner | None = None,
        dtype: Any = None,
    ) -> PSArray:
        """A new array holding a numpy or dask array's values."""
        is_dask = hasattr(array, "dask") and hasattr(array, "chunks")
        src = array if is_dask else np.asarray(array)
        if src.ndim not in (1, 2):
            raise ShapeMismatchError(f"array: expected 1-D or 2-D, got {src.ndim}-D")
        dt = _dtype(dtype or src.dtype)
        arr = self.zeros(name, src.shape, dt, block_shape=block_shape, partitioner=partitioner)
        try:
            if is_dask:
                _set_from_dask(arr, src)
            else:
                _set_in_slabs(arr, src)
        except BaseException:
            self.drop(name)
            raise
        return arr

    # -- registry ----------------------------------------------------------------------------

    def get_array(self, name: str) -> PSArray:
        """Re-attach to an existing array by name."""
        self._check_open()
        arr = PSArray(name, context=None, binding=self.binding)
        self.binding.forget(name)
        arr.meta  # noqa: B018 - raises ArrayNotFoundError if unknown
        self._handles.add(arr)
        return arr

    def arrays(self, every_context: bool = False) -> list[str]:
        """Names of this context's arrays (``every_context=True``: of all contexts on the
        cluster; names are unique cluster-wide)."""
        ctx = None if every_context else self.id
        return list(self.client.sync(self._scheduler.daskangel_list, ctx=ctx))

    def drop(self, name: str) -> None:
        """Free one array now."""
        self.client.sync(self._scheduler.daskangel_drop, name=name)
        self.binding.forget(name)

    # -- snapshots and models -----------------------------------------------------------

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
        return load_into(self, url, arrays, rename)

    @classmethod
    def restore(cls, client: Client | None, url: str, **kwargs: Any) -> PSContext:
        """A new context holding the arrays of the snapshot (or saved model) at
        ``url``: on a fresh scheduler, or for a new client, to continue a job.

        ``kwargs`` are :class:`PSContext`'s; ``snapshot`` defaults to ``url``
        when it is a snapshot directory, so recovery and the next snapshots
        continue there.  Continue training with ``train(ps, fn, data,
        resume=url)``, which starts every task at the snapshot's clock.
        """
        if "snapshot" not in kwargs and fmt.read_latest(url) is not None:
            kwargs["snapshot"] = url
        ps = cls(client, **kwargs)
        try:
            ps.load(url)
        except BaseException:
            ps.close()
            raise
        return ps

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

    def refresh(self) -> None:
        """Forget cached array metadata (it is refetched on next use)."""
        for n in list(self.binding.metas):
            self.binding.forget(n)

    def status(self, max_age: float | None = None) -> Any:
        """Counters of this context's PS servers and of its training tasks.

        A pandas DataFrame with one row per server (``kind == "server"``: memory,
        array bytes received and sent (``bytes_in`` / ``bytes_out``: the payload of
        every request and reply, counted since the server started), calls, mean
        latency, queue depth) and one per training task (``kind == "task"``: clock,
        clocks ahead of the slowest, time spent waiting, bytes pulled/pushed, calls,
        latency, cache hits; ``clock_s``: its median seconds per clock over the last
        ``daskangel.clock.slow-window`` clocks, not counting its waits for slower
        tasks; ``slowdown``: that over the other tasks' median; ``slow``: whether
        it passes ``daskangel.clock.slow-factor``).  Server counters are at most ``max_age`` seconds old
        (default ``daskangel.status.max-age``; ``0`` asks every server now, which
        measuring what a piece of code moved needs).  Example::

            ps.status().query("kind == 'task'")[["id", "clock", "waited_s"]]
            before = ps.status(max_age=0).query("kind == 'server'")["bytes_out"].sum()
        """
        import pandas as pd

        if max_age is not None:
            if isinstance(max_age, bool) or not isinstance(max_age, (int, float, np.number)):
                raise InvalidTypeError(f"max_age: expected seconds (a number), got {max_age!r}")
            if not max_age >= 0:
                raise InvalidArgumentError(f"max_age: expected seconds >= 0, got {max_age!r}")
            max_age = float(max_age)
        st = self.client.sync(self._scheduler.daskangel_status, ctx=self.id, max_age=max_age)
        cols = list(STATUS_COLUMNS)
        rows = list(st["servers"]) + list(st["tasks"])
        return pd.DataFrame(rows, columns=cols + sorted({k for r in rows for k in r} - set(cols)))

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{len(self._servers)} servers"
        return f"PSContext<{self.id}, {state}, transport={self.transport}>"


_NAME = re.compile(r"^[A-Za-z0-9_\-][A-Za-z0-9_.\-]*$")


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


class _SameLayout:
    """A partitioner that repeats an existing array's layout (co-partitioning)."""

    def __init__(self, meta: ArrayMeta) -> None:
        self.meta = meta

    def layout(self, shape: tuple[int, int], itemsize: int, n_servers: int, sparse: bool) -> Any:
        return self.meta.layout


def _set_in_slabs(arr: PSArray, src: np.ndarray) -> None:
    limit = max(1, config.get_bytes("daskangel.client.max-request-bytes") // 2)
    if src.ndim == 1:
        arr.set(src, casting="same_kind")
        return
    rows = max(1, limit // max(1, src.shape[1] * src.itemsize))
    for r in range(0, src.shape[0], rows):
        arr.set(src[r : r + rows], rows=slice(r, r + rows), casting="same_kind")


def _set_chunk(chunk: np.ndarray, name: str, r0: int, c0: int, ndim: int) -> int:
    a = PSArray(name)
    if ndim == 1:
        a.set(chunk, cols=slice(c0, c0 + chunk.shape[0]), casting="same_kind")
    else:
        a.set(
            chunk,
            rows=slice(r0, r0 + chunk.shape[0]),
            cols=slice(c0, c0 + chunk.shape[1]),
            casting="same_kind",
        )
    return int(chunk.size)


def _set_from_dask(arr: PSArray, src: Any) -> None:
    import dask

    offsets = [np.concatenate([[0], np.cumsum(c)[:-1]]).astype(int) for c in src.chunks]
    tasks = []
    for idx, block in np.ndenumerate(np.asarray(src.to_delayed(), dtype=object)):
        r0 = int(offsets[0][idx[0]]) if src.ndim == 2 else 0
        c0 = int(offsets[-1][idx[-1]])
        tasks.append(dask.delayed(_set_chunk)(block, arr.name, r0, c0, src.ndim))
    dask.compute(*tasks)
