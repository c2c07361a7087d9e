"""Software prefetch of the rows a row kernel will visit next, two levels deep.

A row kernel visiting rows in a shuffled order (``order``) reads, for row ``t``,
``indptr[order[t]]`` (a random line of the row pointers), then the row's column
indices and values (random lines of the CSR arrays), then the weights of those
columns (random lines of a model of tens of MiB).  Each read waits on the one
before, so prefetching only the weights of a row ahead (:data:`._kernels.AHEAD_ROWS`)
still stalls on the first two: the prefetch's addresses are themselves misses.
:func:`prefetch_rows` asks, at row ``t``, for the row pointers of the row
:data:`AHEAD_PTR` ahead and the index and value lines of the row
:data:`AHEAD_LINES` ahead, so that by the time the kernel prefetches a row's
weights its indices are in cache.  Measured (one process, 450,000 Zipf rows of 30
keys, local AdaGrad, three epochs, loaded 2-core VM): 0.33-0.39 -> 0.29-0.33 CPU
seconds an epoch, the same weights to the bit (a prefetch is a hint: it never
faults and changes no value).

Example
-------
>>> import numpy as np
>>> ip, ix, dx = np.array([0, 2, 3]), np.array([4, 1, 2]), np.ones(3)
>>> prefetch_rows(ip, ix, dx, np.array([1, 0]), 0)   # no effect on any value
"""

from __future__ import annotations

from typing import Any

from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

__all__ = ["AHEAD_LINES", "AHEAD_PTR", "prefetch_rows"]

#: rows ahead whose column-index and value lines are prefetched (4-6 measured best,
#: 10 worse); a kernel constant like :data:`._kernels.AHEAD_ROWS`, not a setting
AHEAD_LINES = 6
#: rows ahead whose row-pointer line is prefetched (twice :data:`AHEAD_LINES`)
AHEAD_PTR = 12


@intrinsic
def _prefetch_read(typingctx: Any, arr: Any, i: Any) -> Any:
    """Prefetch the line of ``arr[i]`` (a 1-D array) for reading; no bounds check
    (a prefetch of any address is harmless)."""
    sig = types.void(arr, i)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        aryty = signature.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        ii = context.cast(builder, args[1], signature.args[1], types.intp)
        ptr = cgutils.get_item_pointer(context, builder, aryty, ary, [ii], wraparound=False)
        i8p = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0i8")
        # (address, read, locality 3 = keep in every cache level, data cache)
        args_ = [builder.bitcast(ptr, i8p), ir.Constant(i32, 0), ir.Constant(i32, 3)]
        builder.call(fn, [*args_, ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return sig, codegen


@njit(nogil=True, cache=True, inline="always")
def prefetch_rows(indptr, indices, data, order, t):  # type: ignore[no-untyped-def]  # pragma: no cover
    """At row ``t`` of ``order``: prefetch the row pointers of row ``t + AHEAD_PTR``
    and the index and value lines of row ``t + AHEAD_LINES`` (every line of it)."""
    n = order.shape[0]
    if t + AHEAD_PTR < n:
        _prefetch_read(indptr, order[t + AHEAD_PTR])  # type: ignore[call-arg]
    if t + AHEAD_LINES < n:
        r = order[t + AHEAD_LINES]
        lo, hi = indptr[r], indptr[r + 1]
        si = max(1, 64 // indices.itemsize)
        sd = max(1, 64 // data.itemsize)
        for q in range(lo, hi, si):
            _prefetch_read(indices, q)  # type: ignore[call-arg]
        if hi > lo:
            _prefetch_read(indices, hi - 1)  # type: ignore[call-arg]
        for q in range(lo, hi, sd):
            _prefetch_read(data, q)  # type: ignore[call-arg]
        if hi > lo:
            _prefetch_read(data, hi - 1)  # type: ignore[call-arg]
