"""Margins of a fitted GBDT on any input: local in, local out; dask in, dask out.

* numpy / ``scipy.sparse`` / pandas: checked like scikit-learn checks them (NaN
  allowed: missing) and walked here;
* a dask array or dataframe: a lazy ``(n, K)`` dask array, one block per row
  chunk (the trees travel once, as one graph key);
* a daskangel Dataset: each partition is walked on the worker holding it; the
  result is a dask array over those futures, rows in the input's order
  (:func:`.._core._predict.in_input_order`).

A DataFrame's column names must be the ones seen at fit (``feature_names_in_``).

Example
-------
>>> import numpy as np
>>> class E:
...     n_features_in_ = 2
>>> check_local(E(), np.array([[1.0, np.nan]])).shape
(1, 2)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...data import Dataset
from ...errors import InvalidArgumentError
from .._core._input import check_feature_names, is_dask
from .._core._predict import in_input_order
from ._trees import margins

__all__ = ["check_local", "raw_margins"]


def check_local(est: Any, X: Any) -> Any:
    """``X`` as float numpy or CSR, NaN allowed, with the model's number of features."""
    from sklearn.utils.validation import check_array

    X = check_array(
        X, accept_sparse="csr", dtype=[np.float64, np.float32], ensure_all_finite="allow-nan"
    )
    if X.shape[1] != est.n_features_in_:
        raise InvalidArgumentError(
            f"X has {X.shape[1]} features, but {type(est).__name__} is expecting "
            f"{est.n_features_in_} features as input"
        )
    return X


def _part_margins(part: Any, T: np.ndarray, K: int, base: np.ndarray, missing: bool) -> np.ndarray:
    return margins(part.csr().to_scipy(), T, K, base, missing)


def _block_margins(x: Any, T: np.ndarray, K: int, base: np.ndarray, missing: bool) -> np.ndarray:
    return margins(x if hasattr(x, "tocsr") else np.asarray(x), T, K, base, missing)


def raw_margins(est: Any, X: Any, T: np.ndarray) -> Any:
    """Margins ``(n, K)`` of ``X`` under the trees ``T`` (see the module docstring)."""
    K = int(est.n_trees_per_iteration_)
    base = np.asarray(est.baseline_, np.float64)
    missing = bool(est.unstored_missing_)
    check_feature_names(est, X, reset=False)
    if isinstance(X, Dataset):
        ds = X if X.persisted else X.persist()
        client = ds.client
        assert client is not None
        [tf] = client.scatter([T], broadcast=True)
        futs = ds.map_partitions(_part_margins, tf, K, base, missing)
        return in_input_order(ds, futs, K)
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
        td = dask.delayed(T, pure=True)
        return Xr.map_blocks(
            _block_margins, td, K, base, missing, dtype=np.float64, chunks=(Xr.chunks[0], (K,))
        )
    return margins(check_local(est, X), T, K, base, missing)
