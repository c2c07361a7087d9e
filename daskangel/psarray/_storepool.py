"""Memory of sparse stores, handed back for reuse once no array refers to it.

A sparse block (:class:`._blocks.SparseBlock`) keeps its sorted keys and values in
arrays that grow by ``daskangel.server.sparse-growth``.  A Dask worker returns
freed memory to the kernel at once (the nanny sets ``MALLOC_TRIM_THRESHOLD_``), so
every store a server grows or creates is memory the kernel maps again page by page:
on the 2-core benchmark VM a 4 KiB page fault costs ~2 us, and the new-key merge of a
500,000-key sparse increment into an empty block (7.5 MB of store with its spare
room) spent ~3 ms in faults against ~1 ms of merging.

:func:`store_arrays` therefore carves a store's keys and values out of one
:class:`_Chunk` of this process's pool: the smallest free chunk that holds them and
is at most twice as large, or a fresh one.  A chunk goes back to the pool by itself
when the last array viewing it is freed (a dropped or refilled block, a store that
grew, a snapshot that finished with it): its ``__del__`` runs only then, so memory
that anything still reads is never handed out again.  The pool keeps at most
``daskangel.server.store-pool-bytes`` (the oldest chunks are let go first); stores
under ``daskangel.server.store-pool-min-bytes`` use plain arrays.

Example
-------
>>> import numpy as np
>>> k, v = store_arrays(200_000, np.dtype("float32"), min_bytes=0)
>>> k.dtype, v.dtype, k.shape == v.shape, k.shape[0] >= 200_000
(dtype('int64'), dtype('float32'), True, True)
>>> addr = k.ctypes.data
>>> del k, v  # the chunk is free again: the next store of that size reuses it
>>> k2, _ = store_arrays(190_000, np.dtype("float32"), min_bytes=0)
>>> k2.ctypes.data == addr
True
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

import numpy as np

from .. import config
from ._packed import sorted_values, unpack_reduce
from ._scratch import scratch
from ._sortedstore import merge_listed, merge_packed_present

__all__ = ["packed_merge", "packed_store", "pool_stats", "room_for", "store_arrays"]

_lock = threading.RLock()  # a chunk's __del__ may run while this thread holds it
_free: OrderedDict[int, np.ndarray] = OrderedDict()  # id -> free uint8 buffer, oldest first
_stats = {"reused": 0, "fresh": 0, "free_bytes": 0}
_SLACK = 2  # a store may get a chunk up to this many times its need, and no larger


class _Chunk:
    """A buffer of store memory; numpy arrays built on it keep it alive (it is their
    ``base``), and it returns its buffer to the pool when the last one goes."""

    __slots__ = ("__array_interface__", "mem")

    def __init__(self, mem: np.ndarray) -> None:
        self.mem = mem
        self.__array_interface__ = mem.__array_interface__

    def __del__(self) -> None:
        _give(self.mem)


def _give(mem: np.ndarray) -> None:
    """Keep a free buffer, letting the oldest go past the pool's byte limit."""
    try:
        limit = config.get_bytes("daskangel.server.store-pool-bytes")
    except Exception:  # noqa: BLE001 - interpreter shutdown: just free it
        return
    if mem.nbytes > limit:
        return
    with _lock:
        _free[id(mem)] = mem
        _stats["free_bytes"] += mem.nbytes
        while _stats["free_bytes"] > limit:
            _, old = _free.popitem(last=False)
            _stats["free_bytes"] -= old.nbytes


def _take(nbytes: int) -> np.ndarray | None:
    """The smallest free buffer of ``nbytes`` to ``_SLACK * nbytes`` bytes, or None."""
    with _lock:
        best = None
        for key, mem in _free.items():
            if nbytes <= mem.nbytes <= _SLACK * nbytes and (
                best is None or mem.nbytes < best[1].nbytes
            ):
                best = (key, mem)
        if best is None:
            return None
        del _free[best[0]]
        _stats["free_bytes"] -= best[1].nbytes
        return best[1]


