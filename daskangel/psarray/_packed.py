"""Packed sparse increments: each column and its 32-bit value in one int64.

A sparse increment of one row at many columns of a float32 / int32 array is sent as
``col << 32 | value bits`` per entry, grouped by block on the caller
(:func:`pack_by_bounds`: a counting sort, split over two threads for large
requests), 8 bytes per entry instead of 12.  The server sorts that int64 array by
its key bits (a radix sort, which carries the values along), and one compiled pass
unpacks the keys in place and sums the values of duplicates (:func:`unpack_reduce`).

Example
-------
>>> import numpy as np
>>> cols, vals = np.array([7, 2, 7]), np.array([1.0, 2.0, 3.0], "float32")
>>> starts, packed = pack_by_bounds(cols, vals.view(np.uint32), np.array([0, 5, 10]))
>>> starts.tolist(), (packed >> PACK_SHIFT).tolist()
([0, 1, 3], [2, 2, 2])
>>> unpack_reduce(packed[1:3].copy(), np.dtype("float32"), offset=5)
(array([7]), array([4.], dtype=float32))
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
from numba import njit

from .. import config
from ..errors import InvalidTypeError
from ._kernels import helper
from ._routing import check_size, check_values, normalize_index
from ._scratch import scratch

if TYPE_CHECKING:
    from ._meta import ArrayMeta  # (_meta imports _blocks, which imports this module)

__all__ = [
    "PACK_SHIFT",
    "count_by_bounds",
    "pack_by_bounds",
    "plan_packed",
    "sort_by_key",
    "sorted_values",
    "unpack_reduce",
]

PACK_SHIFT = 32  # a packed entry is ``local_key << 32 | 32 value bits``


@njit(nogil=True, cache=True)
def count_by_bounds(idx, bounds):  # type: ignore[no-untyped-def]
    """The count of indices in each range ``[bounds[g], bounds[g + 1])``.

    One branch-free pass per inner bound counting ``idx >= bound`` (SIMD: ~0.1 ms
    per bound for 1 M indices), not a histogram: ``counts[g] += 1`` entry by entry
    is a chain of loads and stores through the same few counters (~1 ns an entry).
    """
    n = idx.shape[0]
    n_groups = bounds.shape[0] - 1
    counts = np.empty(n_groups, np.int64)
    prev = n  # indices >= bounds[g]
    for g in range(n_groups):
        nxt = 0
        if g + 1 < n_groups:
            t = bounds[g + 1]
            for i in range(n):
                nxt += idx[i] >= t
        counts[g] = prev - nxt
        prev = nxt
    return counts


@njit(nogil=True, cache=True)
def scatter_packed(idx, bits, bounds, offsets, packed):  # type: ignore[no-untyped-def]
    """``packed[offsets[g]++] = (idx - bounds[g]) << 32 | bits`` for each entry, with
    ``g`` its range (found again here: cheaper than reading a stored group id)."""
    fill = offsets.copy()
    n_groups = bounds.shape[0] - 1
    for i in range(idx.shape[0]):
        v = idx[i]
        g = 0
        for b in range(1, n_groups):  # branch-free for the few ranges of a row
            g += bounds[b] <= v
        k = fill[g]
        packed[k] = ((v - bounds[g]) << 32) | np.int64(bits[i])
        fill[g] = k + 1


@njit(nogil=True, cache=True)
def scatter_few(idx, bits, bounds, offsets, packed):  # type: ignore[no-untyped-def]
    """:func:`scatter_packed` for at most 4 ranges (a vector's blocks on a few
    servers), its four fill counters in registers and picked by compare-and-select:
    the array of counters of the general kernel is a chain of loads and stores
    through memory (~25 % slower for 1 M entries into 4 ranges)."""
    n_groups = bounds.shape[0] - 1
    far = np.int64(2**62)
    c0 = bounds[0]
    b1 = bounds[1] if n_groups > 1 else far
    b2 = bounds[2] if n_groups > 2 else far
    b3 = bounds[3] if n_groups > 3 else far
    f0 = offsets[0]
    f1 = offsets[1] if n_groups > 1 else 0
    f2 = offsets[2] if n_groups > 2 else 0
    f3 = offsets[3] if n_groups > 3 else 0
    for i in range(idx.shape[0]):
        v = idx[i]
        s1 = v >= b1
        s2 = v >= b2
        s3 = v >= b3
        k = f0
        base = c0
        if s1:
            k = f1
            base = b1
        if s2:
            k = f2
            base = b2
        if s3:
            k = f3
            base = b3
        packed[k] = ((v - base) << 32) | np.int64(bits[i])
        g = np.int64(s1) + np.int64(s2) + np.int64(s3)
        f0 += g == 0
        f1 += g == 1
        f2 += g == 2
        f3 += g == 3


def _scatter(
    idx: np.ndarray, bits: np.ndarray, bounds: np.ndarray, offsets: np.ndarray, packed: np.ndarray
) -> None:
    """:func:`scatter_few` where it applies, else :func:`scatter_packed`."""
    if bounds.shape[0] <= 5:
        scatter_few(idx, bits, bounds, offsets, packed)
    else:
        scatter_packed(idx, bits, bounds, offsets, packed)


def pack_by_bounds(
    idx: np.ndarray,
    bits: np.ndarray,
    bounds: np.ndarray,
    split: bool = False,
    out: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Group column indices by range and pack each with its 32-bit value.

    ``idx`` (int64, validated) falls into ranges ``[bounds[g], bounds[g + 1])``;
    ``bits`` are the values' 32 bits (a ``uint32`` view of float32 / int32).
    Returns ``(starts, packed)``: ``packed[starts[g]:starts[g + 1]]`` holds
    ``(idx - bounds[g]) << 32 | bits`` of group ``g``, in request order.  A
    counting pass and one to scatter; the values are never gathered separately.
    ``split`` scatters the two halves in two threads (a parallel counting sort:
    each half writes its own slots of every group).  ``out``: an int64 array of
    ``len(idx)`` to pack into (default: a new one).
    """
    n = idx.shape[0]
    packed = np.empty(n, np.int64) if out is None else out
    starts = np.zeros(bounds.shape[0], np.int64)
    if not split:
        np.cumsum(count_by_bounds(idx, bounds), out=starts[1:])
        _scatter(idx, bits, bounds, starts[:-1], packed)
        return starts, packed
    h = n // 2
    counts0 = count_by_bounds(idx[:h], bounds)
    counts1 = count_by_bounds(idx[h:], bounds)
    np.cumsum(counts0 + counts1, out=starts[1:])
    done = helper().submit(_scatter, idx[:h], bits[:h], bounds, starts[:-1], packed)
    _scatter(idx[h:], bits[h:], bounds, starts[:-1] + counts0, packed)
    done.result()
    return starts, packed


