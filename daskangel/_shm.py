"""An update's bulk handed to a server of the same machine through shared memory.

On the ninth session's 2-core VM, 4 MiB crossed a localhost TCP socket in 3.5-6 ms
(a memcpy of it: 0.15 ms), so the two 4 MB halves of a 1 M-key sparse vector
increment spent about as long on the wire, one after the other from the caller's
event loop, as the servers spent applying them.  A same-machine server can read
them from the caller's memory instead:

* the caller keeps a few ``memfd`` buffers (:class:`ShmBuffers`, anonymous shared
  memory freed with the last mapping, so nothing is left behind by a crash); a
  request's follow frames are copied into one, and the request says where
  (``follow["shm"] = [pid, fd, nonce, size]``, each frame's offset in
  ``follow["at"]``): no bytes follow it on the comm;
* the server opens ``/proc/<pid>/fd/<fd>``, maps it once (:class:`ShmMaps`, kept
  for the next request) and checks the buffer's first 16 bytes against the
  request's random ``nonce``: another machine's process of the same pid, or a
  buffer since replaced, never matches.  A server that cannot map it answers
  :data:`UNAVAILABLE` having applied nothing, and the caller resends over the
  socket (and does not try that server again).

The server works on the buffer in place (a packed update is sorted where it lies)
and is done with it when it replies; such an update is never applied behind its
reply (write-behind).  The caller reuses a buffer only after the reply: one whose
call failed or was cancelled is dropped, never handed out again.

A caller may also pack an update straight into a buffer (:meth:`ShmBuffers.lease`:
an array whose last view, once gone, releases it): its frames then already lie in
shared memory (:meth:`ShmBuffers.locate`) and are named where they are, without
the copy (~0.5 ms a 4 MB share on the ninth session's VM).

Example
-------
>>> bufs = ShmBuffers(limit=1 << 20)
>>> seg = bufs.take(1000)
>>> seg.view(0, 4)[:] = [1, 2, 3, 4]
>>> maps = ShmMaps(4)
>>> there = maps.attach(seg.desc(1000))  # this process stands in for a server
>>> bytes(there[HEADER : HEADER + 4])
b'\\x01\\x02\\x03\\x04'
>>> bufs.release(seg); bufs.take(500) is seg  # released: reused
True
"""

from __future__ import annotations

import contextlib
import mmap
import os
import secrets
import threading
from collections import OrderedDict
from typing import Any

import numpy as np

__all__ = ["HEADER", "UNAVAILABLE", "ShmBuffers", "ShmMaps", "Segment", "supported"]

HEADER = 64  # the nonce, then data from the first cache line on
_ALIGN = 64
_STEP = 1 << 20  # buffers are made in whole MiB
UNAVAILABLE = "__daskangel_shm_unavailable__"  # a server's reply: resend over the socket


def supported() -> bool:
    """Whether this platform has anonymous shared files and ``/proc/<pid>/fd``."""
    return hasattr(os, "memfd_create") and os.path.isdir("/proc/self/fd")


class Segment:
    """One memfd buffer of the caller: ``fd``, its mapping and its nonce."""

    __slots__ = ("arr", "busy", "fd", "mm", "nonce", "size")

    def __init__(self, size: int) -> None:
        self.fd = os.memfd_create("daskangel-follow", os.MFD_CLOEXEC)
        try:
            os.ftruncate(self.fd, size)
            self.mm = mmap.mmap(self.fd, size)
        except BaseException:
            os.close(self.fd)
            raise
        self.size = size
        self.arr = np.frombuffer(self.mm, np.uint8)
        self.nonce = secrets.token_bytes(16)
        self.arr[:16] = np.frombuffer(self.nonce, np.uint8)
        self.busy = False

    def view(self, offset: int, nbytes: int) -> np.ndarray:
        """Bytes ``[offset, offset + nbytes)`` of the data area (after the header)."""
        return self.arr[HEADER + offset : HEADER + offset + nbytes]

    def desc(self, nbytes: int) -> list[Any]:
        """What a request says of this buffer: ``[pid, fd, nonce hex, bytes mapped]``."""
        return [os.getpid(), self.fd, self.nonce.hex(), HEADER + nbytes]

    def __del__(self) -> None:  # the mapping lives on while arrays view it
        with contextlib.suppress(OSError):
            os.close(self.fd)


