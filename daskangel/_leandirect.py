"""The lean wire from the caller's own thread: no hop to the event loop and back.

A blocking PS call made from a thread other than the binding's event loop (a
task's ``increment``, its ``version_token``) crossed threads twice on the lean
wire (:mod:`daskangel._lean`): the request handed to the loop, which wrote it and
read the replies, then the outcome handed back.  On a 2-core machine where the
caller's process and two servers share the cores each crossing waits for a core
and for the GIL (0.1-0.35 ms a crossing in the tenth session's timeline; an
increment and its token are four).  Here the calling thread writes the requests
and reads the replies itself, on sockets of its own:

* :meth:`DirectPool.take` gives an idle socket to a server, or opens one: a comm
  of the lean wire made on the loop as :class:`~daskangel._lean.LeanPool` makes them
  (Dask's ``connect``, its handshake, the ``daskangel_lean`` message), then taken
  out of tornado's hands (its handler removed from the loop; nothing of tornado
  touches it again but the final abort), so only one thread ever uses it;
* :func:`direct_all` writes every request (and its bare follow bytes) without
  blocking on any one server (a ``poll`` over all of them), then reads the replies
  in order, each a message of the lean wire's framing; while it waits, every
  ``daskangel.client.liveness-check`` it calls ``check`` (the caller's test for a
  lost server or its call timeout, which raises);
* a socket that failed (closed, reset, out of step, abandoned by ``check``) is
  closed and never reused, and the failure raised as
  :class:`~distributed.comm.CommClosedError`, as on the loop: the general path then
  answers (it refreshes the layout and resends with the same write tag).

TCP only (a TLS socket keeps state of its own in tornado's stream): other
addresses take the loop as before, as does a call with
``daskangel.client.lean-direct`` off or from the loop's own thread.

Example
-------
>>> DirectPool.supports("tls://10.0.0.1:8786"), DirectPool.supports("tcp://10.0.0.1:8786")
(False, True)
"""

from __future__ import annotations

import asyncio
import contextlib
import select
import socket
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np
from distributed.comm.core import CommClosedError

from . import config
from ._lean import _HEAD, FRAME, MAGIC, REQUEST, LeanPool, _op_of, _unpack, encode, replies_of
from .errors import StaleLayoutError

__all__ = ["DirectPool", "direct_all", "direct_pool", "or_general_path", "watch"]

T = TypeVar("T")

# a request: (address, op, message, reply sizes, reply targets), as _lean.lean_all's
Call = tuple[str, str, dict[str, Any], list[int], list[Any]]


class Direct:
    """One detached comm: its socket, and the Dask comm that keeps it alive."""

    __slots__ = ("address", "comm", "sock")

    def __init__(self, address: str, comm: Any, sock: socket.socket) -> None:
        self.address, self.comm, self.sock = address, comm, sock


def _detach(comm: Any) -> socket.socket | None:
    """On the loop: ``comm``'s socket taken from its tornado stream (the stream's
    handler removed), or None when the stream is not an idle plain TCP stream."""
    from tornado.iostream import IOStream, SSLIOStream

    stream = getattr(comm, "stream", None)
    if (
        type(stream) is not IOStream
        or isinstance(stream, SSLIOStream)
        or stream.reading()
        or stream.writing()
        or stream._read_buffer_size
    ):
        return None
    if stream._state is not None:
        stream.io_loop.remove_handler(stream.fileno())
        stream._state = None
    sock: socket.socket = stream.socket
    sock.setblocking(False)
    return sock