@njit(nogil=True, cache=True)
def _unpack_reduce(packed, values, offset, keys, vals):  # type: ignore[no-untyped-def]
    """Sorted packed entries and their values -> unique ``keys + offset`` and summed
    values, written to ``keys`` / ``vals`` (``keys`` may be ``packed`` itself: entry
    ``j`` is written after entries ``<= j`` were read); returns the number of keys."""
    n = packed.shape[0]
    j = -1
    last = -1
    for i in range(n):
        k = packed[i] >> 32
        v = values[i]
        if k == last:
            vals[j] += v
        else:
            j += 1
            keys[j] = k + offset
            vals[j] = v
            last = k
    return j + 1


_MSD_MIN = 2048  # entries a used top-digit bucket on average for the bucket-wise sort


@njit(nogil=True, cache=True)
def _lsd_low(src, dst, s, e, c0, c1):  # type: ignore[no-untyped-def]
    """Entries ``[s, e)`` of ``src`` (one top digit) ordered stably by key bits 0-21
    in two 11-bit passes through ``dst``, back into ``src``: a bucket's few thousand
    entries stay in the core's cache for the three passes."""
    for j in range(2048):
        c0[j] = 0
        c1[j] = 0
    for i in range(s, e):
        k = src[i] >> 32
        c0[k & 2047] += 1
        c1[(k >> 11) & 2047] += 1
    t0 = s
    t1 = s
    for j in range(2048):
        c = c0[j]
        c0[j] = t0
        t0 += c
        c = c1[j]
        c1[j] = t1
        t1 += c
    for i in range(s, e):
        x = src[i]
        j = (x >> 32) & 2047
        dst[c0[j]] = x
        c0[j] += 1
    for i in range(s, e):
        x = dst[i]
        j = (x >> 43) & 2047
        src[c1[j]] = x
        c1[j] += 1