class ShmBuffers:
    """The caller's shared buffers, ``limit`` bytes in all (then none: the socket).

    :meth:`take` marks a buffer busy until :meth:`release` (the server replied);
    :meth:`retire` drops one whose call failed (the server may still read it).
    ``refused`` holds the addresses of servers that could not map one.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._segs: list[Segment] = []
        self._lock = threading.Lock()
        self.refused: set[str] = set()

    @property
    def nbytes(self) -> int:
        return sum(s.size for s in self._segs)

    def take(self, nbytes: int) -> Segment | None:
        """A free buffer with room for ``nbytes`` of data, or None (over the limit)."""
        need = HEADER + nbytes
        with self._lock:
            free = [s for s in self._segs if not s.busy and s.size >= need]
            if free:
                seg = min(free, key=lambda s: s.size)
            else:
                size = -(-need // _STEP) * _STEP
                idle = [s for s in self._segs if not s.busy]
                while idle and self.nbytes + size > self.limit:  # smallest idle ones first
                    drop = min(idle, key=lambda s: s.size)
                    idle.remove(drop)
                    self._segs.remove(drop)
                if self.nbytes + size > self.limit:
                    return None
                seg = Segment(size)
                self._segs.append(seg)
            seg.busy = True
            return seg

    def release(self, seg: Segment) -> None:
        """The server answered: ``seg`` may be handed out again."""
        seg.busy = False

    def retire(self, seg: Segment) -> None:
        """The call failed: never hand ``seg`` out again."""
        with self._lock:
            if seg in self._segs:
                self._segs.remove(seg)

    def lease(self, nbytes: int) -> np.ndarray | None:
        """``nbytes`` of a buffer's data area as uint8, or None (over the limit): the
        buffer is busy while any view of the array lives, then released (unless
        retired meanwhile)."""
        seg = self.take(nbytes)
        if seg is None:
            return None
        return np.asarray(_Lease(self, seg, nbytes))

    def locate(self, frames: list[np.ndarray]) -> tuple[Segment, list[int]] | None:
        """``(buffer, offsets in its data area)`` when every frame is a contiguous
        view of one leased buffer (:meth:`lease`), else None."""
        if not frames or not all(f.flags.c_contiguous for f in frames):
            return None
        addr = [int(f.__array_interface__["data"][0]) for f in frames]
        with self._lock:
            segs = list(self._segs)
        for seg in segs:
            lo = int(seg.arr.__array_interface__["data"][0]) + HEADER
            hi = lo + seg.size - HEADER
            at = [a - lo for a in addr]
            if all(lo <= a and a + int(f.nbytes) <= hi for a, f in zip(addr, frames, strict=True)):
                return seg, at
        return None


class _Lease:
    """The base of a leased array: releases its buffer when the last view goes."""

    __slots__ = ("__array_interface__", "bufs", "seg")

    def __init__(self, bufs: ShmBuffers, seg: Segment, nbytes: int) -> None:
        self.bufs, self.seg = bufs, seg
        self.__array_interface__ = seg.view(0, nbytes).__array_interface__

    def __del__(self) -> None:
        self.bufs.release(self.seg)


def place(seg: Segment, frames: list[np.ndarray]) -> list[int]:
    """Copy ``frames`` into ``seg`` (each from a 64-byte boundary); their offsets."""
    offsets, pos = [], 0
    for f in frames:
        b = np.ascontiguousarray(f).reshape(-1).view(np.uint8)
        seg.view(pos, b.size)[:] = b
        offsets.append(pos)
        pos += -(-b.size // _ALIGN) * _ALIGN
    return offsets


def span(frames: list[np.ndarray]) -> int:
    """Bytes :func:`place` needs for ``frames``."""
    return sum(-(-int(f.nbytes) // _ALIGN) * _ALIGN for f in frames)


class ShmMaps:
    """A server's mappings of callers' buffers, the ``limit`` most recent kept."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        # {(pid, fd): (nonce, whole buffer as uint8)}
        self._maps: OrderedDict[tuple[int, int], tuple[bytes, np.ndarray]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._maps)

    def attach(self, desc: Any) -> np.ndarray | None:
        """The caller's buffer ``desc`` (:meth:`Segment.desc`) as uint8, header
        included, at least its stated size; None when it cannot be mapped here or
        its nonce differs (another machine, a replaced buffer)."""
        try:
            pid, fd, nonce_hex, size = int(desc[0]), int(desc[1]), str(desc[2]), int(desc[3])
            nonce = bytes.fromhex(nonce_hex)
        except (TypeError, ValueError, IndexError):
            return None
        if len(nonce) != 16 or size < HEADER:
            return None
        key = (pid, fd)
        with self._lock:
            got = self._maps.get(key)
            if got is not None and got[0] == nonce and got[1].size >= size:
                self._maps.move_to_end(key)
                return got[1]
        arr = _map(pid, fd, size)
        if arr is None or arr[:16].tobytes() != nonce:
            return None
        with self._lock:
            self._maps[key] = (nonce, arr)
            self._maps.move_to_end(key)
            while len(self._maps) > self.limit:
                self._maps.popitem(last=False)  # unmapped once no array views it
        return arr


def _map(pid: int, fd: int, size: int) -> np.ndarray | None:
    try:
        f = os.open(f"/proc/{pid}/fd/{fd}", os.O_RDWR)
    except OSError:
        return None
    try:
        whole = os.fstat(f).st_size
        if whole < size:
            return None
        return np.frombuffer(mmap.mmap(f, whole), np.uint8)
    except (OSError, ValueError):
        return None
    finally:
        os.close(f)