def store_arrays(
    cap: int, dtype: np.dtype, min_bytes: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Uninitialised ``(keys, vals)`` of at least ``cap`` entries (int64 keys and
    ``dtype`` values), from one pooled chunk when they need at least ``min_bytes``
    (default ``daskangel.server.store-pool-min-bytes``); both arrays may be longer
    than asked when a reused chunk has room to spare."""
    dtype = np.dtype(dtype)
    per = 8 + dtype.itemsize
    need = int(cap) * per
    if min_bytes is None:
        min_bytes = config.get_bytes("daskangel.server.store-pool-min-bytes")
    if need < min_bytes or need == 0:
        return np.empty(cap, np.int64), np.empty(cap, dtype)
    mem = _take(need)
    with _lock:
        _stats["reused" if mem is not None else "fresh"] += 1
    if mem is None:
        mem = np.empty(need, np.uint8)
    n = mem.nbytes // per
    whole = np.asarray(_Chunk(mem))  # a view whose base is the chunk
    keys = whole[: n * 8].view(np.int64)
    vals = whole[n * 8 : n * per].view(dtype)
    return keys, vals


def room_for(total: int, keys: np.ndarray, vals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(keys, vals)`` themselves when they hold ``total`` entries, else pooled arrays
    grown by ``daskangel.server.sparse-growth`` (at least 16 spare entries)."""
    if total <= keys.shape[0]:
        return keys, vals
    return store_arrays(_grown(total), vals.dtype)


def _grown(n: int) -> int:
    """The capacity a store of ``n`` entries is given: its share of spare room."""
    return max(int(n * float(config.get("daskangel.server.sparse-growth"))), n + 16)


def pool_stats() -> dict[str, Any]:
    """This process's store chunks: ``reused`` / ``fresh`` handed out, ``free_bytes``."""
    with _lock:
        return dict(_stats)


def packed_store(
    packed: np.ndarray, dtype: np.dtype, offset: int, default: Any
) -> tuple[np.ndarray, np.ndarray, int]:
    """A new store holding packed entries (``_packed``; reordered here): sorted and
    their duplicates summed straight into pooled arrays, each key's value
    ``default`` plus its sum as a merge into an empty store inserts it (no merge,
    no copy).  Returns ``(keys, vals, n)``."""
    m = packed.shape[0]
    keys, vals = store_arrays(_grown(m), dtype)
    k = int(unpack_reduce(packed, dtype, offset, (keys, vals))[0].shape[0])
    if default != 0:
        vals[:k] += default
    if k * _SLACK < m:  # many duplicates: a store sized for the keys, not the entries
        small_k, small_v = store_arrays(_grown(k), dtype)
        small_k[:k], small_v[:k] = keys[:k], vals[:k]
        keys, vals = small_k, small_v
    return keys, vals, k


def packed_merge(
    keys: np.ndarray,
    vals: np.ndarray,
    n: int,
    packed: np.ndarray,
    offset: int,
    default: Any,
) -> tuple[np.ndarray, np.ndarray, int]:
    """Add packed entries (reordered here) to the store ``keys[:n]`` / ``vals[:n]``:
    sorted, then one pass sums each key's entries and adds them in place or lists
    the missing keys (:func:`._sortedstore.merge_packed_present`), which are merged
    in from the back (``default`` plus their sum), into pooled memory if the store
    must grow.  Returns the store's ``(keys, vals, n)``."""
    done, values = sorted_values(packed, vals.dtype)
    m = done.shape[0]
    miss_k = scratch("missing", m, np.int64)
    miss_v = scratch("missing-values", m, vals.dtype)
    nm = merge_packed_present(done, values, offset, keys, vals, n, miss_k, miss_v)
    if nm == 0:
        return keys, vals, n
    out_k, out_v = room_for(n + nm, keys, vals)
    total = merge_listed(keys, vals, n, miss_k, miss_v, nm, vals.dtype.type(default), out_k, out_v)
    return out_k, out_v, int(total)
