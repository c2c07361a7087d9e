"""Late binding of array handles to the Dask process they run in.

A :class:`Binding` knows the event loop, the comm pool and the scheduler of the
current process: the user's ``Client`` on the driver, or the ``Worker`` inside a
task.  Handles unpickled anywhere in Dask find their binding with
:func:`get_binding`; nothing about the cluster is pickled with them.

A worker's binding calls the servers of its own worker directly (no comm, no
serialisation); every other call is one comm round trip per server.

Example
-------
>>> from distributed import Client, LocalCluster
>>> with LocalCluster(n_workers=1, processes=False) as cl, Client(cl) as c:
...     get_binding(c).local_worker is None
True
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import threading
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import numpy as np
from distributed import Client, Worker, default_client, get_worker
from distributed.core import ConnectionPool
from distributed.utils import sync

from .. import config
from .._lean import LeanPool
from .._shm import ShmBuffers
from .._shm import supported as shm_supported
from .._wire import call_server, drop_narrow
from ._blockcalls import BlockCalls
from ._meta import ArrayMeta, ServerId
from ._recvpool import ReceivePool, pooled
from ._server import PLUGIN_NAME

__all__ = ["Binding", "get_binding"]

T = TypeVar("T")

_lock = threading.Lock()


class Binding(BlockCalls):
    """Loop, comm pool, scheduler connection and metadata cache of one process."""

    def __init__(
        self,
        loop: Any,
        connection_args: dict[str, Any],
        scheduler: Any,
        local_worker: Worker | None,
    ) -> None:
        self.loop = loop
        self.connection_args = connection_args
        self._pool: ConnectionPool | None = None
        self._lean: LeanPool | None = None
        self.scheduler = scheduler
        self.local_worker = local_worker
        # {array_name: ArrayMeta}
        self.metas: dict[str, ArrayMeta] = {}
        self.writer_id = uuid.uuid4().hex
        self._seq = itertools.count()
        self._scratch: ReceivePool | None = None
        self._results: ReceivePool | None = None
        self._sends: ReceivePool | None = None
        self._shm: ShmBuffers | None = None
        # {array_name: what a random-row get needs of its metadata} (psarray._rowget)
        self.row_specs: dict[str, Any] = {}

    def scratch(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """An uninitialised array in a reused buffer (``daskangel.client.scratch-bytes``
        in all, then new arrays): for results that are only copied from, so their
        pages are not faulted in again on every call."""
        if self._scratch is None:
            self._scratch = ReceivePool(config.get_bytes("daskangel.client.scratch-bytes"))
        return pooled(self._scratch, shape, dtype)

    def result(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """An uninitialised array for a result handed to the caller: when at least
        ``daskangel.client.result-pool-min-bytes``, in a buffer reused once nothing
        refers to it any more (``daskangel.client.result-pool-bytes`` in all, then
        new arrays), whose pages are already faulted in."""
        n = np.dtype(dtype).itemsize
        for s in shape:
            n *= s
        if n < config.get_bytes("daskangel.client.result-pool-min-bytes"):
            return np.empty(shape, dtype)  # malloc's heap: no fresh pages to fault in
        if self._results is None:
            self._results = ReceivePool(config.get_bytes("daskangel.client.result-pool-bytes"))
        return pooled(self._results, shape, dtype)

    def send_buffer(self, nbytes: int) -> np.ndarray:
        """A uint8 buffer for an update's packed follow frame (``_wire.split_follow``),
        reused once the comm has sent it and nothing refers to it
        (``daskangel.client.send-pool-bytes`` in all, then new arrays)."""
        if self._sends is None:
            self._sends = ReceivePool(config.get_bytes("daskangel.client.send-pool-bytes"))
        return self._sends.take([nbytes])[0]

    def pack_buffer(self, nbytes: int) -> np.ndarray | None:
        """A uint8 buffer in shared memory for a packed update of ``nbytes``
        (:meth:`ShmBuffers.lease`: same-machine servers read it where it lies), or
        None: ``shm`` or ``shm-pack`` off, unsupported, under ``shm-bytes``, or none
        free."""
        if nbytes < config.get_bytes("daskangel.client.shm-bytes") or not (
            config.get("daskangel.client.shm") and config.get("daskangel.client.shm-pack")
        ):
            return None
        shm = self.shm_buffers()
        return None if shm is None else shm.lease(nbytes)

    def shm_buffers(self) -> ShmBuffers | None:
        """This process's shared buffers for large packed updates to servers of
        this machine (:mod:`daskangel._shm`), or None where the platform has none."""
        if self._shm is None and shm_supported():
            self._shm = ShmBuffers(config.get_bytes("daskangel.client.shm-pool-bytes"))
        return self._shm

    def next_tag(self) -> list[Any]:
        """A fresh ``[writer_id, seq]`` write tag (thread-safe: ``count`` is atomic)."""
        return [self.writer_id, next(self._seq)]

    async def pool(self) -> ConnectionPool:
        """PS traffic's own comm pool (Dask comms, the cluster's Security settings),
        with ``daskangel.client.connect-timeout`` so a dead server is noticed fast."""
        if self._pool is None:
            pool = ConnectionPool(
                limit=int(config.get("daskangel.client.connection-limit")),
                connection_args=self.connection_args,
                timeout=config.get_seconds("daskangel.client.connect-timeout"),
            )
            await pool.start()
            self._pool = pool
        return self._pool

    def lean(self, addresses: list[str]) -> LeanPool | None:
        """The lean wire's comms (:mod:`daskangel._lean`) when every one of
        ``addresses`` can take it and ``daskangel.client.lean-wire`` is on, else
        None (the Dask path answers)."""
        if not config.get("daskangel.client.lean-wire") or not all(
            LeanPool.supports(a) for a in addresses
        ):
            return None
        if self._lean is None:
            self._lean = LeanPool(
                self.connection_args, config.get_seconds("daskangel.client.connect-timeout")
            )
        return self._lean

    def close(self) -> None:
        """Abort every comm this binding opened, PS traffic's pool's and the lean
        wire's (the servers' lean handlers then end).  Run on the binding's loop
        when its Client or worker closes, so that no open comm is left to the
        garbage collector (Dask warns "Closing dangling stream" of each).  A later
        call opens new comms."""
        lean, self._lean = self._lean, None
        if lean is not None:
            lean.close()
        pool, self._pool = self._pool, None
        if pool is not None:
            # {address: {comm, ...}}: idle comms, and comms of calls in flight
            for held in (pool.available, pool.occupied):
                for comms in held.values():
                    for comm in comms:
                        comm.abort()
                held.clear()

    # -- running coroutines from any thread ----------------------------------

    def run(self, fn: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
        """Run ``fn(*args)`` on this binding's loop and wait for it."""
        # (no callback_timeout: call_blocks enforces daskangel.client.call-timeout itself)
        return sync(self.loop, fn, *args, **kwargs)  # type: ignore[no-any-return]

    def submit(self, fn: Callable[..., Awaitable[T]], *args: Any) -> concurrent.futures.Future[T]:
        """Start ``fn(*args)`` on the loop; return a ``concurrent.futures.Future``."""
        return asyncio.run_coroutine_threadsafe(fn(*args), self.loop.asyncio_loop)  # type: ignore[arg-type]

    # -- metadata -------------------------------------------------------------

    async def meta(self, name: str, refresh: bool = False) -> ArrayMeta:
        m = None if refresh else self.metas.get(name)
        if m is None:
            m = ArrayMeta.from_dict(await self.scheduler.daskangel_meta(name=name))
            self.metas[name] = m
        return m

    def forget(self, name: str) -> None:
        self.metas.pop(name, None)
        self.row_specs.pop(name, None)

    def forget_arrays(self, names: list[str]) -> None:
        """Forget the metadata of freed arrays and what this process's agent kept of
        them (pulled rows, key lists, buffered increments)."""
        for n in names:
            self.metas.pop(n, None)
            self.row_specs.pop(n, None)
        agent = getattr(self, "_daskangel_agent", None)
        if agent is not None:
            agent.forget_arrays(names)

    # -- server calls -----------------------------------------------------------

    async def call(
        self,
        server: ServerId,
        op: str,
        cost: int,
        transport: str,
        into: tuple[list[int], list[np.ndarray | None]] | None = None,
        **kwargs: Any,
    ) -> Any:
        """Run ``op`` on ``server``: directly when it lives in this process.

        ``into``: where a remote reply's large arrays may land (``call_server``).
        """
        w = self.local_worker
        if w is not None and transport == "handlers" and server.address == w.address:
            plugin = w.plugins.get(PLUGIN_NAME)
            if plugin is not None:
                kwargs = drop_narrow(op, kwargs)
                return await plugin.call_local(op, server.index, cost, **kwargs)  # type: ignore[attr-defined]
        pool = self._pool or await self.pool()
        return await call_server(
            pool, server.address, server.index, op, transport, cost, kwargs, into,
            self.send_buffer, self.shm_buffers(),
        )  # fmt: skip


