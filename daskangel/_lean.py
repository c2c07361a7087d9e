"""The lean wire: daskangel's own frames on TCP comms kept open for PS calls.

A PS call through Dask's comm pays Dask's per-message handling at both ends:
``to_frames`` and ``from_frames`` of every request and reply (the walk for
objects to serialise, the frame table, the msgpack header) and, on the server,
``Server.handle_comm``'s dispatch of each message.  On the 2-core benchmark VM that
was ~0.15 ms of a small 2-server round trip back to back and ~0.5 ms with the
cores idle between calls, and 0.17-0.30 ms of a 300 KB push (RESULTS.md, issue 14,
"a lean wire, probed").  This module carries the hottest calls (a sparse row
push, a random-row get, the version token) without it:

* a caller opens comms of its own to a server (Dask's ``connect``: the cluster's
  security settings and handshake), one per call in flight, kept idle between
  calls in a :class:`LeanPool`; the first message on each is an ordinary Dask
  message naming the ``daskangel_lean`` handler, which then keeps the comm
  (as Dask's batched streams do) and serves it in :func:`serve` until it closes;
* every message after that is a 12-byte header (``DAL1``, its kind, the body's
  length) and a msgpack body: a request ``[op, message]`` (the same message the
  op's Dask handler takes), a reply (what that handler returns), or a failure
  (the pickled exception an uncaught error raised, as Dask's ``error_message``
  carries it); a push's packed frame follows its request as bare bytes, as on the
  Dask path (``follow["raw"]``), and a large row get's rows follow their reply
  (a frame message: the bytes' count), read straight into the caller's buffer;
* daskangel's own errors come back as plain values (:func:`._wire.error_reply`)
  exactly as on the Dask path, so "a refused request changes nothing" holds
  unchanged.

Only TCP and TLS comms have a stream to write bare bytes to: for any other comm
(``inproc://``, UCX) :meth:`LeanPool.supports` is False and the Dask path
answers, as it does with ``daskangel.client.lean-wire`` off.  A comm that fails
(closed, cancelled, out of step) is aborted and never reused, and the failure is
raised as :class:`distributed.comm.CommClosedError`, which the callers' liveness
watch treats like any unreachable server: the general path refreshes the layout
and resends with the same write tag (applied once).

.. warning::
   Both ends must run the same daskangel (the header's magic carries the wire's
   version; a mismatch closes the comm).  Dask's frame compression does not
   apply to these messages (PS payloads are numbers that compress poorly anyway).

Example
-------
>>> kind, body = decode(encode(REQUEST, ["versions", {"server": 0, "blocks": [1, 2]}]))
>>> kind == REQUEST, body
(True, ('versions', {'server': 0, 'blocks': (1, 2)}))
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Awaitable, Callable
from typing import Any

import msgpack
import numpy as np
from distributed.comm import connect
from distributed.comm.core import CommClosedError
from distributed.protocol import pickle
from distributed.protocol.serialize import Serialize
from distributed.protocol.utils import msgpack_opts

from ._recv import raw_stream

__all__ = [
    "FAILED", "FRAME", "LEAN_HANDLER", "REPLY", "REQUEST", "LeanPool", "decode", "encode", "lean_all",
    "serve",
]  # fmt: skip

logger = logging.getLogger(__name__)

LEAN_HANDLER = "daskangel_lean"
MAGIC = b"DAL1"  # "daskangel lean", version 1 of its framing
REQUEST, REPLY, FAILED, FRAME = 0, 1, 2, 3
_HEAD = struct.Struct("<4sBxxxI")  # magic, kind, pad, body bytes

# a request: (address, op, message, reply sizes, reply targets), as _recv.send_all_recv_into
Call = tuple[str, str, dict[str, Any], list[int], list[Any]]
Handler = Callable[..., Awaitable[Any]]


def _plain(obj: Any) -> Any:
    """msgpack's fallback: numpy scalars as Python numbers (a version, a count)."""
    if isinstance(obj, np.generic):
        return obj.item()
    raise TypeError(f"the lean wire carries plain values only, not {type(obj).__name__}")


def encode(kind: int, obj: Any) -> bytes:
    """One message: the header and ``obj`` packed (plain values, bytes, lists, dicts)."""
    body = msgpack.packb(obj, use_bin_type=True, default=_plain)
    return _HEAD.pack(MAGIC, kind, len(body)) + body


