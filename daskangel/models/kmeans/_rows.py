"""A task's rows prepared for assignment: dense float32, or CSR over the columns it uses.

A partition stored dense (:class:`~daskangel.data.DenseBatch`, what ``KMeans``
makes of dense input) is assigned from its block as it is.  Otherwise a partition whose stored entries fill at least ``daskangel.kmeans.dense-density``
of its ``rows x features`` becomes one dense float32 block (a BLAS product per
block of rows); a sparser one stays CSR with its column indices renumbered to
the sorted distinct columns it uses (``keys``), so a task pulls only those
columns of the centres and pushes sums only for them.  Row norms ``||x||^2`` are
computed once.  Prepared rows are kept on the worker while the partition lives
(``_core.PREPARED``): refits and parameter searches prepare a partition once.

Example
-------
>>> import numpy as np
>>> from daskangel.data._batch import CSRBatch
>>> b = CSRBatch.from_arrays([0, 1, 2], [3, 5], [1.0, 2.0], [0.0, 0.0], 8)
>>> r = rows_of_batch(b, 8)
>>> r.dense is None, r.keys.tolist(), r.indices.tolist(), r.xnorm.tolist()
(True, [3, 5], [0, 1], [1.0, 4.0])
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ... import config
from ...data import DenseBatch
from .._core import PREPARED
from ._kernels import Assigned, assign_csr_rows, assign_dense_blocks, csr_row_norms, row_norms

__all__ = ["TaskRows", "part_matrix", "rows_of", "rows_of_batch"]


@dataclass(frozen=True, slots=True, eq=False)
class TaskRows:
    """Rows of one partition ready for :meth:`assign` (see the module docstring)."""

    n: int
    n_features: int
    keys: np.ndarray  # (m,) int64 global columns the rows use (dense: all of them)
    xnorm: np.ndarray  # (n,) float64
    dense: np.ndarray | None  # (n, d) float32, or None for CSR
    indptr: np.ndarray
    indices: np.ndarray  # CSR columns as positions in ``keys``
    data: np.ndarray

    @property
    def nbytes(self) -> int:
        arrs = (self.keys, self.xnorm, self.indptr, self.indices, self.data)
        return sum(a.nbytes for a in arrs) + (0 if self.dense is None else self.dense.nbytes)

    @property
    def all_columns(self) -> bool:
        return self.dense is not None

    def assign(self, C: np.ndarray, accumulate: bool, cnorm: np.ndarray | None = None) -> Assigned:
        """Nearest of the centres ``C`` (k, len(keys)) for every row.

        ``cnorm``: ``||c||^2`` of each centre over every feature; needed for CSR rows
        whose ``keys`` are not all the features (``C`` then misses part of each
        centre), ``None`` when ``C`` is whole.
        """
        if self.dense is not None:
            return assign_dense_blocks(self.dense, self.xnorm, C, accumulate)
        return assign_csr_rows(self.indptr, self.indices, self.data, self.xnorm, C, accumulate,
                               cnorm)  # fmt: skip

    def take(self, idx: np.ndarray) -> TaskRows:
        """The rows ``idx`` (a minibatch); CSR rows keep only the columns they use."""
        idx = np.asarray(idx, np.int64)
        if self.dense is not None:
            e = np.empty(0)
            return TaskRows(idx.size, self.n_features, self.keys, self.xnorm[idx],
                            self.dense[idx], self.indptr, e, e)  # fmt: skip
        lens = self.indptr[idx + 1] - self.indptr[idx]
        ptr = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
        pos = np.repeat(self.indptr[idx] - ptr[:-1], lens) + np.arange(ptr[-1])
        used, local = np.unique(self.indices[pos], return_inverse=True)
        return TaskRows(idx.size, self.n_features, self.keys[used], self.xnorm[idx], None, ptr,
                        local.astype(np.int32), self.data[pos])  # fmt: skip

    def row(self, i: int) -> np.ndarray:
        """Row ``i`` over the ``keys`` columns, float64."""
        if self.dense is not None:
            return self.dense[i].astype(np.float64)
        out = np.zeros(self.keys.shape[0])
        a, b = self.indptr[i], self.indptr[i + 1]
        out[self.indices[a:b]] = self.data[a:b]
        return out

    def global_row(self, i: int) -> np.ndarray:
        """Row ``i`` over every feature, float64."""
        out = np.zeros(self.n_features)
        out[self.keys] = self.row(i)
        return out


def _fit_width(X: np.ndarray, d: int) -> np.ndarray:
    """Dense rows over exactly ``d`` columns (extra ones dropped, missing ones zero)."""
    if X.shape[1] == d:
        return X
    if X.shape[1] > d:
        return np.ascontiguousarray(X[:, :d])
    return np.pad(X, ((0, 0), (0, d - X.shape[1])))


def part_matrix(part: Any, d: int) -> Any:
    """A partition's rows over ``d`` columns: the dense block of a
    :class:`~daskangel.data.DenseBatch` partition (no copy), else scipy CSR."""
    import scipy.sparse as sp

    b = part.csr()
    if isinstance(b, DenseBatch):
        return _fit_width(b.X, d)
    X = b.to_scipy()
    X = X[:, :d] if X.shape[1] > d else X
    return sp.csr_matrix((X.data, X.indices, X.indptr), shape=(X.shape[0], d))


def rows_of_batch(b: Any, n_features: int) -> TaskRows:
    """Prepare a :class:`~daskangel.data.CSRBatch` (see the module docstring)."""
    n = int(b.n_rows)
    if isinstance(b, DenseBatch):  # stored dense: the block itself, no copy
        X = _fit_width(b.X, int(n_features))
        e = np.empty(0)
        return TaskRows(n, int(n_features), np.arange(X.shape[1], dtype=np.int64),
                        row_norms(X), X, np.zeros(1, np.int64), e, e)  # fmt: skip
    ptr = np.asarray(b.indptr, np.int64)
    ptr = ptr - ptr[0]
    nnz = int(ptr[-1])
    idx = np.asarray(b.indices)[:nnz]
    val = np.asarray(b.data, np.float32)[:nnz]
    d = int(n_features)
    ok = idx < d  # a Dataset read with more features than the model: extra columns drop
    if not ok.all():
        keep = np.cumsum(np.concatenate([[0], ok]))
        ptr = keep[ptr]
        idx, val = idx[ok], val[ok]
    dense_min = float(config.get("daskangel.kmeans.dense-density"))
    if n and d and nnz >= dense_min * n * d:
        X = np.zeros((n, d), np.float32)
        rows = np.repeat(np.arange(n), np.diff(ptr))
        X[rows, idx] = val
        e = np.empty(0)
        return TaskRows(n, d, np.arange(d, dtype=np.int64), row_norms(X), X, ptr, e, e)
    # the used columns and their positions without sorting the nnz entries (a
    # d-long table; at 10 M rows the sort's int64 temporaries were GBs a worker)
    used = np.zeros(d, np.bool_)
    used[idx] = True
    keys = np.flatnonzero(used)
    pos = np.zeros(d, np.int32)
    pos[keys] = np.arange(keys.size, dtype=np.int32)
    xnorm = csr_row_norms(ptr, val)
    return TaskRows(n, d, keys.astype(np.int64), xnorm, None, ptr, pos[idx], val)


def rows_of(part: Any, n_features: int) -> TaskRows:
    """The prepared rows of a partition, made once per worker while it lives."""
    key = ("kmeans-rows", id(part), int(n_features))
    return PREPARED.get_or_make(part, key, lambda: rows_of_batch(part.csr(), n_features))