def get_binding(client: Client | None = None) -> Binding:
    """The binding of ``client``, of the worker running this task, or of the default client."""
    if client is None:
        try:
            worker = get_worker()
        except ValueError:
            worker = None
        if worker is not None:
            with _lock:
                b = getattr(worker, "_daskangel_binding", None)
                if b is None:
                    b = Binding(worker.loop, worker.connection_args, worker.scheduler, worker)
                    setattr(worker, "_daskangel_binding", b)  # noqa: B010
            return b  # type: ignore[no-any-return]
        client = default_client()
    with _lock:
        b = getattr(client, "_daskangel_binding", None)
        if b is None:
            b = Binding(client.loop, client.connection_args, client.scheduler, None)
            setattr(client, "_daskangel_binding", b)  # noqa: B010
            closers = getattr(client, "_periodic_callbacks", None)
            if isinstance(closers, dict):
                closers["daskangel-binding"] = _ClosesWithClient(b)
    return b  # type: ignore[no-any-return]


class _ClosesWithClient:
    """Stands among a Client's periodic callbacks, every one of which
    ``Client.close`` stops: its ``stop`` closes the binding's comms on the loop.

    distributed has no client-side hook for its close; without one, a closed
    Client's PS comms stay open until collected, each then logging a warning.
    ``stop`` may run twice and from the closing thread: ``add_callback`` is
    thread-safe and :meth:`Binding.close` idempotent.
    """

    __slots__ = ("binding",)

    def __init__(self, binding: Binding) -> None:
        self.binding = binding

    def start(self) -> None:
        """Nothing to start (``Client.start`` starts every periodic callback)."""

    def stop(self) -> None:
        self.binding.loop.add_callback(self.binding.close)
