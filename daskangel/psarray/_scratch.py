"""Reused scratch arrays for the servers' sparse kernels.

A Dask worker returns freed memory to the kernel at once (the nanny sets
``MALLOC_TRIM_THRESHOLD_``), so every large temporary array of an op is memory
the kernel maps again page by page: on the 2-core benchmark VM a 4 KiB page
fault costs ~2.6 us, and the radix sort's second buffer, the unpacked keys and
values and the merge's list of missing keys of a 500,000-key sparse increment
cost more in faults (7-8 ms) than the sort itself.  :func:`scratch` hands out
one buffer per ``slot`` and thread instead, grown when too small and kept for
the next op, up to ``daskangel.server.scratch-bytes`` a buffer (larger requests
get a fresh array).

A scratch array is valid until the next :func:`scratch` call of the same slot
in the same thread: use it inside one op, never keep it.

Example
-------
>>> a = scratch("doc", 10, np.int64)
>>> b = scratch("doc", 4, np.float32)
>>> a.shape, b.shape, np.shares_memory(a, b)
((10,), (4,), True)
"""

from __future__ import annotations

import threading

import numpy as np

from .. import config

__all__ = ["scratch"]

_local = threading.local()


def scratch(slot: str, n: int, dtype: np.dtype | type) -> np.ndarray:
    """An uninitialised 1-D array of ``n`` ``dtype`` items, reused per slot and thread."""
    dt = np.dtype(dtype)
    need = max(int(n), 0) * dt.itemsize
    if need > config.get_bytes("daskangel.server.scratch-bytes"):
        return np.empty(n, dt)
    bufs: dict[str, np.ndarray] | None = getattr(_local, "bufs", None)
    if bufs is None:
        bufs = _local.bufs = {}
    buf = bufs.get(slot)
    if buf is None or buf.nbytes < need:
        # grow by a quarter more than asked, so slowly growing requests reallocate rarely
        buf = bufs[slot] = np.empty(need + need // 4 + 64, np.uint8)
    return buf[:need].view(dt)
