"""Compiled assignment kernels: nearest centre, squared distance, per-cluster sums.

The squared distance of a row ``x`` to a centre ``c`` is taken in the
``||x||^2 - 2 x.c + ||c||^2`` form.  Dense rows get ``x.c`` for a chunk of
rows from one BLAS product made inside the compiled kernel (:func:`assign_dense`,
``daskangel.kmeans.block-rows`` rows at a time into a buffer that stays in
cache, no Python between chunks); CSR rows accumulate it entry by entry
against the transposed centres (:func:`assign_csr`), so sparse rows are never
densified.  Both kernels
then pick the nearest centre, keep the distance (clipped at 0: the form can go
slightly negative in floating point) and, when asked, add the row to its
cluster's sum and count (float64) for the centre update.

Example
-------
>>> import numpy as np
>>> X = np.array([[0.0, 0.0], [1.0, 0.0], [9.0, 9.0]], np.float32)
>>> C = np.array([[0.5, 0.0], [9.0, 9.0]])
>>> out = assign_dense_blocks(X, (X.astype(np.float64) ** 2).sum(1), C, True)
>>> out.labels.tolist(), round(out.inertia, 3), out.counts.tolist()
([0, 0, 1], 0.5, [2.0, 1.0])
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from ... import config

__all__ = [
    "Assigned",
    "assign_csr",
    "assign_csr_rows",
    "assign_dense",
    "assign_dense_blocks",
    "csr_row_norms",
    "row_norms",
    "top_rows",
]


@dataclass(frozen=True, slots=True, eq=False)
class Assigned:
    """One pass of assignment over a task's rows."""

    labels: np.ndarray  # (n,) int32 nearest centre
    dist: np.ndarray  # (n,) float64 squared distance to it
    inertia: float  # dist.sum()
    sums: np.ndarray  # (k, d) float64 per-cluster sums (zeros when not accumulated)
    counts: np.ndarray  # (k,) float64 rows per cluster


@njit(nogil=True, cache=True, inline="always")
def _nearest(dots, cnorm, xn, r, labels, dist):  # type: ignore[no-untyped-def]
    """Row ``r``'s nearest centre from its products ``dots`` with every centre: sets
    ``labels[r]`` and ``dist[r]`` (``xn + cnorm - 2 x.c``, clipped at 0), returns the label."""
    best = np.inf
    bj = 0
    for j in range(cnorm.shape[0]):
        v = cnorm[j] - 2.0 * dots[j]
        if v < best:
            best = v
            bj = j
    dd = xn + best
    labels[r] = bj
    dist[r] = dd if dd > 0.0 else 0.0
    return bj


@njit(nogil=True, cache=True)
def assign_dense(X, xnorm, CT, cnorm, chunk, labels, dist, sums, counts, accumulate):  # type: ignore[no-untyped-def]
    """Nearest centre of every dense row; returns the inertia.

    ``chunk`` rows at a time: ``D = X_chunk @ CT`` (one BLAS product into a
    reused ``(chunk, k)`` buffer that stays in cache), then for each row the
    nearest centre from ``cnorm - 2 D`` and, when ``accumulate``, the row added
    to its cluster's sum while it is still in cache (scikit-learn's Lloyd
    chunks work the same way).
    """
    n, d = X.shape
    k = CT.shape[1]
    b = max(1, min(chunk, n))
    D = np.empty((b, k), X.dtype)
    total = 0.0
    for s in range(0, n, b):
        e = min(n, s + b)
        m = e - s
        Dv = D[:m]
        np.dot(X[s:e], CT, Dv)
        for i in range(m):
            r = s + i
            bj = _nearest(Dv[i], cnorm, xnorm[r], r, labels, dist)
            total += dist[r]
            if accumulate:
                counts[bj] += 1.0
                for c in range(d):
                    sums[bj, c] += X[r, c]
    return total


@njit(nogil=True, cache=True)
def assign_csr(indptr, indices, data, CT, xnorm, cnorm, labels, dist, sums, counts, accumulate):  # type: ignore[no-untyped-def]
    """Nearest centre of CSR rows (``indices`` are columns of ``CT``, the (d, k)
    transposed centres, float64 or float32: products are taken in float64); sums
    go to ``sums[:, indices]``.  Returns the inertia."""
    n = indptr.shape[0] - 1
    k = CT.shape[1]
    acc = np.empty(k)
    total = 0.0
    for i in range(n):
        acc[:] = 0.0
        for p in range(indptr[i], indptr[i + 1]):
            c = indices[p]
            v = np.float64(data[p])
            for j in range(k):
                acc[j] += v * CT[c, j]
        bj = _nearest(acc, cnorm, xnorm[i], i, labels, dist)
        total += dist[i]
        if accumulate:
            counts[bj] += 1.0
            for p in range(indptr[i], indptr[i + 1]):
                sums[bj, indices[p]] += data[p]
    return total