def decode(data: bytes) -> tuple[int, Any]:
    """``(kind, obj)`` of one whole message (lists come back as tuples, as Dask's)."""
    magic, kind, n = _HEAD.unpack_from(data)
    if magic != MAGIC or len(data) != _HEAD.size + n:
        raise CommClosedError(f"lean wire: not a daskangel message (header {data[:12]!r})")
    return kind, _unpack(data[_HEAD.size :])


def _unpack(body: bytes | bytearray) -> Any:
    return msgpack.unpackb(body, use_list=False, **msgpack_opts)


async def _read(stream: Any) -> tuple[int, Any]:
    """Read one message from a tornado stream: its header, then its body."""
    magic, kind, n = _HEAD.unpack(await stream.read_bytes(_HEAD.size))
    if magic != MAGIC:
        raise CommClosedError(f"lean wire: a message began with {magic!r}, not {MAGIC!r}")
    return kind, _unpack(await stream.read_bytes(n))


def _failure(e: BaseException) -> bytes:
    """An uncaught error as a failure message: the pickled exception (or its repr
    when it does not pickle), as Dask's ``error_message`` sends it."""
    try:
        data = pickle.dumps(e)
        pickle.loads(data)
    except Exception:  # noqa: BLE001 - anything that does not round-trip
        data = pickle.dumps(Exception(repr(e)))
    return encode(FAILED, data)


def _frame_of(reply: Any) -> np.ndarray | None:
    """The array a reply carries as a frame of its own (a C-contiguous array a
    handler returned as ``to_serialize(array)``: a large row get's rows), else None."""
    data = reply.data if isinstance(reply, Serialize) else None
    if isinstance(data, np.ndarray) and data.flags.c_contiguous:
        return data
    return None


async def serve(comm: Any, handlers: dict[str, Handler]) -> None:
    """Serve lean requests on ``comm`` until it closes: the ``daskangel_lean``
    handler.  ``handlers``: ``{op: handler(comm, **message)}``; a handler may read
    bare bytes that follow its request from ``comm`` itself."""
    stream = raw_stream(comm)
    if stream is None:  # not a TCP comm: the caller never sends lean frames here
        await comm.close()
        return
    comm.allow_offload = False
    try:
        while True:
            kind, req = await _read(stream)
            if kind != REQUEST or not isinstance(req, tuple) or len(req) != 2:
                raise CommClosedError(f"lean wire: expected a request, got kind {kind}")
            op, msg = req
            fn = handlers.get(op)
            if fn is None or not isinstance(msg, dict):
                # its bare bytes (if any) cannot be skipped: the comm is out of step
                raise CommClosedError(f"lean wire: no handler for op {op!r}")
            frame = None
            try:
                reply = await fn(comm, **msg)
                frame = _frame_of(reply)
                out = encode(REPLY, reply) if frame is None else encode(FRAME, frame.nbytes)
            except (CommClosedError, OSError):
                raise
            except Exception as e:  # as Dask's handle_comm: sent back to the caller
                logger.exception("daskangel: exception in lean op %s", op)
                if comm.closed():
                    raise
                out = _failure(e)
            if frame is None:
                await stream.write(out)
            else:  # (awaited: the reply's buffer is not reused before it is written)
                stream.write(out)
                await stream.write(memoryview(frame).cast("B"))  # type: ignore[arg-type]
    except (CommClosedError, OSError) as e:
        if not comm.closed():
            logger.info("daskangel: lean comm from %s closed: %s", comm.peer_address, e)
    finally:
        if not comm.closed():
            comm.abort()


