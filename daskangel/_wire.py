"""The transport seam: how a caller reaches one PS server.

Two transports exist, chosen per context with ``PSContext(transport=...)``:

* ``"handlers"`` (default): the worker runs a ``daskangel_ps`` comm handler installed
  by a WorkerPlugin; a call is one request/response on a pooled Dask comm, numpy
  arrays travel as zero-copy frames.
* ``"actors"``: each server is a Dask actor; a call goes through the worker's
  ``actor_execute`` handler and runs in the worker's single actor thread.

``benchmarks/bench_ps.py`` measures both; see ``benchmarks/RESULTS.md``.  Both the
data plane and the scheduler plugin use this module, which imports neither.

Example
-------
>>> actor_key("tcp://127.0.0.1:4000", 1)
'daskangel-ps-actor-tcp://127.0.0.1:4000-1'
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from distributed.protocol import to_serialize

from . import config
from ._recv import send_recv_into
from ._shm import UNAVAILABLE, ShmBuffers, place, span
from .errors import InvalidArgumentError

__all__ = [
    "TRANSPORTS",
    "actor_key",
    "NARROW",
    "call_server",
    "check_wire_config",
    "drop_narrow",
    "error_reply",
    "payload_nbytes",
    "raise_if_error",
    "split_follow",
    "unwrap_arrays",
    "wrap_arrays",
]

_ERROR_KEY = "__daskangel_error__"


def error_reply(e: BaseException) -> dict[str, str]:
    """A daskangel error as plain values, so any receiver (even the scheduler,
    which does not unpickle) re-raises it with its class and message."""
    return {_ERROR_KEY: type(e).__name__, "message": str(e)}


def raise_if_error(reply: Any) -> Any:
    """``reply``, or the daskangel error an :func:`error_reply` carries, raised."""
    if isinstance(reply, dict) and _ERROR_KEY in reply:
        from . import errors

        cls = getattr(errors, str(reply[_ERROR_KEY]), errors.DaskAngelError)
        raise cls(reply["message"])
    return reply


TRANSPORTS = ("handlers", "actors")


def actor_key(address: str, index: int) -> str:
    """The Dask key of the actor serving ``(address, index)``."""
    return f"daskangel-ps-actor-{address}-{index}"


# Dask's TCP comm reads a message's first array frame into the same buffer as the
# message header, at whatever offset the header ends: a float32 block sent first
# arrived unaligned (numpy then adds it through a slow buffered loop).  A call
# carrying a large array therefore sends this tiny array first, so each real array
# frame gets a buffer, and an alignment, of its own.  Receivers drop ``pad``.
_PAD = to_serialize(np.zeros(8, np.uint8))


# Arrays up to ``daskangel.client.inline-array-bytes`` travel inside the msgpack
# message as {"__daskangel_nd__": [dtype, shape, bytes]}: Dask's serialisation of a
# numpy array (a header, a frame, a dispatch on each side) costs more than the
# whole rest of a small request.  Larger arrays are framed without copies.
_ND = "__daskangel_nd__"


def wrap_arrays(obj: Any, inline: int | None = None) -> Any:
    """Mark every numpy array in a message for framing by Dask's comms (zero-copy),
    or carry it inline when it has at most ``inline`` bytes (default: the config)."""
    if inline is None:
        inline = config.get_bytes("daskangel.client.inline-array-bytes")
    if isinstance(obj, np.ndarray):
        if obj.nbytes <= inline and obj.dtype.kind in "biuf":
            return {_ND: [obj.dtype.str, list(obj.shape), obj.tobytes()]}
        return to_serialize(obj)
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, dict):
        return {k: wrap_arrays(v, inline) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [wrap_arrays(v, inline) for v in obj]
    return obj


def unwrap_arrays(obj: Any) -> Any:
    """Undo :func:`wrap_arrays`' inline arrays (as new, writeable arrays)."""
    if isinstance(obj, dict):
        nd = obj.get(_ND)
        if nd is not None and len(obj) == 1:
            return np.frombuffer(nd[2], dtype=np.dtype(nd[0])).reshape(nd[1]).copy()
        return {k: unwrap_arrays(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [unwrap_arrays(v) for v in obj]
    if isinstance(obj, tuple):  # Dask's msgpack decodes some lists as tuples
        return tuple(unwrap_arrays(v) for v in obj)
    return obj


def _has_large_array(obj: Any, limit: int) -> bool:
    """True when a numpy array of at least ``limit`` bytes is somewhere in ``obj``."""
    if isinstance(obj, np.ndarray):
        return obj.nbytes >= limit
    if isinstance(obj, dict):
        return any(_has_large_array(v, limit) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return any(_has_large_array(v, limit) for v in obj)
    return False


def payload_nbytes(obj: Any) -> int:
    """Bytes of the array payload in a request or reply: numpy arrays and scalars
    (and any object with an integer ``nbytes``, such as ``sparse.COO``) and raw
    bytes, in nested dicts, lists and tuples; plain Python values (names, ids,
    options) are the message's envelope and count nothing.  What the servers count
    as bytes in and out.

    Example
    -------
    >>> payload_nbytes({"parts": [{"cols": np.arange(4)}], "tag": b"ab", "n": 3})
    34
    >>> payload_nbytes([np.float64(1.5), 2.5])
    8
    """
    if isinstance(obj, (np.ndarray, np.generic)):
        return int(obj.nbytes)
    if isinstance(obj, dict):
        return sum(payload_nbytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(payload_nbytes(v) for v in obj)
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return len(obj) if not isinstance(obj, memoryview) else obj.nbytes
    if isinstance(obj, (str, int, float, complex, type(None))):
        return 0
    n = getattr(obj, "nbytes", None)
    return int(n) if isinstance(n, (int, np.integer)) else 0


def check_wire_config() -> None:
    """Read every ``daskangel.client`` key a call's framing uses, raising on a bad
    value.  Callers run it before sending any part of a request: otherwise the
    first server's message could fail on the value while the others were sent."""
    for key in ("inline-array-bytes", "align-bytes", "follow-bytes", "follow-pack-bytes"):
        config.get_bytes(f"daskangel.client.{key}")


# the fields of an update's parts that may carry its bulk
_BULK = ("values", "packed", "coo_rows", "coo_cols", "csr_rows", "csr_len", "csr_cols")
_ALIGN = 64  # each array of a packed follow frame starts on a cache line
# a part's ``{field: dtype}``: arrays whose every value the planner checked fits that
# narrower integer type (``psarray._csrplan``); applied in a follow frame, else dropped
NARROW = "narrow"


def split_follow(
    op: str, kwargs: dict[str, Any], alloc: Callable[[int], np.ndarray] | None = None
) -> tuple[dict[str, Any], list[np.ndarray]]:
    """An update's kwargs without its bulk arrays, and the frames that carry them.

    When the arrays of an update's parts (dense ``values``, packed sparse pairs,
    coordinates, compressed rows) add up to at least
    ``daskangel.client.follow-bytes``, every one of them travels in a message of
    its own right after the request, which the server reads into reused buffers
    (:mod:`daskangel.psarray._recvpool`).  Arrays up to
    ``daskangel.client.follow-pack-bytes`` are copied into *one* frame (64-byte
    aligned, in a buffer from ``alloc(nbytes)``, default ``np.empty``): Dask's
    serialisation costs ~30-70 us an array on each side, more than the copy of
    a few hundred KiB, and a 10,000-row sparse increment has a dozen of them a
    server.  Larger arrays are frames of their own (no copy).

    The request then says ``follow = {"frames": [bytes of each frame],
    "fields": [[part, field, frame, offset, dtype, shape], ...]}``.  Anything
    else: ``(kwargs, [])``, sent as one message.

    Example
    -------
    >>> import dask
    >>> parts = [{"block": 0, "csr_cols": np.arange(3, dtype="int32"),
    ...           "values": np.ones(3, "float32")}]
    >>> with dask.config.set({"daskangel.client.follow-bytes": 1}):
    ...     kw, frames = split_follow("update", {"parts": parts, "add": True})
    >>> kw["follow"]["fields"]
    [[0, 'values', 0, 0, '<f4', [3]], [0, 'csr_cols', 0, 64, '<i4', [3]]]
    >>> kw["follow"]["frames"], kw["parts"]
    ([128], [{'block': 0}])
    """
    parts = kwargs.get("parts") if op == "update" else None
    if not parts:
        return kwargs, []
    found = [
        (i, k, p[k], np.dtype(p.get(NARROW, {}).get(k, p[k].dtype)))
        for i, p in enumerate(parts)
        for k in _BULK
        if isinstance(p.get(k), np.ndarray) and p[k].dtype.kind in "biuf"
    ]
    if not found or sum(a.nbytes for _, _, a, _ in found) < config.get_bytes(
        "daskangel.client.follow-bytes"
    ):
        return drop_narrow(op, kwargs), []
    limit = config.get_bytes("daskangel.client.follow-pack-bytes")
    small = [f for f in found if f[2].size * f[3].itemsize <= limit]
    frames: list[np.ndarray] = []
    fields: list[list[Any]] = []
    if len(small) > 1:
        offsets, pos = [], 0
        for _, _, a, dt in small:
            offsets.append(pos)
            pos += -(-a.size * dt.itemsize // _ALIGN) * _ALIGN
        buf = np.empty(pos, np.uint8) if alloc is None else alloc(pos)
        for (i, k, a, dt), off in zip(small, offsets, strict=True):
            dst = buf[off : off + a.size * dt.itemsize].view(dt).reshape(a.shape)
            # a narrower type only where the planner checked every value fits
            np.copyto(dst, a, casting="no" if dt == a.dtype else "unsafe")
            fields.append([i, k, 0, off, dt.str, list(a.shape)])
        frames.append(buf)
    else:
        small = []
    for i, k, a, dt in found:
        if small and a.size * dt.itemsize <= limit:
            continue
        fields.append([i, k, len(frames), 0, dt.str, list(a.shape)])
        frames.append(np.ascontiguousarray(a, dtype=dt))
    moved: dict[int, set[str]] = {}
    for i, k, _, _ in found:
        moved.setdefault(i, {NARROW}).add(k)
    rest = [
        {k: x for k, x in p.items() if k not in moved.get(i, (NARROW,))}
        for i, p in enumerate(parts)
    ]
    follow = {"frames": [int(f.nbytes) for f in frames], "fields": fields}
    return {**kwargs, "parts": rest, "follow": follow}, frames


def drop_narrow(op: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """An update's kwargs without its parts' ``narrow`` hints (sent as planned:
    narrowing is done only while copying into a follow frame)."""
    parts = kwargs.get("parts") if op == "update" else None
    if not parts or not any(NARROW in p for p in parts):
        return kwargs
    return {**kwargs, "parts": [{k: x for k, x in p.items() if k != NARROW} for p in parts]}


def _pad(kwargs: dict[str, Any]) -> dict[str, Any]:
    """``{"pad": _PAD}`` when the message carries an array worth aligning, else ``{}``."""
    limit = config.get_bytes("daskangel.client.align-bytes")
    return {"pad": _PAD} if _has_large_array(kwargs, limit) else {}


async def call_server(
    rpc: Any,
    address: str,
    index: int,
    op: str,
    transport: str,
    cost: int,
    kwargs: dict[str, Any],
    into: tuple[list[int], list[np.ndarray | None]] | None = None,
    alloc: Callable[[int], np.ndarray] | None = None,
    shm: ShmBuffers | None = None,
) -> Any:
    """Run ``op`` on server ``(address, index)`` over ``rpc`` (a ConnectionPool).

    ``into = (sizes, targets)``: the reply is a list of arrays, and those of
    ``sizes[k]`` bytes are read from the socket straight into ``targets[k]``
    (see :mod:`daskangel._recv`; the caller checks which ones landed).  ``alloc``:
    where an update's packed follow frame is copied to (:func:`split_follow`).
    ``shm``: this process's shared buffers, through which a large packed update
    reaches a server of this machine (:mod:`daskangel._shm`, :func:`_via_shm`).
    """
    if transport == "handlers":
        packed = op == "update" and all("packed" in p for p in kwargs.get("parts") or [{}])
        kwargs, values = split_follow(op, kwargs, alloc)
        if values:
            # the follow description holds plain lists only: not walked by wrap_arrays
            # (a dozen fields of six items: ~50 calls a request on the event loop)
            desc = kwargs.pop("follow")
            msg = {"ps_op": op, "server": index, "cost": cost, **wrap_arrays(kwargs)}
            if packed and shm is not None:
                reply = await _via_shm(rpc, address, msg, desc, values, shm)
                if reply is not UNAVAILABLE:
                    return unwrap_arrays(raise_if_error(reply))
            msg["follow"] = desc
            follow = {"values": [to_serialize(v) for v in values]}
            reply = await send_recv_into(rpc, address, "daskangel_ps", msg, [], [], follow)
            return unwrap_arrays(raise_if_error(reply))
        msg = {**_pad(kwargs), "ps_op": op, "server": index, "cost": cost, **wrap_arrays(kwargs)}
        sizes, targets = into if into is not None else ([], [])
        reply = await send_recv_into(rpc, address, "daskangel_ps", msg, sizes, targets)
        return unwrap_arrays(raise_if_error(reply))
    if transport == "actors":
        kwargs = drop_narrow(op, kwargs)
        msg = {
            "actor": actor_key(address, index),
            "function": "call",
            "kwargs": _pad(kwargs),  # before "args": framed first
            "args": [to_serialize(op), to_serialize(kwargs)],
        }
        if into is not None:
            resp = await send_recv_into(rpc, address, "actor_execute", msg, *into)
        else:
            resp = await rpc(address).actor_execute(**msg)
        if resp["status"] == "error":
            exc = resp["exception"]
            raise exc if isinstance(exc, BaseException) else RuntimeError(str(exc))
        return raise_if_error(resp["result"])
    raise InvalidArgumentError(f"transport: expected one of {TRANSPORTS}, got {transport!r}")


async def _via_shm(
    rpc: Any,
    address: str,
    msg: dict[str, Any],
    desc: dict[str, Any],
    values: list[np.ndarray],
    shm: ShmBuffers,
) -> Any:
    """Send an update whose follow frames wait in one of ``shm``'s buffers
    (:mod:`daskangel._shm`); its reply, or :data:`UNAVAILABLE` when it must go
    over the socket (a server not known to map them, too few bytes, no buffer
    free): then nothing was applied.

    Only packed sparse parts go this way: sparse blocks apply them before
    replying, so the buffer is free again once the reply is here (the server
    never defers such a request either).  Frames the planner packed straight into
    a leased buffer (:meth:`ShmBuffers.lease`) are named where they lie."""
    if address in shm.refused or not config.get("daskangel.client.shm"):
        return UNAVAILABLE
    need = span(values)
    if need < config.get_bytes("daskangel.client.shm-bytes"):
        return UNAVAILABLE
    leased = shm.locate(values)  # packed straight into a leased buffer: no copy
    if leased is not None:
        seg, at = leased
        need = max(a + int(v.nbytes) for a, v in zip(at, values, strict=True))
    else:
        taken = shm.take(need)
        if taken is None:
            return UNAVAILABLE
        seg = taken
    try:
        if leased is None:
            at = place(seg, values)
        reply = await send_recv_into(
            rpc, address, "daskangel_ps", {**msg, "follow": {**desc, "at": at, "shm": seg.desc(need)}},
            [], [],
        )  # fmt: skip
    except BaseException:
        shm.retire(seg)  # the server may still be reading it
        raise
    if leased is None:
        shm.release(seg)  # (a leased buffer: once its last view goes)
    if isinstance(reply, str) and reply == UNAVAILABLE:
        shm.refused.add(address)
        return UNAVAILABLE
    return reply