@njit(nogil=True, cache=True)
def top_rows(dist, m):  # type: ignore[no-untyped-def]
    """Indices of the ``m`` largest of ``dist``, largest first (ties: lower index), in
    one pass keeping a sorted buffer of ``m`` (the re-seed candidates of a task)."""
    vals = np.empty(m)
    idx = np.empty(m, np.int64)
    cnt = 0
    for i in range(dist.shape[0]):
        v = dist[i]
        if cnt == m and not v > vals[m - 1]:
            continue
        j = cnt if cnt < m else m - 1
        while j > 0 and vals[j - 1] < v:
            vals[j] = vals[j - 1]
            idx[j] = idx[j - 1]
            j -= 1
        vals[j] = v
        idx[j] = i
        if cnt < m:
            cnt += 1
    return idx[:cnt].copy()


@njit(nogil=True, cache=True)
def csr_row_norms(indptr, data):  # type: ignore[no-untyped-def]
    """``||x||^2`` of each CSR row, float64 (no nnz-long temporary)."""
    n = indptr.shape[0] - 1
    out = np.zeros(n)
    for i in range(n):
        s = 0.0
        for p in range(indptr[i], indptr[i + 1]):
            v = np.float64(data[p])
            s += v * v
        out[i] = s
    return out


def row_norms(X: np.ndarray) -> np.ndarray:
    """``||x||^2`` of each dense row, float64."""
    return np.einsum("ij,ij->i", X, X, dtype=np.float64)


def assign_dense_blocks(
    X: np.ndarray, xnorm: np.ndarray, C: np.ndarray, accumulate: bool
) -> Assigned:
    """Assign dense rows ``X`` to centres ``C`` (k, d), a block of rows at a time."""
    n, d = X.shape
    k = C.shape[0]
    X = np.ascontiguousarray(X)
    CT = np.ascontiguousarray(np.asarray(C).T, dtype=X.dtype)
    cnorm = (np.asarray(C, np.float64) ** 2).sum(axis=1)
    labels = np.empty(n, np.int32)
    dist = np.empty(n, np.float64)
    sums = np.zeros((k, d), np.float64)
    counts = np.zeros(k, np.float64)
    chunk = max(1, int(config.get("daskangel.kmeans.block-rows")))
    total = assign_dense(X, np.asarray(xnorm, np.float64), CT, cnorm, chunk, labels, dist,
                         sums, counts, accumulate)  # fmt: skip
    return Assigned(labels, dist, float(total), sums, counts)


def assign_csr_rows(
    indptr: np.ndarray,
    indices: np.ndarray,
    data: np.ndarray,
    xnorm: np.ndarray,
    C: np.ndarray,
    accumulate: bool,
    cnorm: np.ndarray | None = None,
) -> Assigned:
    """Assign CSR rows whose ``indices`` are columns of ``C`` (k, d_local).

    ``cnorm``: the centres' ``||c||^2`` over *every* feature, when ``C`` holds only
    the columns the rows use (the distance needs the whole norm: a centre's mass on
    other columns is part of every row's distance to it); ``None``: from ``C``.
    """
    n = indptr.shape[0] - 1
    k, d = C.shape
    CT = np.asarray(C).T  # a transposed view of pulled centres is used as it is
    if CT.dtype not in (np.float32, np.float64) or not CT.flags.c_contiguous:
        CT = np.ascontiguousarray(CT, np.float64)
    if cnorm is None:
        cnorm = np.einsum("ij,ij->j", CT, CT, dtype=np.float64)
    cnorm = np.asarray(cnorm, np.float64)
    labels = np.empty(n, np.int32)
    dist = np.empty(n, np.float64)
    sums = np.zeros((k, d), np.float64)
    counts = np.zeros(k, np.float64)
    total = assign_csr(indptr, indices, data, CT, xnorm, cnorm, labels, dist, sums, counts,
                       accumulate)  # fmt: skip
    return Assigned(labels, dist, float(total), sums, counts)
