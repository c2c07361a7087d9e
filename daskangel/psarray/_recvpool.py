"""Receiving an update's values into reused buffers on the server.

Dask's TCP comm reads every frame of a message into a buffer allocated for it,
and a Dask worker returns freed memory to the kernel at once
(``MALLOC_TRIM_THRESHOLD_``, set by the nanny), so each large increment arrived
in memory the kernel had to map again, page by page: on the 2-core benchmark VM
the page faults cost about as much as the copy out of the socket.

A large dense update therefore travels as two messages on the same comm (the
client's side is ``daskangel._recv.send_recv_into(..., follow=...)``): the
request, with ``follow = [[part, field, bytes], ...]``, then a message holding
only those arrays (dense values, packed sparse pairs, coordinates).  The ``daskangel_ps`` handler reads the second message
itself (:func:`read_follow`), straight into a buffer of a :class:`ReceivePool`,
whose buffers are touched once and reused as soon as nothing refers to them
(the write-behind apply that read them has finished).  A request that fails
still consumes its follow message, so the comm stays in step.

Example
-------
>>> pool = ReceivePool(limit=1 << 20)
>>> a, b = pool.take([1000, 24])
>>> a.nbytes, b.nbytes, b.ctypes.data % 64
(1000, 24, 0)
>>> del a, b
>>> x = pool.take([512])[0]; y = pool.take([512])[0]  # both held: two buffers
>>> x.base is y.base
False
>>> n = pool.nbytes; del x, y
>>> _ = pool.take([512]); pool.nbytes == n  # released ones are reused
True
"""

from __future__ import annotations

import math
import sys
import threading
from typing import Any

import numpy as np

from .. import config
from .._recv import raw_stream, read_into_targets
from .._shm import HEADER, ShmMaps
from ..errors import InvalidArgumentError

__all__ = ["ReceivePool", "cut_fields", "pooled", "read_follow", "shm_frames"]

_ALIGN = 64  # each part's values start on a cache line


