"""Nearest centres and distances for any input: local in, local out; distributed in, dask out.

* numpy / ``scipy.sparse`` / pandas: checked like scikit-learn checks them and
  assigned here with the compiled kernels (:mod:`._kernels`);
* a dask array or dataframe: a lazy dask array, one block per row chunk (the
  centres travel once, as one graph key);
* a daskangel Dataset: each partition is assigned on the worker holding it and
  the result is a dask array over those futures, rows in the input's order
  (:func:`daskangel.models._core.in_input_order`).

Example
-------
>>> import numpy as np
>>> C = np.array([[0.0, 0.0], [10.0, 10.0]])
>>> assign_local(np.array([[1.0, 1.0], [9.0, 8.0]]), C).labels.tolist()
[0, 1]
>>> np.round(distances_local(np.array([[3.0, 4.0]]), C), 3).tolist()
[[5.0, 9.22]]
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from .._core import apply_rows
from ._kernels import Assigned, assign_csr_rows, assign_dense_blocks, row_norms
from ._rows import part_matrix

__all__ = ["assign_local", "distances_local", "map_input", "partition_assign"]


def assign_local(X: Any, C: np.ndarray) -> Assigned:
    """Nearest centre of each row of a numpy or CSR ``X`` (no densifying)."""
    if sp.issparse(X):
        X = sp.csr_matrix(X)
        v = np.asarray(X.data, np.float64)
        row = np.repeat(np.arange(X.shape[0]), np.diff(X.indptr))
        xnorm = np.bincount(row, weights=v * v, minlength=X.shape[0]).astype(np.float64)
        return assign_csr_rows(np.asarray(X.indptr, np.int64), X.indices, v, xnorm, C, False)
    Xd = np.ascontiguousarray(X, dtype=np.float64 if X.dtype == np.float64 else np.float32)
    return assign_dense_blocks(Xd, row_norms(Xd), C, False)


def distances_local(X: Any, C: np.ndarray) -> np.ndarray:
    """Euclidean distances ``(n, k)`` of the rows of ``X`` to the centres."""
    if sp.issparse(X):
        X = sp.csr_matrix(X, dtype=np.float64)
        xn = np.asarray(X.multiply(X).sum(axis=1), np.float64).ravel()
        dots = np.asarray((X @ C.T), np.float64)
    else:
        Xd = np.asarray(X, np.float64)
        xn = row_norms(Xd)
        dots = Xd @ C.T
    d2 = xn[:, None] - 2.0 * dots + (C * C).sum(axis=1)[None, :]
    return np.sqrt(np.maximum(d2, 0.0))


def _partition(part: Any, C: np.ndarray, what: str) -> np.ndarray:
    return _apply(part_matrix(part, C.shape[1]), C, what)


def partition_assign(part: Any, C: np.ndarray) -> tuple[np.ndarray, float]:
    """Labels and inertia of one partition's rows (on the worker holding it)."""
    out = assign_local(part_matrix(part, C.shape[1]), C)
    return out.labels, out.inertia


def _apply(X: Any, C: np.ndarray, what: str) -> np.ndarray:
    if what == "labels":
        return assign_local(X, C).labels
    if what == "dist":
        return assign_local(X, C).dist
    return distances_local(X, C)


def map_input(est: Any, X: Any, C: np.ndarray, what: str) -> Any:
    """``what`` (``'labels'``, ``'dist'`` or ``'transform'``) of every row of ``X``."""
    return apply_rows(
        est,
        X,
        C,
        partition=_partition,
        block=_apply,
        local=_apply,
        args=(what,),
        width=C.shape[0] if what == "transform" else None,
        dtype=np.int32 if what == "labels" else np.float64,
        client=est._client(),
    )
