"""Scattering sparse writes into a dense block, with the next entries prefetched.

A compressed-row or coordinate update writes entries spread over a block of tens
of MiB: every entry is a cache miss (an LDA-shaped 10,000-row x 20 increment
touches ~100,000 cache lines in ~100 MB of blocks a server).  The CPU overlaps
only as many misses as it has buffers for them; prefetches for writing
(``prefetchw``, into the first-level cache) take the same few buffers, so
prefetching further ahead with them gained nothing (1.16-1.24 ms for 100,000
entries at any distance, seventh session).  These kernels prefetch in two steps:
each entry's line :data:`FAR` entries ahead is read into the second-level cache
(``llvm.prefetch`` with locality 2: ``prefetcht1``, whose misses the larger
second-level queue tracks), and :data:`NEAR` entries ahead the line is asked for
writing, from there.  Measured in one process on the benchmark VM (64 MB of other
writes between calls, 100,000 fresh entries of 20 a row, sorted rows, medians):
into 25,000 x 1,000 int32 (LDA-shaped) 1.44-1.46 ms one-step (48 entries ahead, for
writing) -> 0.80-0.81 ms, coordinates 1.31-1.35 -> 0.74-0.83 ms; into 25,000 x 50
float32 (MF-shaped) 0.36-0.37 -> 0.26 ms (RESULTS.md, issue 14, push side, eighth
session).  Prefetches are hints: they never fault.

Example
-------
>>> import numpy as np
>>> b = np.zeros((3, 4), np.int32)
>>> scatter_csr(b, np.array([0, 2]), np.array([2, 1]), np.array([1, 1, 3]),
...             np.array([5, 6, 7], np.int32), True)
>>> b.tolist()
[[0, 11, 0, 0], [0, 0, 0, 0], [0, 0, 0, 7]]
"""

from __future__ import annotations

from typing import Any

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from ..errors import InvalidArgumentError, PSIndexError, ShapeMismatchError

__all__ = ["FAR", "NEAR", "check_csr", "csr_extents", "scatter_coo", "scatter_csr"]

#: entries ahead whose lines are read into the second-level cache, and entries
#: ahead whose lines are then asked for writing (128-512 / 16-48 measured alike;
#: kernel constants, like a loop's unrolling, not settings)
FAR = 160
NEAR = 40


def _prefetcher(write: int, locality: int) -> Any:
    """An intrinsic ``(block, r, c)`` prefetching ``block[r, c]``'s cache line
    (no bounds check: a prefetch of any address is harmless)."""

    @intrinsic
    def prefetch(typingctx: Any, block: Any, r: Any, c: Any) -> Any:
        sig = types.void(block, r, c)

        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            aryty = signature.args[0]
            ary = context.make_array(aryty)(context, builder, args[0])
            ri = context.cast(builder, args[1], signature.args[1], types.intp)
            ci = context.cast(builder, args[2], signature.args[2], types.intp)
            ptr = cgutils.get_item_pointer(context, builder, aryty, ary, [ri, ci], wraparound=False)
            i8p = ir.IntType(8).as_pointer()
            i32 = ir.IntType(32)
            fnty = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
            fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0i8")
            # (address, write?, locality, data cache)
            builder.call(
                fn,
                [
                    builder.bitcast(ptr, i8p),
                    ir.Constant(i32, write),
                    ir.Constant(i32, locality),
                    ir.Constant(i32, 1),
                ],
            )
            return context.get_dummy_value()

        return sig, codegen

    return prefetch


_to_l2 = _prefetcher(0, 2)  # read, into the second-level cache (prefetcht1)
#: ``(block, r, c)``: prefetch for writing (``prefetchw``; the linear models'
#: kernels use it too)
_prefetch = _prefetcher(1, 3)
_for_write = _prefetch


@njit(nogil=True, cache=True, inline="always")
def _rows_ahead(block, rows, lens, cols, j, off, k, dist, write):  # type: ignore[no-untyped-def]
    """Prefetch the lines of rows ``j, j+1, ...`` (row ``j``'s entries start at
    ``off``) until ``dist`` entries past entry ``k``, for writing or into L2;
    the next row and its first entry."""
    while j < rows.shape[0] and off - k < dist:
        r = rows[j]
        for e in range(off, off + lens[j]):
            if write:
                _for_write(block, r, cols[e])  # type: ignore[call-arg]
            else:
                _to_l2(block, r, cols[e])  # type: ignore[call-arg]
        off += lens[j]
        j += 1
    return j, off


