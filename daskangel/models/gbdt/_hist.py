"""Worker kernels of tree growing: histograms, row partitions, traversal (numba, nogil).

A task keeps, per tree of the round, its sampled training rows ordered by node
(``order``: row numbers; node ``n`` owns ``order[start[n]:start[n] + count[n]]``,
as LightGBM's data partition does).  Per level it

* builds the gradient / hessian / count histogram of each node it was told to
  build (:func:`hist_dense`, :func:`hist_sparse`: one pass over the node's rows,
  missing values skipped, into a ``(n_hist_rows, 3)`` float64 array),
* and, once the splits are known, cuts every split node's range into its left
  and right children in place, stably (:func:`split_dense`, :func:`split_sparse`).

Rows outside the partition (validation rows, rows left out by ``subsample``) get
their leaf by walking the tree over their bin codes (:func:`walk_dense`,
:func:`walk_sparse`).  Tree arrays: per node ``feat`` (-1 for a leaf), ``tbin``
(left when ``bin <= tbin``), ``mleft`` (missing goes left), ``left``,
``right``, ``value``.

Example
-------
>>> import numpy as np
>>> codes = np.array([[0], [1], [255], [1]], np.uint8)
>>> out = np.zeros((2, 3))
>>> hist_dense(codes, 255, np.array([0, 2]), np.arange(4, dtype=np.int32), 0, 4,
...            np.ones(4), np.ones(4), out)
>>> out[:, 2].tolist()
[1.0, 2.0]
"""

from __future__ import annotations

from numba import njit

from ...psarray._kernels import lower_bound

__all__ = [
    "add_leaf_values",
    "hist_dense",
    "hist_sparse",
    "split_dense",
    "split_sparse",
    "walk_dense",
    "walk_sparse",
]


@njit(nogil=True, cache=True)
def hist_dense(codes, missing, offsets, order, a, b, g, h, out):  # type: ignore[no-untyped-def]
    """Add rows ``order[a:b]`` of a bin-code matrix to ``out`` (rows: histogram rows)."""
    F = codes.shape[1]
    for i in range(a, b):
        r = order[i]
        gi = g[r]
        hi = h[r]
        for f in range(F):
            c = codes[r, f]
            if c != missing:
                j = offsets[f] + c
                out[j, 0] += gi
                out[j, 1] += hi
                out[j, 2] += 1.0


@njit(nogil=True, cache=True)
def hist_sparse(indptr, hrows, order, a, b, g, h, out):  # type: ignore[no-untyped-def]
    """Add rows ``order[a:b]`` of CSR bin rows to ``out``."""
    for i in range(a, b):
        r = order[i]
        gi = g[r]
        hi = h[r]
        for e in range(indptr[r], indptr[r + 1]):
            j = hrows[e]
            out[j, 0] += gi
            out[j, 1] += hi
            out[j, 2] += 1.0


@njit(nogil=True, cache=True)
def _sparse_bin(indptr, hrows, r, lo, hi):  # type: ignore[no-untyped-def]
    """Histogram row of row ``r``'s entry in ``[lo, hi)`` (a feature), or -1 if absent."""
    a = lower_bound(hrows, indptr[r], indptr[r + 1], lo)  # first entry >= lo
    if a < indptr[r + 1] and hrows[a] < hi:
        return hrows[a] - lo
    return -1


@njit(nogil=True, cache=True)
def _cut(order, a, c, nl, nr, buf, start, count, lc, rc):  # type: ignore[no-untyped-def]
    """Close a node's partition: the ``nr`` right rows from ``buf`` after the left ones."""
    for i in range(nr):  # loops, not slice copies: those add seconds of compilation
        order[a + nl + i] = buf[i]
    start[lc] = a
    count[lc] = nl
    start[rc] = a + nl
    count[rc] = c - nl


@njit(nogil=True, cache=True)
def split_dense(cols, missing, order, start, count, nodes, feat, tbin, mleft, left, right, buf):  # type: ignore[no-untyped-def]
    """Cut each node of ``nodes`` into its children ``left`` / ``right`` (arrays by split).

    ``cols``: the column-major codes (a node's rows read one feature's codes);
    the partition is stable and branch-free (every row is written to both
    sides, the side's end moves by the test), ``buf`` holds the right rows.
    """
    for s in range(nodes.shape[0]):
        n = nodes[s]
        a = start[n]
        c = count[n]
        col = cols[feat[s]]
        t = tbin[s]
        ml = mleft[s]
        nl = 0
        nr = 0
        for i in range(c):
            r = order[a + i]
            code = col[r]
            go = ml if code == missing else code <= t
            order[a + nl] = r
            buf[nr] = r
            nl += go
            nr += 1 - go
        _cut(order, a, c, nl, nr, buf, start, count, left[s], right[s])


@njit(nogil=True, cache=True)
def split_sparse(  # type: ignore[no-untyped-def]
    indptr, hrows, offsets, order, start, count, nodes, feat, tbin, mleft, left, right, buf
):
    """:func:`split_dense` for CSR bin rows (binary search of the split feature)."""
    for s in range(nodes.shape[0]):
        n = nodes[s]
        a = start[n]
        c = count[n]
        f = feat[s]
        lo = offsets[f]
        hi = offsets[f + 1]
        t = tbin[s]
        ml = mleft[s]
        nl = 0
        nr = 0
        for i in range(c):
            r = order[a + i]
            b = _sparse_bin(indptr, hrows, r, lo, hi)
            go = ml if b < 0 else b <= t
            order[a + nl] = r
            buf[nr] = r
            nl += go
            nr += 1 - go
        _cut(order, a, c, nl, nr, buf, start, count, left[s], right[s])


@njit(nogil=True, cache=True)
def add_leaf_values(order, start, count, leaves, values, margin):  # type: ignore[no-untyped-def]
    """``margin[row] += values[i]`` for every row of leaf ``leaves[i]``."""
    for i in range(leaves.shape[0]):
        n = leaves[i]
        v = values[i]
        for j in range(start[n], start[n] + count[n]):
            margin[order[j]] += v


@njit(nogil=True, cache=True)
def walk_dense(codes, missing, rows, feat, tbin, mleft, left, right, value, margin):  # type: ignore[no-untyped-def]
    """``margin[row] += tree(row)`` for ``rows`` of a bin-code matrix (one tree)."""
    for i in range(rows.shape[0]):
        r = rows[i]
        n = 0
        while feat[n] >= 0:
            c = codes[r, feat[n]]
            go = mleft[n] if c == missing else c <= tbin[n]
            n = left[n] if go else right[n]
        margin[r] += value[n]


@njit(nogil=True, cache=True)
def walk_sparse(indptr, hrows, offsets, rows, feat, tbin, mleft, left, right, value, margin):  # type: ignore[no-untyped-def]
    """:func:`walk_dense` for CSR bin rows."""
    for i in range(rows.shape[0]):
        r = rows[i]
        n = 0
        while feat[n] >= 0:
            f = feat[n]
            b = _sparse_bin(indptr, hrows, r, offsets[f], offsets[f + 1])
            go = mleft[n] if b < 0 else b <= tbin[n]
            n = left[n] if go else right[n]
        margin[r] += value[n]