class DirectPool:
    """Detached comms of the lean wire by server address, for callers' threads.

    ``lean``: the binding's :class:`~daskangel._lean.LeanPool` (it makes the
    comms, and its ``close`` aborts these too); ``run``: runs a coroutine on the
    binding's loop and waits for it (:meth:`Binding.run`).
    """

    def __init__(self, lean: LeanPool, run: Callable[..., Any], loop: Any) -> None:
        self.lean, self.run, self.loop = lean, run, loop
        self._lock = threading.Lock()
        self._idle: dict[str, list[Direct]] = {}
        self.calls = 0  # requests answered this way

    @staticmethod
    def supports(address: str) -> bool:
        """Whether calls to ``address`` can be made from the caller's thread (TCP)."""
        return address.startswith("tcp://")

    def take(self, address: str) -> Direct:
        """An idle detached comm to ``address``, or a new one (made on the loop)."""
        with self._lock:
            idle = self._idle.get(address)
            while idle:
                d = idle.pop()
                if not d.comm.closed():  # (the binding's LeanPool aborts them on close)
                    return d
        return self.run(self._open, address)  # type: ignore[no-any-return]

    async def _open(self, address: str) -> Direct:
        comm = await self.lean.take(address)
        sock = _detach(comm)
        if sock is None:
            self.lean.drop(comm)
            raise CommClosedError(f"lean wire: {address} gave a comm that cannot be detached")
        return Direct(address, comm, sock)

    def give_back(self, d: Direct) -> None:
        """``d`` answered its call in step: idle until the next call."""
        with self._lock:
            self._idle.setdefault(d.address, []).append(d)

    def drop(self, d: Direct) -> None:
        """``d`` failed or was left out of step: closed, never reused (its comm
        aborted on the loop, where tornado's stream lives)."""
        with contextlib.suppress(OSError):
            d.sock.shutdown(socket.SHUT_RDWR)
        try:
            self.loop.call_soon_threadsafe(self.lean.drop, d.comm)
        except RuntimeError:  # the loop is closed: nothing else touches the comm
            d.comm.abort()


def _send(pending: list[tuple[socket.socket, list[memoryview]]], wait: Callable[..., Any]) -> None:
    """Write every socket's buffers, none blocking another (a ``poll`` over the
    ones not done)."""
    left: dict[int, tuple[socket.socket, list[memoryview]]] = {}
    for sock, bufs in pending:
        bufs = [b for b in bufs if b.nbytes]
        if _write_some(sock, bufs):
            left[sock.fileno()] = (sock, bufs)
    while left:
        for fd in wait(list(left), select.POLLOUT):
            sock, bufs = left[fd]
            if not _write_some(sock, bufs):
                del left[fd]


def _write_some(sock: socket.socket, bufs: list[memoryview]) -> bool:
    """Write what the socket takes now; whether anything is left."""
    while bufs:
        try:
            n = sock.send(bufs[0])
        except BlockingIOError:
            return True
        if n == bufs[0].nbytes:
            bufs.pop(0)
        else:
            bufs[0] = bufs[0][n:]
    return False


def _recv_into(sock: socket.socket, view: memoryview, wait: Callable[..., Any]) -> None:
    got, n = 0, view.nbytes
    while got < n:
        try:
            k = sock.recv_into(view[got:])
        except BlockingIOError:
            wait([sock.fileno()], select.POLLIN)
            continue
        if k == 0:
            raise CommClosedError("lean wire: the server closed the comm")
        got += k


def _read(sock: socket.socket, call: Call, wait: Callable[..., Any]) -> tuple[int, Any]:
    """One reply: its header, then its body (an array frame's bytes into the
    call's target when it has exactly the target's size, as ``_lean`` reads it)."""
    head = bytearray(_HEAD.size)
    _recv_into(sock, memoryview(head), wait)
    magic, kind, n = _HEAD.unpack(head)
    if magic != MAGIC:
        raise CommClosedError(f"lean wire: a message began with {bytes(magic)!r}, not {MAGIC!r}")
    body = bytearray(n)
    _recv_into(sock, memoryview(body), wait)
    obj = _unpack(body)
    if kind != FRAME:
        return kind, obj
    size = int(obj)
    sizes, targets = call[3], call[4]
    if sizes and sizes[0] == size and targets[0] is not None:
        target = targets[0]
        _recv_into(sock, memoryview(target.reshape(-1).view(np.uint8)), wait)
        return 1, target
    data = bytearray(size)
    _recv_into(sock, memoryview(data), wait)
    return 1, bytes(data)


