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

from ...errors import InvalidArgumentError
from .._core._predict import apply_rows

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
    return apply_rows(
        est,
        X,
        W,
        partition=_partition_margins,
        block=local_margins,
        local=local_margins,
        width=W.shape[1],
    )
