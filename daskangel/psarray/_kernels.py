"""Compiled kernels of the data plane (numba, ``nogil=True``, ``cache=True``).

Dense adds, grid scatters, grouping of ids by owner, finiteness checks and the
counter-based random initialiser live here; the sorted-key sparse store's kernels
(:mod:`._sortedstore`) and the prefetching sparse writes (:mod:`._scatter`) are
re-exported, so the data plane reads every kernel as ``K.<name>``.

Nothing here knows about blocks or servers; the kernels take and return arrays.

Example
-------
>>> import numpy as np
>>> order, starts = counting_group(np.array([1, 0, 1, 2]), 3)  # positions by group
>>> order.tolist(), starts.tolist()
([1, 0, 2, 3], [0, 1, 3, 4])
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
from numba import njit

from ._scatter import check_csr, scatter_coo, scatter_csr  # sparse writes, prefetching
from ._sortedstore import (  # the sorted-key sparse store
    gallop_find,
    is_sorted,
    is_strictly_sorted,
    lower_bound,
    merge_update,
    reduce_sorted,
    sort_pairs,
    sparse_lookup,
)

__all__ = [
    "add_into",
    "counting_group",
    "all_finite",
    "check_csr",
    "gallop_find",
    "group_by_bounds",
    "hash_random",
    "helper",
    "is_sorted",
    "is_strictly_sorted",
    "lower_bound",
    "merge_update",
    "reduce_sorted",
    "scatter_coo",
    "scatter_csr",
    "scatter_grid",
    "sort_pairs",
    "sparse_lookup",
]


@njit(nogil=True, cache=True)
def _add_flat(dest, values):  # type: ignore[no-untyped-def]
    for i in range(dest.shape[0]):
        dest[i] += values[i]


def add_into(dest: np.ndarray, values: np.ndarray) -> None:
    """``dest += values`` for C-contiguous arrays of one shape and dtype.

    numpy adds a misaligned operand (a frame Dask's comm received at an odd offset
    after the message header) through a buffered loop, 1.4-2x slower; compiled
    code reads it at full speed.  Aligned operands go to numpy.
    """
    if values.flags.aligned:
        np.add(dest, values, out=dest)
    else:
        _add_flat(dest.reshape(-1), values.reshape(-1))


@njit(nogil=True, cache=True)
def scatter_grid(block, rows, cols, values, add):  # type: ignore[no-untyped-def]
    """``block[rows[i], cols[j]] (+)= values[i, j]``; duplicates accumulate when adding."""
    for i in range(rows.shape[0]):
        r = rows[i]
        for j in range(cols.shape[0]):
            if add:
                block[r, cols[j]] += values[i, j]
            else:
                block[r, cols[j]] = values[i, j]


@njit(nogil=True, cache=True)
def counting_group(ids, n_groups):  # type: ignore[no-untyped-def]
    """Stable grouping of ``ids`` in ``[0, n_groups)``: ``(order, starts)``.

    ``order[starts[g]:starts[g + 1]]`` are the positions holding group ``g``, in
    their original order (a counting sort: linear time).
    """
    n = ids.shape[0]
    starts = np.zeros(n_groups + 1, np.int64)
    for i in range(n):
        starts[ids[i] + 1] += 1
    for g in range(n_groups):
        starts[g + 1] += starts[g]
    fill = starts[:-1].copy()
    order = np.empty(n, np.int64)
    for i in range(n):
        g = ids[i]
        order[fill[g]] = i
        fill[g] += 1
    return order, starts


@njit(nogil=True, cache=True)
def group_by_bounds(idx, bounds):  # type: ignore[no-untyped-def]
    """Group indices by the range ``[bounds[g], bounds[g + 1])`` holding them.

    Returns ``(order, starts, local)``: ``order[starts[g]:starts[g + 1]]`` are the
    positions of group ``g`` in their original order and ``local`` holds
    ``idx[order] - bounds[g]`` (one pass to count, one to scatter).
    """
    n = idx.shape[0]
    n_groups = bounds.shape[0] - 1
    gid = np.empty(n, np.int64)
    starts = np.zeros(n_groups + 1, np.int64)
    # equal-width ranges (every layout the partitioners make) need one division
    width = bounds[1] - bounds[0]
    uniform = bounds[0] == 0 and width > 0
    for g in range(1, n_groups):
        if bounds[g] != g * width:
            uniform = False
    if uniform:
        for i in range(n):
            g = idx[i] // width
            gid[i] = g if g < n_groups else n_groups - 1
    else:
        for i in range(n):
            v = idx[i]
            lo = 0
            hi = n_groups - 1
            while lo < hi:  # last g with bounds[g] <= v
                mid = (lo + hi + 1) >> 1
                if bounds[mid] <= v:
                    lo = mid
                else:
                    hi = mid - 1
            gid[i] = lo
    for i in range(n):
        starts[gid[i] + 1] += 1
    for g in range(n_groups):
        starts[g + 1] += starts[g]
    fill = starts[:-1].copy()
    order = np.empty(n, np.int64)
    local = np.empty(n, np.int64)
    for i in range(n):
        g = gid[i]
        k = fill[g]
        order[k] = i
        local[k] = idx[i] - bounds[g]
        fill[g] = k + 1
    return order, starts, local


@njit(nogil=True, cache=True)
def _all_finite_loop(a):  # type: ignore[no-untyped-def]
    for i in range(a.shape[0]):
        if not np.isfinite(a[i]):
            return False
    return True


@njit(nogil=True, cache=True)
def _any_exponent_full(bits, mask):  # type: ignore[no-untyped-def]
    """True when some ``bits[i] & mask == mask`` (an IEEE NaN or inf).

    The largest masked exponent of each slice of 16384 entries: a branch-free
    ``max`` over a slice vectorises (8x faster than a loop bounded by ``min``,
    which did not), and the test per slice still stops early.
    """
    n = bits.shape[0]
    for s in range(0, n, 16384):
        chunk = bits[s : s + 16384]
        acc = mask - mask
        for j in range(chunk.shape[0]):
            acc = max(acc, chunk[j] & mask)
        if acc == mask:
            return True
    return False


_EXPONENT = {4: (np.uint32, 0x7F800000), 8: (np.uint64, 0x7FF0000000000000)}


def all_finite(a: np.ndarray, split: bool = False) -> bool:
    """True when no entry of the 1-D float array ``a`` is NaN or infinite.

    float32 / float64 are tested on their exponent bits (a vectorised integer
    loop, about twice as fast as testing each element with ``isfinite``), with
    ``split`` on the two halves in two threads; arrays that are not contiguous
    element by element; other floats with numpy.
    """
    spec = _EXPONENT.get(a.dtype.itemsize)
    if spec is None or a.dtype.kind != "f":
        return bool(np.isfinite(a).all())
    if not a.flags.c_contiguous:
        return bool(_all_finite_loop(a))
    utype, mask = spec
    bits, m = a.view(utype), utype(mask)
    if not split:
        return not _any_exponent_full(bits, m)
    h = bits.shape[0] // 2
    first = helper().submit(_any_exponent_full, bits[:h], m)
    second = _any_exponent_full(bits[h:], m)
    return not (first.result() or second)


_pool: list[ThreadPoolExecutor] = []


def helper() -> ThreadPoolExecutor:
    """One helper thread per process for kernels split in two (created on first use)."""
    if not _pool:
        _pool.append(ThreadPoolExecutor(1, thread_name_prefix="daskangel-kernels"))
    return _pool[0]


@njit(nogil=True, cache=True)
def _splitmix64(x):  # type: ignore[no-untyped-def]
    x = (x + np.uint64(0x9E3779B97F4A7C15)) & np.uint64(0xFFFFFFFFFFFFFFFF)
    z = x
    z = ((z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)) & np.uint64(0xFFFFFFFFFFFFFFFF)
    z = ((z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)) & np.uint64(0xFFFFFFFFFFFFFFFF)
    return z ^ (z >> np.uint64(31))


@njit(nogil=True, cache=True)
def _uniform01(seed, index):  # type: ignore[no-untyped-def]
    h = _splitmix64(np.uint64(seed) ^ _splitmix64(np.uint64(index)))
    return (h >> np.uint64(11)) * (1.0 / 9007199254740992.0)


@njit(nogil=True, cache=True)
def hash_random(seed, index, normal, a, b):  # type: ignore[no-untyped-def]
    """Counter-based random numbers: element ``k`` depends only on ``(seed, index[k])``.

    Uniform on ``[a, b)``, or normal with mean ``a`` and standard deviation ``b``
    (Box-Muller).  Because nothing depends on order or partitioning, an array filled
    block by block equals the same array filled in one piece.
    """
    out = np.empty(index.shape[0], np.float64)
    for k in range(index.shape[0]):
        i = np.uint64(index[k])
        if normal:
            u1 = _uniform01(seed, i * np.uint64(2))
            u2 = _uniform01(seed, i * np.uint64(2) + np.uint64(1))
            u1 = 1.0 - u1  # (0, 1]
            out[k] = a + b * np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)
        else:
            out[k] = a + (b - a) * _uniform01(seed, i)
    return out
