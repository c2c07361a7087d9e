"""Receiving a reply's numpy frames straight into the caller's output array.

A whole-array ``get`` used to receive each block into a buffer of its own (Dask's
comm allocates one per frame) and then copy every block into the result: one more
pass over all the bytes than the transport itself makes.  For a large get the
caller now allocates the result first and reads each large block's frame from the
socket directly into the block's place in it (:func:`send_recv_into`); the
deserialised block is then a view of the result and needs no copy.

This follows Dask's TCP comm (``distributed.comm.tcp.TCP.read``) step by step and
deserialises with Dask's own ``from_frames``; the only difference is where the
bytes of some frames land.  A frame goes to a target only if its length is the
exact byte count expected for that part (parts under ``direct-read-bytes`` are
not matched, so small header frames never can be).  Anything unexpected (another
comm than TCP, sharded or compressed frames, an error reply) reads as usual, and
the caller copies whatever did not land in place (:func:`landed`).

Example
-------
>>> import numpy as np
>>> out = np.zeros(8, "float32")
>>> landed(out[2:6], out[2:6]), landed(out[2:6].copy(), out[2:6])
(True, False)
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import struct
import warnings
from types import SimpleNamespace
from typing import Any

import numpy as np
from distributed.protocol import to_serialize

__all__ = [
    "landed", "match_frames", "raw_stream", "read_into_targets", "send_recv_into", "tcp_internals",
]  # fmt: skip

#: The pieces of ``distributed.comm.tcp`` this module reads with, and the
#: parameters each must take (checked once; see :func:`tcp_internals`).
_NEEDED = {
    "TCP": None,
    "convert_stream_closed_error": ("obj", "exc"),
    "from_frames": ("frames", "deserialize", "allow_offload"),
    "read_bytes_rw": ("stream", "n"),
}


@functools.cache
def tcp_internals() -> SimpleNamespace | None:
    """Dask's TCP reading pieces this module follows, or ``None`` if they changed.

    ``None`` (with one ``RuntimeWarning`` per process) when any piece is missing or
    no longer takes the parameters used here: :func:`read_into_targets` then reads
    through the public ``comm.read()``, which is correct but copies each large
    frame once more.  ``tests/test_recv.py`` fails loudly in that case, so a Dask
    upgrade that moves these internals is seen in CI rather than as a slowdown.

    .. warning::
       These are private to ``distributed``; the wire layout read here
       (``[nosplit bytes][n_frames][lengths][frames]``) is checked by the tests
       against Dask's own ``TCP.write`` on every run of the suite.
    """
    try:
        from distributed.comm import tcp
        from tornado.iostream import StreamClosedError
    except ImportError as e:  # pragma: no cover - distributed without tornado
        return _vanished(str(e))
    found: dict[str, Any] = {"StreamClosedError": StreamClosedError}
    for name, params in _NEEDED.items():
        obj = getattr(tcp, name, None)
        if obj is None:
            return _vanished(f"distributed.comm.tcp.{name} is gone")
        if params is not None:
            try:
                have = inspect.signature(obj).parameters
            except (TypeError, ValueError):
                return _vanished(f"distributed.comm.tcp.{name} has no signature")
            missing = [p for p in params if p not in have]
            if missing:
                return _vanished(f"distributed.comm.tcp.{name} no longer takes {missing}")
        found[name] = obj
    found["SSLError"] = getattr(tcp, "SSLError", OSError)
    return SimpleNamespace(**found)


def _vanished(why: str) -> SimpleNamespace | None:
    warnings.warn(
        f"daskangel reads large PS replies straight into their output by following "
        f"Dask's TCP reader, but {why} (distributed version changed?): falling back "
        f"to comm.read(), correct but one copy slower. Please report this with your "
        f"distributed version.",
        RuntimeWarning,
        stacklevel=3,
    )
    return None  # the caller reads through comm.read()


def landed(result: Any, target: np.ndarray | None) -> bool:
    """True when ``result`` is exactly ``target``'s memory (nothing to copy)."""
    return (
        target is not None
        and isinstance(result, np.ndarray)
        and result.shape == target.shape
        and result.dtype == target.dtype
        and result.__array_interface__["data"][0] == target.__array_interface__["data"][0]
        and result.flags.c_contiguous
    )