@njit(nogil=True, cache=True)
def _radix_by_key(packed, scratch):  # type: ignore[no-untyped-def]
    """``packed`` ordered by its key bits (``>> 32``, below ``2**33``), stably, in
    digits of 11 bits.  One read pass counts every digit.  When the top digit
    (bits 22-32) spreads the entries over buckets of ``_MSD_MIN`` or more on
    average (a sparse block's random keys: 250,000 entries of 28-bit keys fill 64),
    one pass moves each entry to its top bucket and each bucket is then sorted by
    the two low digits while it sits in cache (:func:`_lsd_low`); otherwise least
    significant digit first over the whole array, a digit whose entries all share
    one value skipped.  Returns ``packed`` or ``scratch``, whichever holds the result."""
    n = packed.shape[0]
    counts = np.zeros((3, 2048), np.int64)
    for i in range(n):
        k = packed[i] >> 32
        counts[0, k & 2047] += 1
        counts[1, (k >> 11) & 2047] += 1
        counts[2, (k >> 22) & 2047] += 1
    used = 0
    for b in range(2048):
        used += counts[2, b] > 0
    if used > 1 and n >= _MSD_MIN * used:
        top = counts[2]
        starts = np.empty(2049, np.int64)
        total = 0
        for b in range(2048):
            starts[b] = total
            total += top[b]
        starts[2048] = total
        fill = starts[:2048].copy()
        for i in range(n):
            e = packed[i]
            b = (e >> 54) & 2047
            scratch[fill[b]] = e
            fill[b] += 1
        c0 = np.empty(2048, np.int64)
        c1 = np.empty(2048, np.int64)
        for b in range(2048):
            if starts[b + 1] > starts[b]:
                _lsd_low(scratch, packed, starts[b], starts[b + 1], c0, c1)
        return scratch
    src, dst = packed, scratch
    for d in range(3):
        total = 0
        whole = False
        for b in range(2048):
            c = counts[d, b]
            whole = whole or c == n
            counts[d, b] = total
            total += c
        if whole:
            continue
        shift = 32 + 11 * d
        for i in range(n):
            e = src[i]
            b = (e >> shift) & 2047
            dst[counts[d, b]] = e
            counts[d, b] += 1
        src, dst = dst, src
    return src


def sort_by_key(packed: np.ndarray, other: np.ndarray | None = None) -> np.ndarray:
    """Packed entries (keys in ``[0, 2**33)``) ordered by key; the input may be reordered.

    A numba radix sort over the key bits only (numpy sorts int64 with its scalar
    introsort: 23.5 ms for 500,000 entries on the benchmark machine, the radix
    sort ~3-6 ms).  ``other``: a second buffer of the same length for the sort
    (default: a reused scratch buffer, see :mod:`._scratch`); the result is
    ``packed`` or ``other``.  Entries of one key keep their order.  Short arrays
    use numpy.
    """
    if packed.shape[0] < 4096:
        packed.sort()
        return packed
    if other is None:
        other = scratch("radix", packed.shape[0], np.int64)
    return _radix_by_key(packed, other)  # type: ignore[no-any-return]