def _padded(n: int) -> int:
    return -(-n // _ALIGN) * _ALIGN


class ReceivePool:
    """Buffers for received values, reused once no array refers to them.

    ``limit`` caps the bytes the pool keeps (default
    ``daskangel.server.receive-pool-bytes``); a request that does not fit gets a
    buffer of its own, freed as usual.  :meth:`take` may be called from several
    threads (a server's get gathers its reply on the event loop or in the
    server's thread).
    """

    def __init__(self, limit: int | None = None) -> None:
        self.limit = (
            config.get_bytes("daskangel.server.receive-pool-bytes") if limit is None else limit
        )
        # pooled buffers: uint8 arrays owning their memory.  A view of one has it as
        # ``base`` (numpy collapses view chains to the owner), so a buffer is free
        # when only this list refers to it.
        self._bufs: list[np.ndarray] = []
        self._offs: list[int] = []  # where each buffer's first 64-byte boundary lies
        self._lock = threading.Lock()

    def __reduce__(self) -> Any:
        # a plugin holding a pool is pickled to the workers: an empty pool there
        return (ReceivePool, (self.limit,))

    @property
    def nbytes(self) -> int:
        return sum(b.nbytes for b in self._bufs)

    def _free(self, i: int) -> bool:
        # references: the list's and getrefcount's argument; every view adds one
        return sys.getrefcount(self._bufs[i]) <= 2

    def _buffer(self, total: int) -> tuple[np.ndarray, int]:
        need = total + _ALIGN  # room to start on a 64-byte boundary wherever it lies
        best = -1
        bufs = self._bufs
        for i in range(len(bufs)):
            size = bufs[i].nbytes
            if size >= need and (best < 0 or size < bufs[best].nbytes) and self._free(i):
                best = i
        if best >= 0:
            return bufs[best], self._offs[best]
        if need > self.limit:
            return _aligned(np.empty(need, np.uint8))
        # make room: drop free buffers, smallest first, until the new one fits
        while self.nbytes + need > self.limit:
            free = [i for i in range(len(bufs)) if self._free(i)]
            if not free:
                return _aligned(np.empty(need, np.uint8))
            drop = min(free, key=lambda i: bufs[i].nbytes)
            del bufs[drop], self._offs[drop]
        buf, pos = _aligned(np.empty(need, np.uint8))
        bufs.append(buf)
        self._offs.append(pos)
        return buf, pos

    def array(self, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        """An uninitialised C-contiguous array of ``shape``, 64-byte aligned, in a
        pooled buffer: :meth:`take` of one size without the list, the slice, the
        view and the reshape (a random-row get makes two or three of these a call;
        2.4 against 6.3 us each)."""
        dt = dtype if isinstance(dtype, np.dtype) else np.dtype(dtype)
        n = dt.itemsize
        for s in shape:
            n *= s
        with self._lock:  # the array refers to its buffer before anyone else may take it
            buf, pos = self._buffer(_padded(n))
            return np.ndarray(shape, dt, buffer=buf, offset=pos)

    def take(self, sizes: list[int]) -> list[np.ndarray]:
        """One uint8 array per size, each 64-byte aligned, in one (pooled) buffer."""
        total = sum(_padded(s) for s in sizes)
        with self._lock:
            buf, pos = self._buffer(total)
            out = []
            for s in sizes:
                out.append(buf[pos : pos + s])
                pos += _padded(s)
            return out


def _aligned(buf: np.ndarray) -> tuple[np.ndarray, int]:
    """``(buf, offset of its first 64-byte boundary)``."""
    return buf, (-buf.__array_interface__["data"][0]) % _ALIGN


def _frame_sizes(follow: Any) -> list[int]:
    """The byte count of each frame of a follow message, or InvalidArgumentError."""
    try:
        sizes = [int(n) for n in follow["frames"]]
        if not isinstance(follow["fields"], (list, tuple)):
            raise TypeError
    except (TypeError, ValueError, KeyError, IndexError):
        sizes = [-1]
    if not sizes or min(sizes) < 0:
        raise InvalidArgumentError(
            'follow: expected {"frames": [bytes, ...], "fields": [[part, field, frame, '
            f"offset, dtype, shape], ...]}}, got {str(follow)[:200]}"
        )
    return sizes


async def read_follow(comm: Any, follow: Any, pool: ReceivePool) -> list[np.ndarray]:
    """Read the frames message that follows a request, into ``pool``'s buffers.

    ``follow["frames"]`` gives the bytes of each frame, in message order.

    Returns one array per frame: a uint8 view of the pooled buffer for frames of at
    least ``daskangel.client.direct-read-bytes`` whose sizes were as announced; an
    array of its own otherwise (small frames, a non-TCP comm).  Raises
    :class:`InvalidArgumentError` (before reading anything) when ``follow`` does
    not say how many bytes to expect: the caller must then drop the comm.
    """
    sizes = _frame_sizes(follow)
    if follow.get("raw"):
        return await _read_raw(comm, sizes, pool)
    # small frames are read as usual: only frames of at least direct-read-bytes are
    # matched by size, so no header frame can be taken for one
    limit = config.get_bytes("daskangel.client.direct-read-bytes")
    want = [s if s >= limit else 0 for s in sizes]
    bufs = pool.take(want)
    targets: list[np.ndarray | None] = [b if n else None for b, n in zip(bufs, want, strict=True)]
    msg = await read_into_targets(comm, want, targets)
    values = msg.get("values") if isinstance(msg, dict) else None
    if not isinstance(values, (list, tuple)) or len(values) != len(sizes):
        raise InvalidArgumentError(
            f"follow: expected a message of {len(sizes)} arrays, got {type(msg).__name__}"
        )
    return list(values)


async def _read_raw(comm: Any, sizes: list[int], pool: ReceivePool) -> list[np.ndarray]:
    """Frames written as bare bytes after the request (``follow["raw"]``, a TCP
    comm: :func:`daskangel._recv.send_all_recv_into`), read straight into
    ``pool``'s buffers."""
    stream = raw_stream(comm)
    if stream is None:
        raise InvalidArgumentError("follow: raw frames need a TCP comm")
    bufs = pool.take(sizes)
    try:
        for buf in bufs:
            view = memoryview(buf)  # type: ignore[arg-type]
            got = 0
            while got < buf.nbytes:
                got += await stream.read_into(view[got : got + (1 << 30)])
    except BaseException:
        comm.abort()  # out of step with its messages
        raise
    return bufs


def shm_frames(maps: ShmMaps, follow: Any) -> list[np.ndarray] | None:
    """The frames of a request whose follow frames wait in the caller's shared
    buffer (``follow["shm"]``, their offsets in ``follow["at"]``:
    :mod:`daskangel._shm`), as views of its mapping here; None when it cannot be
    mapped (the caller then resends them over the socket).  Raises
    :class:`InvalidArgumentError` when a frame lies outside the buffer."""
    sizes = _frame_sizes(follow)
    buf = maps.attach(follow["shm"])
    if buf is None:
        return None
    try:
        at = [int(a) for a in follow["at"]]
    except (TypeError, ValueError, KeyError):
        at = []
    if len(at) != len(sizes) or any(
        a < 0 or HEADER + a + n > buf.size for a, n in zip(at, sizes, strict=True)
    ):
        raise InvalidArgumentError(
            f"follow: frames {sizes} at {str(follow.get('at'))[:100]} do not lie in the "
            "shared buffer"
        )
    return [buf[HEADER + a : HEADER + a + n] for a, n in zip(at, sizes, strict=True)]


def cut_fields(frames: list[Any], fields: Any) -> list[tuple[int, str, np.ndarray]]:
    """``[(part, field, array), ...]``: each field's array, a view of its frame.

    ``fields`` is ``[[part, field, frame, offset, dtype, shape], ...]``
    (:func:`daskangel._wire.split_follow`).  Only numeric dtypes, and only views
    inside their frame, are accepted: anything else raises
    :class:`InvalidArgumentError` and nothing is cut.

    Example
    -------
    >>> buf = np.arange(16, dtype=np.uint8)
    >>> [(i, k, a.tolist()) for i, k, a in cut_fields([buf], [[0, "csr_len", 0, 8, "<i2", [2]]])]
    [(0, 'csr_len', [2312, 2826])]
    """
    out = []
    try:
        raw = [np.asarray(f).reshape(-1).view(np.uint8) for f in frames]
        for part, field, frame, offset, dtype, shape in fields:
            dt = np.dtype(str(dtype))
            shp = tuple(int(n) for n in shape)
            n = dt.itemsize * math.prod(shp)  # (np.prod: ~5 us a field, a dozen a request)
            buf = raw[int(frame)]
            off = int(offset)
            bad = dt.kind not in "biuf" or min(shp, default=0) < 0 or int(part) < 0
            if bad or off < 0 or off + n > buf.size:
                raise ValueError
            out.append((int(part), str(field), buf[off : off + n].view(dt).reshape(shp)))
    except (TypeError, ValueError, IndexError, AttributeError):
        raise InvalidArgumentError(
            "follow: expected fields [[part, field, frame, offset, dtype, shape], ...] "
            f"inside their frames, got {str(fields)[:200]}"
        ) from None
    return out


def pooled(pool: ReceivePool | None, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """An uninitialised array of ``shape`` in a buffer of ``pool`` (reused once
    nothing refers to it, so its pages are not faulted in again), or a new
    array without a pool."""
    if pool is None:
        return np.empty(shape, dtype)
    return pool.array(shape, dtype)