@njit(nogil=True, cache=True)
def scatter_csr(block, rows, lens, cols, values, add):  # type: ignore[no-untyped-def]
    """``block[rows[i], cols[k]] (+)= values[k]`` for the ``lens[i]`` entries ``k`` of
    row ``i`` (compressed rows, in order); duplicates accumulate when adding.

    Prefetches whole rows: before each row, the rows after it until at least
    :data:`FAR` entries ahead are read into L2 and until :data:`NEAR` entries ahead
    asked for writing (a cursor a row, not an entry: a cursor an entry cost 0.75
    against 0.69 ms for the LDA shape above, 0.45 against 0.24 ms for the MF one)."""
    jf = 0  # the next row to read into L2, and its first entry
    off_f = 0
    jn = 0  # the next row to ask for writing, and its first entry
    off_n = 0
    k = 0
    for i in range(rows.shape[0]):
        jf, off_f = _rows_ahead(block, rows, lens, cols, jf, off_f, k, FAR, False)
        jn, off_n = _rows_ahead(block, rows, lens, cols, jn, off_n, k, NEAR, True)
        r = rows[i]
        for _ in range(lens[i]):
            if add:
                block[r, cols[k]] += values[k]
            else:
                block[r, cols[k]] = values[k]
            k += 1


@njit(nogil=True, cache=True)
def scatter_coo(block, rows, cols, values, add):  # type: ignore[no-untyped-def]
    """``block[rows[k], cols[k]] (+)= values[k]``; duplicates accumulate when adding."""
    n = rows.shape[0]
    for k in range(min(FAR, n)):
        _to_l2(block, rows[k], cols[k])  # type: ignore[call-arg]
    for k in range(n):
        if k + FAR < n:
            _to_l2(block, rows[k + FAR], cols[k + FAR])  # type: ignore[call-arg]
        if k + NEAR < n:
            _for_write(block, rows[k + NEAR], cols[k + NEAR])  # type: ignore[call-arg]
        if add:
            block[rows[k], cols[k]] += values[k]
        else:
            block[rows[k], cols[k]] = values[k]


@njit(nogil=True, cache=True)
def _extent(a):  # type: ignore[no-untyped-def]
    """``(min, max)`` of ``a`` as int64 (``(0, -1)`` when empty); branch-free
    ``min`` / ``max``, which vectorise (100,000 columns: ~5 us, ~55 us with a
    test of ``i == 0`` and a branch a value)."""
    if a.shape[0] == 0:
        return np.int64(0), np.int64(-1)
    lo = a[0]
    hi = a[0]
    for i in range(a.shape[0]):
        v = a[i]
        lo = min(lo, v)
        hi = max(hi, v)
    return np.int64(lo), np.int64(hi)


@njit(nogil=True, cache=True)
def csr_extents(rows, lens, cols):  # type: ignore[no-untyped-def]
    """``(rows min, rows max, lens min, lens sum, cols min, cols max)`` of compressed
    rows in one call (as int64; an empty array's extent is ``(0, -1)``, its sum 0)."""
    r_lo, r_hi = _extent(rows)
    l_lo, _ = _extent(lens)
    total = np.int64(0)
    for i in range(lens.shape[0]):
        total += np.int64(lens[i])
    c_lo, c_hi = _extent(cols)
    return r_lo, r_hi, l_lo, total, c_lo, c_hi


def check_csr(
    shape: tuple[int, ...],
    dtype: np.dtype,
    rows: np.ndarray,
    lens: np.ndarray,
    cols: np.ndarray,
    values: np.ndarray,
) -> None:
    """Check compressed rows for a dense block of ``shape`` and ``dtype`` before any
    is written: 1-D integer local rows, one count >= 0 a row adding up to the values,
    columns in range, values of the block's dtype or of a narrower integer type that
    casts to it safely (a narrowed wire: the kernel widens).  The extents come from
    one compiled pass (:func:`csr_extents`), not a numpy reduction each (~4 us
    apiece, six a part, several parts a request)."""
    for name, a in (("csr_rows", rows), ("csr_len", lens), ("csr_cols", cols), ("values", values)):
        if a.ndim != 1:
            raise ShapeMismatchError(f"{name}: expected a 1-D array, got shape {a.shape}")
        if name != "values" and a.dtype.kind not in "iu":
            raise InvalidArgumentError(f"{name}: expected integers, got dtype {a.dtype}")
    vt = values.dtype
    if vt != dtype and not (vt.kind in "iu" and np.can_cast(vt, dtype, "safe")):
        raise InvalidArgumentError(
            f"values: expected dtype {dtype} or a narrower integer type that casts to it "
            f"safely, got {vt}"
        )
    r_lo, r_hi, l_lo, total, c_lo, c_hi = csr_extents(rows, lens, cols)
    n = values.shape[0]
    if rows.shape != lens.shape or l_lo < 0:
        raise ShapeMismatchError(
            f"csr_len: expected one count >= 0 per row of csr_rows ({rows.shape[0]}), "
            f"got {lens.shape[0]}"
        )
    if total != n or cols.shape[0] != n:
        raise ShapeMismatchError(
            f"csr_cols: expected {int(total)} columns and values, got {cols.shape[0]} and {n}"
        )
    for name, lo, hi, extent in (("rows", r_lo, r_hi, shape[0]), ("cols", c_lo, c_hi, shape[1])):
        if hi >= lo and (lo < 0 or hi >= extent):
            raise PSIndexError(
                f"{name}: local index {int(lo if lo < 0 else hi)} outside [0, {extent})"
            )