def match_frames(
    lengths: tuple[int, ...] | list[int], sizes: list[int], targets: list[np.ndarray | None]
) -> dict[int, np.ndarray]:
    """Which frames to read into which target: ``{frame_index: target}``.

    ``sizes[k]`` is the byte count of part ``k``'s data (``0``: too small to match),
    ``targets[k]`` where it goes (``None``: read it as usual).  Parts are matched in
    order, each to the next frame of exactly its size, so the data frames of the
    parts before it (matched or not) can never be taken for it.  If any part with a
    size finds no frame, nothing is matched.
    """
    out: dict[int, np.ndarray] = {}
    i = 0
    for size, target in zip(sizes, targets, strict=True):
        if size <= 0:
            continue
        while i < len(lengths) and lengths[i] != size:
            i += 1
        if i == len(lengths):
            return {}
        if target is not None:
            out[i] = target
        i += 1
    return out


async def read_into_targets(comm: Any, sizes: list[int], targets: list[np.ndarray | None]) -> Any:
    """``comm.read()``, reading matched frames into their targets (TCP comms only)."""
    tcp = tcp_internals()
    stream = getattr(comm, "stream", None)
    if tcp is None or not isinstance(comm, tcp.TCP) or stream is None or not any(sizes):
        # nothing to place: Dask's own reader takes a small message in two reads
        # (its length, then the rest), where the steps below take four
        return await comm.read()
    try:
        # [total nosplit bytes][n_frames][length of each frame] then the frames
        await stream.read_bytes(8)
        (n_frames,) = struct.unpack("Q", await stream.read_bytes(8))
        lengths = struct.unpack(f"{n_frames}Q", await stream.read_bytes(8 * n_frames))
        direct = match_frames(lengths, sizes, targets)
        frames: list[Any] = []
        i = 0
        while i < n_frames:
            target = direct.get(i)
            if target is not None:
                view = memoryview(target.reshape(-1).view(np.uint8))  # type: ignore[arg-type]
                got = 0
                while got < lengths[i]:
                    got += await stream.read_into(view[got : got + (1 << 30)])
                frames.append(view)
                i += 1
                continue
            j = i  # read a run of frames that go nowhere special in one call
            while j < n_frames and j not in direct:
                j += 1
            run = sum(lengths[i:j])
            buf = await tcp.read_bytes_rw(stream, run) if run else memoryview(b"")
            pos = 0
            for k in range(i, j):
                frames.append(buf[pos : pos + lengths[k]])
                pos += lengths[k]
            i = j
    except (tcp.StreamClosedError, tcp.SSLError) as e:
        comm.stream = None
        comm._closed = True
        tcp.convert_stream_closed_error(comm, e)
    except BaseException:
        comm.abort()
        raise
    try:
        return await tcp.from_frames(
            frames, deserialize=comm.deserialize, allow_offload=comm.allow_offload
        )
    except EOFError:
        from distributed.comm.core import CommClosedError

        comm.abort()
        raise CommClosedError("aborted stream on truncated data") from None


async def send_recv_into(
    pool: Any,
    address: str,
    op: str,
    msg: dict[str, Any],
    sizes: list[int],
    targets: list[np.ndarray | None],
    follow: dict[str, Any] | None = None,
) -> Any:
    """One pooled request/response like ``pool(address).<op>(**msg)``, with the
    reply's large frames read into ``targets`` (see :func:`match_frames`).

    ``follow``: a second message written right after the request, on the same
    comm, for the handler to read itself (an update's values, received into
    reused buffers: :mod:`daskangel.psarray._recvpool`)."""
    comm = await pool.connect(address)
    # Dask's comm measures every message (dask.sizeof) to decide whether to
    # (de)serialise it in a thread; a PS message is a small dict and zero-copy
    # numpy frames, so the measuring (~50 us a message) and the thread hop only
    # cost time.  The comms of this pool carry nothing but PS calls.
    comm.allow_offload = False
    prev_name, comm.name = comm.name, f"ConnectionPool.{op}"
    try:
        force_close = please_close = False
        try:
            await comm.write({**msg, "op": op, "reply": True}, on_error="raise")
            if follow is not None:
                await comm.write(follow, on_error="raise")
            response = await read_into_targets(comm, sizes, targets)
        except (TimeoutError, OSError):
            force_close = True  # as distributed.core.send_recv: never reuse this comm
            raise
        except asyncio.CancelledError:
            please_close = True
            raise
        finally:
            if force_close:
                comm.abort()
            elif please_close:
                await comm.close()
    finally:
        pool.reuse(address, comm)
        comm.name = prev_name
    _raise_remote(response)
    return response


