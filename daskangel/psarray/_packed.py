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
from ._packkernels import _radix_by_key, count_by_bounds, scan_counts, scatter_few, scatter_packed
from ._routing import check_size, check_values, normalize_index, selected
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
    counts: list[np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Group column indices by range and pack each with its 32-bit value.

    ``idx`` (int64, validated) falls into ranges ``[bounds[g], bounds[g + 1])``;
    ``bits`` are the values' 32 bits (a ``uint32`` view of float32 / int32).
    Returns ``(starts, packed)``: ``packed[starts[g]:starts[g + 1]]`` holds
    ``(idx - bounds[g]) << 32 | bits`` of group ``g``, in request order.  A
    counting pass and one to scatter; the values are never gathered separately.
    ``split`` scatters the two halves in two threads (a parallel counting sort:
    each half writes its own slots of every group).  ``out``: an int64 array of
    ``len(idx)`` to pack into (default: a new one).  ``counts``: the counts by
    range already made (:func:`_halves`), of the whole or of the two halves.
    """
    n = idx.shape[0]
    packed = np.empty(n, np.int64) if out is None else out
    starts = np.zeros(bounds.shape[0], np.int64)
    h = n // 2
    if counts is None:
        halves = (idx[:h], idx[h:]) if split else (idx,)
        counts = [count_by_bounds(x, bounds) for x in halves]
    if not split:
        np.cumsum(counts[0], out=starts[1:])
        _scatter(idx, bits, bounds, starts[:-1], packed)
        return starts, packed
    counts0, counts1 = counts
    np.cumsum(counts0 + counts1, out=starts[1:])
    done = helper().submit(_scatter, idx[:h], bits[:h], bounds, starts[:-1], packed)
    _scatter(idx[h:], bits[h:], bounds, starts[:-1] + counts0, packed)
    done.result()
    return starts, packed


def _halves(cols: Any, extent: int, bounds: np.ndarray, split: bool) -> list[np.ndarray] | None:
    """The counts by range of an int64 index of at most 4 ranges, of the whole or
    of its halves (``split``), range-checked in the same pass (:func:`scan_counts`);
    None for any other index or one out of range (``normalize_index`` then checks
    it the general way and names the fault)."""
    if not (
        isinstance(cols, np.ndarray)
        and cols.dtype == np.int64
        and cols.ndim == 1
        and cols.shape[0] >= 2
        and bounds.shape[0] <= 5
    ):
        return None
    h = cols.shape[0] // 2
    got = [scan_counts(x, bounds) for x in ((cols[:h], cols[h:]) if split else (cols,))]
    if min(g[0] for g in got) < 0 or max(g[1] for g in got) >= extent:
        return None
    return [g[2] for g in got]


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
    bounds = np.asarray(lay.col_bounds, dtype=np.int64)
    split = selected(cols, m.shape[1]) >= config.get("daskangel.client.split-pack-keys")
    counts = _halves(cols, m.shape[1], bounds, split)
    if counts is not None:
        c, c_scalar = cols, False
    else:
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
        c, vals, counts = c[keep], vals[keep], None
    row = 0 if r is None else int(r[0])
    rb = int(np.searchsorted(lay.row_bounds, row, side="right")) - 1
    bits = np.ascontiguousarray(vals).view(np.uint32)
    buf = None if alloc is None else alloc(c.shape[0] * 8)
    out = None if buf is None else buf[: c.shape[0] * 8].view(np.int64)
    starts, packed = pack_by_bounds(c, bits, bounds, split, out, counts)
    parts: dict[int, dict[str, Any]] = {}
    cost: dict[int, int] = {}
    for cb in range(lay.n_col_blocks):
        s0, s1 = int(starts[cb]), int(starts[cb + 1])
        if s1 > s0:
            b = rb * lay.n_col_blocks + cb
            parts[b] = {"block": b, "rows": [row - lay.row_bounds[rb]], "packed": packed[s0:s1]}
            cost[b] = (s1 - s0) * 12
    return parts, cost
