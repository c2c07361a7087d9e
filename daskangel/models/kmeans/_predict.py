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

from ...data import Dataset
from ...errors import InvalidArgumentError
from .._core import in_input_order, is_dask
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
    k = C.shape[0]
    two_d = what == "transform"
    dtype = np.int32 if what == "labels" else np.float64
    if isinstance(X, Dataset):
        ds = X if X.persisted else X.persist(est._client())
        if ds.n_features > est.n_features_in_:
            raise InvalidArgumentError(
                f"X: the Dataset has {ds.n_features} features, but {type(est).__name__} "
                f"is expecting {est.n_features_in_} features as input"
            )
        client = ds.client
        assert client is not None
        [cf] = client.scatter([C], broadcast=True)
        futs = ds.map_partitions(_partition, cf, what)
        return in_input_order(ds, futs, k if two_d else None, dtype)
    if hasattr(X, "to_dask_array"):
        X = X.to_dask_array(lengths=True)
    if is_dask(X):
        import dask

        if X.ndim != 2 or X.shape[1] != est.n_features_in_:
            raise InvalidArgumentError(
                f"X has {X.shape[-1] if X.ndim else 0} features, but {type(est).__name__} "
                f"is expecting {est.n_features_in_} features as input"
            )
        Xr = X.rechunk({1: -1})
        cd = dask.delayed(C, pure=True)
        if two_d:
            return Xr.map_blocks(_apply, cd, what, dtype=dtype, chunks=(Xr.chunks[0], (k,)))
        return Xr.map_blocks(_apply, cd, what, dtype=dtype, drop_axis=1)
    from sklearn.utils.validation import check_array

    X = check_array(X, accept_sparse="csr", dtype=[np.float64, np.float32])
    if X.shape[1] != est.n_features_in_:
        raise InvalidArgumentError(
            f"X has {X.shape[1]} features, but {type(est).__name__} is expecting "
            f"{est.n_features_in_} features as input"
        )
    return _apply(X, C, what)