class LeanPool:
    """Kept comms of the lean wire, by server address (one per call in flight).

    ``connection_args`` and ``timeout`` as Dask's ``ConnectionPool`` takes them.

    Example
    -------
    >>> LeanPool({}, 5.0).supports("inproc://10.0.0.1/1/2")
    False
    """

    def __init__(self, connection_args: dict[str, Any], timeout: float) -> None:
        self.connection_args = connection_args
        self.timeout = timeout
        # {address: [idle comm, ...]}
        self._idle: dict[str, list[Any]] = {}
        # every comm this pool opened and has not seen closed
        self._open: set[Any] = set()
        self.calls = 0  # requests answered over this pool's comms
        # the same comms detached for callers' threads (daskangel._leandirect), made
        # on first use; this pool opened them and its close() aborts them
        self.direct: Any = None

    @staticmethod
    def supports(address: str) -> bool:
        """Whether calls to ``address`` can take the lean wire (TCP or TLS)."""
        return address.startswith(("tcp://", "tls://"))

    async def take(self, address: str) -> Any:
        """An idle comm to ``address``, or a new one serving the lean wire."""
        idle = self._idle.get(address)
        while idle:
            comm = idle.pop()
            if not comm.closed():
                return comm
            self._open.discard(comm)
        comm = await connect(address, timeout=self.timeout, **self.connection_args)
        if raw_stream(comm) is None:  # (supports() said it would be TCP)
            comm.abort()
            raise CommClosedError(f"lean wire: {address} gave a comm without a stream")
        comm.name = "daskangel-lean"
        self._open.add(comm)
        try:
            await comm.write({"op": LEAN_HANDLER, "reply": False}, on_error="raise")
        except BaseException:
            self.drop(comm)
            raise
        return comm

    def give_back(self, address: str, comm: Any) -> None:
        """``comm`` answered its call: idle until the next call to ``address``."""
        if comm.closed():
            self._open.discard(comm)
        else:
            self._idle.setdefault(address, []).append(comm)

    def drop(self, comm: Any) -> None:
        """``comm`` failed or was left out of step: abort it, never reuse it."""
        self._open.discard(comm)
        comm.abort()

    @property
    def open(self) -> int:
        """How many comms this pool holds (idle or in a call)."""
        return len(self._open)

    def close(self) -> None:
        """Abort every comm (the servers' handlers then end)."""
        for comm in list(self._open):
            comm.abort()
        self._open.clear()
        self._idle.clear()


async def lean_all(
    pool: LeanPool, calls: list[Call], raw: list[list[Any]] | None = None
) -> list[Any]:
    """``_recv.send_all_recv_into`` over the lean wire: every request (and its
    ``raw`` frames, as bare bytes after it) is written first, then the replies
    are read in order.  A reply that is one array (a large row get's) is read
    into its call's target when the target is exactly its size, as
    :func:`._recv.read_into_targets` places frames.  Any failure aborts every comm of the
    batch; a closed comm raises :class:`~distributed.comm.CommClosedError`; an
    uncaught error of a handler is raised here as the handler raised it."""
    comms: list[tuple[str, Any]] = []
    try:
        for address, *_ in calls:
            comms.append((address, await pool.take(address)))
        for i, ((_, comm), (_, op, msg, _, _)) in enumerate(zip(comms, calls, strict=True)):
            if raw is not None:
                msg = {**msg, "follow": {**msg["follow"], "raw": True}}
            stream = comm.stream
            if stream is None:
                raise CommClosedError("lean wire: the comm closed")
            stream.write(encode(REQUEST, [_op_of(op), msg]))
            if raw is not None:
                for f in raw[i]:  # (tornado holds each until written: not reused before)
                    stream.write(memoryview(f).cast("B"))
        out = []
        for (_, comm), call in zip(comms, calls, strict=True):
            if comm.stream is None:
                raise CommClosedError("lean wire: the comm closed")
            out.append(await _read_reply(comm.stream, call))
    except BaseException as e:
        for _, comm in comms:
            pool.drop(comm)
        if isinstance(e, OSError) and not isinstance(e, CommClosedError):
            raise CommClosedError(f"lean wire: {e!r}") from e
        raise
    for address, comm in comms:
        pool.give_back(address, comm)
    pool.calls += len(comms)
    return replies_of(out)


def replies_of(out: list[tuple[int, Any]]) -> list[Any]:
    """The replies of ``(kind, body)`` messages read in step; a handler's
    uncaught error (a FAILED message) raised here as the handler raised it."""
    replies = []
    for kind, reply in out:
        if kind == FAILED:
            raise pickle.loads(reply)
        replies.append(reply)
    return replies


async def _read_reply(stream: Any, call: Call) -> tuple[int, Any]:
    """A reply; an array frame is read into the call's target when it has exactly
    the target's size (the target then is the reply), else into bytes of its own."""
    kind, body = await _read(stream)
    if kind != FRAME:
        return kind, body
    n = int(body)
    sizes, targets = call[3], call[4]
    if sizes and sizes[0] == n and targets[0] is not None:
        target = targets[0]
        view = memoryview(target.reshape(-1).view(np.uint8))
        got = 0
        while got < n:
            got += await stream.read_into(view[got : got + (1 << 30)])
        return REPLY, target
    return REPLY, await stream.read_bytes(n)


def _op_of(handler: str) -> str:
    """The lean op of a Dask handler name (``daskangel_push`` -> ``push``)."""
    return handler.removeprefix("daskangel_")
