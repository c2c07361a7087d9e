"""Margins of a fitted linear model on any input: local in, local out; dask in, dask out.

* numpy / ``scipy.sparse`` / pandas: checked like scikit-learn checks them and
  computed here (``X @ W[:-1] + W[-1]``);
* a dask array or dataframe: a lazy dask array, one block per row chunk
  (the weights travel once, as one graph key);
* a daskangel Dataset: each partition is scored on the worker holding it and
  the result is a dask array over those futures, rows in the input's order
  (:func:`.._core._predict.in_input_order`); a Dataset with more features than
  the model is refused (fewer: the missing ones weigh 0, as for a libsvm test
  file whose last features never occur).

Example
-------
>>> import numpy as np
>>> W = np.array([[1.0], [2.0], [0.5]])
>>> local_margins(np.array([[1.0, 0.0], [0.0, 1.0]]), W).ravel().tolist()
[1.5, 2.5]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...data import Dataset
from ...errors import InvalidArgumentError
from .._core._input import check_feature_names, is_dask
from .._core._predict import in_input_order

__all__ = ["local_margins", "margins_of"]


def local_margins(X: Any, W: np.ndarray) -> np.ndarray:
    """``X @ W[:-1] + W[-1]`` for a numpy or scipy.sparse ``X`` (float64, ``(n, K)``)."""
    out = X @ W[:-1]
    return np.asarray(out, np.float64).reshape(X.shape[0], -1) + W[-1]


def _partition_margins(part: Any, W: np.ndarray) -> np.ndarray:
    X = part.csr().to_scipy()
    n = X.shape[1]
    if n > W.shape[0] - 1:  # checked on the driver; a rewritten partition could differ
        raise InvalidArgumentError(
            f"X has {n} features, but the model is expecting {W.shape[0] - 1} features"
        )
    return local_margins(X, np.vstack([W[:n], W[-1:]]))


def margins_of(est: Any, X: Any, W: np.ndarray) -> Any:
    """Margins ``(n, K)`` of ``X`` under weights ``W`` (see the module docstring)."""
    K = W.shape[1]
    check_feature_names(est, X, reset=False)
    if isinstance(X, Dataset):
        ds = X if X.persisted else X.persist()
        if ds.n_features > est.n_features_in_:
            raise InvalidArgumentError(
                f"X: the Dataset has {ds.n_features} features, but {type(est).__name__} "
                f"is expecting {est.n_features_in_} features as input"
            )
        client = ds.client
        assert client is not None
        [wf] = client.scatter([W], broadcast=True)
        futs = ds.map_partitions(_partition_margins, wf)
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
        wd = dask.delayed(W, pure=True)
        return Xr.map_blocks(local_margins, wd, dtype=np.float64, chunks=(Xr.chunks[0], (K,)))
    from sklearn.utils.validation import check_array

    X = check_array(X, accept_sparse="csr", dtype=[np.float64, np.float32])
    if X.shape[1] != est.n_features_in_:
        raise InvalidArgumentError(
            f"X has {X.shape[1]} features, but {type(est).__name__} is expecting "
            f"{est.n_features_in_} features as input"
        )
    return local_margins(X, W)