def raw_stream(comm: Any) -> Any:
    """``comm``'s tornado stream when bytes may be written to it or read from it
    outside Dask's messages (a TCP or TLS comm; see :func:`send_all_recv_into`),
    else None."""
    tcp = tcp_internals()
    if tcp is None or not isinstance(comm, tcp.TCP):
        return None
    return getattr(comm, "stream", None)


async def send_all_recv_into(
    pool: Any,
    calls: list[tuple[str, str, dict[str, Any], list[int], list[np.ndarray | None]]],
    follows: list[dict[str, Any]] | None = None,
    raw: list[list[np.ndarray]] | None = None,
) -> list[Any]:
    """Several :func:`send_recv_into` calls ``(address, op, msg, sizes, targets)``
    made in one coroutine: every request is written first, then the replies are
    read in order (a later reply waits in its socket meanwhile).

    For small requests to several servers (a random-row get of a few hundred
    kilobytes): no task per call and no loop turn to start them, which on the
    2-core benchmark VM was a tenth of a millisecond-scale call.  Only for
    replies small enough to wait in a socket's buffer: a large one would hold
    up its sender until the replies before it are read.  Any failure aborts
    every comm of the batch (a reply may still be in flight on it).  ``follows``:
    a message written right after each request (as :func:`send_recv_into`'s
    ``follow``; a sparse row increment's packed frame).  ``raw``: frames written
    right after each request as bare bytes on a TCP comm's stream (the request's
    ``follow`` then says ``"raw": True`` and the handler reads exactly those
    bytes), or as a follow message ``{"values": frames}`` on any other comm: no
    Dask serialisation of either end (~24 us to frame a 260 KB array and ~19 us
    to unframe it, measured on the 2-core benchmark VM)."""
    comms: list[tuple[str, Any]] = []
    try:
        for address, _, _, _, _ in calls:
            comm = await pool.connect(address)
            comm.allow_offload = False  # as in send_recv_into: no sizing, no thread hop
            comms.append((address, comm))
        for i, ((_, comm), (_, op, msg, _, _)) in enumerate(zip(comms, calls, strict=True)):
            stream = raw_stream(comm) if raw is not None else None
            if stream is not None:
                msg = {**msg, "follow": {**msg["follow"], "raw": True}}
            await comm.write({**msg, "op": op, "reply": True}, on_error="raise")
            if follows is not None:
                await comm.write(follows[i], on_error="raise")
            elif raw is not None and stream is None:
                values = [to_serialize(f) for f in raw[i]]
                await comm.write({"values": values}, on_error="raise")
            elif raw is not None and stream is not None:
                for f in raw[i]:  # (tornado holds each until written: not reused before)
                    stream.write(memoryview(f).cast("B"))  # type: ignore[arg-type]
        out = [
            await read_into_targets(comm, sizes, targets)
            for (_, comm), (_, _, _, sizes, targets) in zip(comms, calls, strict=True)
        ]
    except BaseException:
        for _, comm in comms:
            comm.abort()
        raise
    finally:
        for address, comm in comms:
            pool.reuse(address, comm)
    for response in out:
        _raise_remote(response)
    return out


def _raise_remote(response: Any) -> None:
    """Raise the handler's own exception if ``response`` reports one (as
    :func:`distributed.core.send_recv` does)."""
    if isinstance(response, dict) and response.get("status") == "uncaught-error":
        from distributed.core import clean_exception

        _, exc, tb = clean_exception(**response)
        assert exc is not None
        raise exc.with_traceback(tb)