def direct_all(
    pool: DirectPool, calls: list[Call], check: Callable[[], None], period: float,
    raw: list[list[Any]] | None = None,
) -> list[Any]:  # fmt: skip
    """:func:`daskangel._lean.lean_all` from the calling thread: every request (and
    its ``raw`` frames, bare bytes after it) written, then the replies read in
    order.  ``check()`` runs every ``period`` seconds while waiting (it raises to
    abandon the call).  Any failure closes every socket of the batch; a closed or
    failed socket raises :class:`~distributed.comm.CommClosedError`; an uncaught
    error of a handler is raised here as the handler raised it."""

    def wait(fds: list[int], event: int) -> list[int]:
        p = select.poll()
        for fd in fds:
            p.register(fd, event | select.POLLERR | select.POLLHUP)
        while True:
            got = p.poll(max(1, int(period * 1000)))
            if got:
                return [fd for fd, _ in got]
            check()

    taken: list[Direct] = []
    try:
        for address, *_ in calls:
            taken.append(pool.take(address))
        pending = []
        for i, (d, (_, op, msg, _, _)) in enumerate(zip(taken, calls, strict=True)):
            if raw is not None:
                msg = {**msg, "follow": {**msg["follow"], "raw": True}}
            bufs = [memoryview(encode(REQUEST, [_op_of(op), msg]))]
            if raw is not None:
                bufs += [memoryview(f).cast("B") for f in raw[i]]
            pending.append((d.sock, bufs))
        _send(pending, wait)
        out = [_read(d.sock, call, wait) for d, call in zip(taken, calls, strict=True)]
    except BaseException as e:
        for d in taken:
            pool.drop(d)
        if isinstance(e, OSError) and not isinstance(e, (CommClosedError, TimeoutError)):
            raise CommClosedError(f"lean wire: {e!r}") from e
        raise
    for d in taken:
        pool.give_back(d)
    pool.calls += len(taken)
    return replies_of(out)


def or_general_path(fn: Callable[[], T]) -> T | None:
    """``fn()`` (a direct call and the reading of its replies), or None when the
    general path must answer: a layout change (:class:`StaleLayoutError`) or a
    failed comm; a call timeout is raised."""
    try:
        return fn()
    except (StaleLayoutError, CommClosedError):
        return None
    except OSError as e:
        if isinstance(e, TimeoutError):
            raise
        return None


def direct_pool(b: Any, addresses: list[str]) -> DirectPool | None:
    """Binding ``b``'s pool of detached comms when a blocking call to every one of
    ``addresses`` may be made from this thread (``daskangel.client.lean-direct``
    on, the lean wire on, TCP, no event loop running here), else None."""
    if not config.get("daskangel.client.lean-direct") or not all(
        DirectPool.supports(a) for a in addresses
    ):
        return None
    try:
        asyncio.get_running_loop()
        return None  # a loop runs in this thread: blocking here would stall it
    except RuntimeError:
        pass
    lean = b.lean(addresses)
    if lean is None:
        return None
    if lean.direct is None:
        lean.direct = DirectPool(lean, b.run, b.loop.asyncio_loop)
    return lean.direct  # type: ignore[no-any-return]


def watch(b: Any, name: str, meta: Any, servers: list[Any]) -> tuple[Callable[[], None], float]:
    """``(check, period)`` for :func:`direct_all`, as ``BlockCalls._watched``
    watches a call on the loop: every ``daskangel.client.liveness-check`` the
    registry is asked whether a server of the call was declared lost
    (:class:`CommClosedError`: the general path answers), and
    :class:`TimeoutError` once ``daskangel.client.call-timeout`` has passed."""
    period = config.get_seconds("daskangel.client.liveness-check")
    limit = time.monotonic() + config.get_seconds("daskangel.client.call-timeout")

    def check() -> None:
        if time.monotonic() > limit:
            raise TimeoutError(
                f"array {name!r}: a call to {servers} took longer than "
                "daskangel.client.call-timeout"
            )
        fresh = b.run(b.meta, name, refresh=True)
        gone = {fresh.servers[g] for g in fresh.lost}
        gone |= set(meta.servers) - set(fresh.servers)
        if any(s in gone for s in servers):
            raise CommClosedError("the server was declared lost during the call")

    return check, period
