"""Compiled kernels of random-row gets (numba, ``nogil=True``, ``cache=True``).

A small random-row get (MF's 1,000 factor rows, 0.2 MiB) costs about a
millisecond end to end on the 2-core benchmark VM, so every numpy call on it
counts: planning it with ``searchsorted``, a stable argsort, ``bincount`` and
three fancy-index passes took ~50 us on the caller, and the server's bounds
checks (two reductions a block) and ``np.take`` calls another ~30 us.  Here each
side is one pass in compiled code:

* :func:`index_scan` (caller): the bounds and sortedness of the row ids;
* :func:`plan_rows` (caller): each row's block by binary search over the row
  bounds, a counting sort by ``(server rank, block)`` key (stable: each block's
  run keeps the caller's order), the rows made local (``int32``);
* :func:`take_rows` (server): a run of local rows of one block copied into the
  reply, checking each index as it goes;
* :func:`put_rows` (caller): a reply's rows put at their request positions.

Example
-------
>>> import numpy as np
>>> bounds = np.array([0, 4, 8, 10]); rank = np.array([0, 1, 0])
>>> order, local, counts = plan_rows(np.array([9, 1, 5, 0]), bounds, rank, 2)
>>> order.tolist(), local.tolist(), counts.tolist()
([1, 3, 0, 2], [1, 0, 1, 1], [2, 0, 1, 0, 1, 0])
>>> index_scan(np.array([9, 1, 5, 0]))
(0, 9, False)
>>> out = np.empty((2, 3), "float32")
>>> take_rows(np.arange(12, dtype="float32").reshape(4, 3), np.array([3, 1], "int32"), out)
-1
>>> out.tolist()
[[9.0, 10.0, 11.0], [3.0, 4.0, 5.0]]
>>> full = np.zeros((3, 3), "float32")
>>> put_rows(full, np.array([2, 0]), out)
>>> full[:, 0].tolist()
[3.0, 0.0, 9.0]
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["index_scan", "plan_rows", "put_rows", "take_rows"]


@njit(nogil=True, cache=True)
def index_scan(a):  # type: ignore[no-untyped-def]
    """``(min, max, sorted)`` of a non-empty integer array in one pass."""
    lo = hi = a[0]
    ok = True
    for i in range(1, a.shape[0]):
        x = a[i]
        if x < a[i - 1]:
            ok = False
        if x < lo:
            lo = x
        elif x > hi:
            hi = x
    return lo, hi, ok


@njit(nogil=True, cache=True)
def _plan(rows, bounds, rank, n_keys):  # type: ignore[no-untyped-def]
    nb = bounds.shape[0] - 1
    n = rows.shape[0]
    key = np.empty(n, np.int32)
    counts = np.zeros(n_keys, np.int64)
    for i in range(n):
        r = rows[i]
        lo, hi = 0, nb  # bounds[lo] <= r < bounds[hi]
        while hi - lo > 1:
            mid = (lo + hi) >> 1
            if bounds[mid] <= r:
                lo = mid
            else:
                hi = mid
        k = rank[lo] * nb + lo
        key[i] = k
        counts[k] += 1
    at = np.empty(n_keys, np.int64)
    s = 0
    for k in range(n_keys):
        at[k] = s
        s += counts[k]
    order = np.empty(n, np.int64)
    local = np.empty(n, np.int32)
    for i in range(n):
        k = key[i]
        p = at[k]
        at[k] = p + 1
        order[p] = i
        local[p] = rows[i] - bounds[k % nb]
    return order, local, counts


def plan_rows(
    rows: np.ndarray, bounds: np.ndarray, rank: np.ndarray, n_servers: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Group row ids (checked: ``0 <= row < bounds[-1]``) by ``(server, block)``.

    ``bounds``: the blocks' row bounds (int64, ``n_blocks + 1``); ``rank[b]``: the
    rank of block ``b``'s server (``< n_servers``).  Returns ``(order, local,
    counts)``: ``order[i]`` is the request position of the ``i``-th row in grouped
    order, ``local[i]`` that row local to its block (``int32``), ``counts[key]``
    the rows of each key ``rank * n_blocks + block``.
    """
    return _plan(rows, bounds, rank, n_servers * (bounds.shape[0] - 1))  # type: ignore[no-any-return]


@njit(nogil=True, cache=True)
def take_rows(data, rows, out):  # type: ignore[no-untyped-def]
    """``out[i] = data[rows[i]]`` for every ``i``; stops at the first row outside
    ``[0, len(data))`` and returns its position (``-1``: all copied).

    Element by element: a row slice assignment (``out[i, :] = data[r, :]``)
    builds two array views a row and took 2-3x as long (MF's 500 rows of 50
    float32: 18 / 157 us warm / cold cache against 6 / 76 us; LDA's rows of
    1,000 int32: 193 / 585 against 52 / 321 us)."""
    n = data.shape[0]
    w = data.shape[1]
    for i in range(rows.shape[0]):
        r = rows[i]
        if r < 0 or r >= n:
            return i
        for j in range(w):
            out[i, j] = data[r, j]
    return -1


@njit(nogil=True, cache=True)
def put_rows(out, pos, src):  # type: ignore[no-untyped-def]
    """``out[pos[i]] = src[i]`` for every ``i`` (the caller's scatter of a reply
    into request order; ``pos`` are checked positions: no bounds checks here).

    1.5-2x numpy's fancy-index assignment (MF's 500 rows of 50 float32: 5 / 48
    us warm / cold cache against 11 / 95 us)."""
    w = src.shape[1]
    for i in range(pos.shape[0]):
        p = pos[i]
        for j in range(w):
            out[p, j] = src[i, j]
