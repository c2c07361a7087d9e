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
import uuid
import warnings
import weakref
from typing import Any, cast

import numpy as np
from distributed import Client, default_client

from . import _snapshot_format as fmt
from . import config
from ._context_arrays import ArrayCreationMixin
from ._context_snapshots import SnapshotMixin, _check_shared_url, _every
from ._wire import TRANSPORTS, actor_key
from .errors import ContextClosedError, InvalidArgumentError, InvalidTypeError
from .psarray import PSArray
from .psarray._actor import PSServerActor
from .psarray._binding import Binding, get_binding
from .psarray._endpoints import PSWorkerPlugin
from .psarray._meta import ServerId
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


class PSContext(ArrayCreationMixin, SnapshotMixin):
    """Parameter-server context on an existing Dask cluster.

    Arrays are created by :class:`~daskangel._context_arrays.ArrayCreationMixin`'s
    methods; snapshots, saving, loading and recovery are
    :class:`~daskangel._context_snapshots.SnapshotMixin`'s.

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

    # -- a context from a store, cached metadata, counters ------------------------------

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
        tasks; ``slowdown``: that over the other tasks' median, both counted as at
        least ``daskangel.clock.slow-min-seconds``; ``slow``: whether
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