def sorted_values(packed: np.ndarray, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """``(entries, values)``: the packed entries sorted by key (in ``packed`` or in
    this thread's ``"radix"`` scratch buffer; ``packed`` is reordered) and a view of
    their low 32 bits as ``dtype`` (float32 or int32)."""
    if dtype not in (np.float32, np.int32):
        raise InvalidTypeError(f"packed values: expected float32 or int32, got {dtype}")
    n = packed.shape[0]
    if n < 4096:
        packed.sort()
        done = packed
    else:
        done = _radix_by_key(packed, scratch("radix", n, np.int64))
    if sys.byteorder == "little":  # the low 32 bits of each entry, read in place
        return done, done.view(np.uint32)[0::2].view(dtype)
    return done, (done & 0xFFFFFFFF).astype(np.uint32).view(dtype)  # pragma: no cover


def unpack_reduce(
    packed: np.ndarray,
    dtype: np.dtype,
    offset: int = 0,
    into: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Sort packed entries by key (reordering ``packed``); return unique ascending
    ``keys + offset`` and the sum of the values of each key (one pass after the sort).

    The results live in ``packed`` and in a scratch buffer of this thread
    (:mod:`._scratch`, no fresh pages): use them before the next call here.  With
    ``into = (keys, vals)`` (each at least ``len(packed)`` long) they are written
    there instead, and views of their first entries returned.
    """
    done, values = sorted_values(packed, dtype)
    n = packed.shape[0]
    free = None if n < 4096 else (packed if done is not packed else scratch("radix", n, np.int64))
    # the keys overwrite the sorted entries as they are read; the sums go to the
    # other buffer (free once sorted)
    if into is not None:
        k = _unpack_reduce(done, values, offset, into[0], into[1])
        return into[0][:k], into[1][:k]
    vals = np.empty(n, dtype) if free is None else free.view(np.uint32)[:n].view(dtype)
    k = _unpack_reduce(done, values, offset, done, vals)
    return done[:k], vals[:k]


def plan_packed(
    m: ArrayMeta,
    values: Any,
    rows: Any,
    cols: Any,
    casting: str | None,
    on_nonfinite: str | None,
    alloc: Callable[[int], np.ndarray | None] | None = None,
) -> tuple[dict[int, dict[str, Any]], dict[int, int]] | None:
    """Parts ``{block: {block, rows: [local row], packed}}`` and their costs for an
    increment of one row at the columns ``cols``; ``None`` when the request is not
    of that form or a block is too wide to pack (the general path plans it).
    ``alloc(nbytes)``: a uint8 buffer (or None) to pack into, e.g. shared memory
    that same-machine servers read in place (:meth:`daskangel._shm.ShmBuffers.lease`).
    """
    lay = m.layout
    if lay.col_mode != "range" or (rows is None and m.shape[0] != 1):
        return None
    if max(np.diff(lay.col_bounds)) >= 2**31:  # a local column must fit in 31 bits
        return None
    r, r_scalar = normalize_index("rows", rows, m.shape[0])
    if r is not None and r.shape[0] != 1:
        return None
    c, c_scalar = normalize_index("cols", cols, m.shape[1])
    if c is None or c_scalar:
        return None
    n = c.shape[0]
    shape = (n,) if m.ndim == 1 or r_scalar else (1, n)  # as _axes makes it
    try:
        vals = np.broadcast_to(np.asarray(values), shape).reshape(n)
    except ValueError:
        return None  # the general path names the mismatch
    check_size("values", vals.size * m.itemsize)
    vals, keep = check_values(vals, m.dtype, casting, on_nonfinite)
    if keep is not None:
        c, vals = c[keep], vals[keep]
    row = 0 if r is None else int(r[0])
    rb = int(np.searchsorted(lay.row_bounds, row, side="right")) - 1
    bits = np.ascontiguousarray(vals).view(np.uint32)
    split = c.shape[0] >= config.get("daskangel.client.split-pack-keys")
    bounds = np.asarray(lay.col_bounds, dtype=np.int64)
    buf = None if alloc is None else alloc(c.shape[0] * 8)
    out = None if buf is None else buf[: c.shape[0] * 8].view(np.int64)
    starts, packed = pack_by_bounds(c, bits, bounds, split, out)
    parts: dict[int, dict[str, Any]] = {}
    cost: dict[int, int] = {}
    for cb in range(lay.n_col_blocks):
        s0, s1 = int(starts[cb]), int(starts[cb + 1])
        if s1 > s0:
            b = rb * lay.n_col_blocks + cb
            parts[b] = {"block": b, "rows": [row - lay.row_bounds[rb]], "packed": packed[s0:s1]}
            cost[b] = (s1 - s0) * 12
    return parts, cost
