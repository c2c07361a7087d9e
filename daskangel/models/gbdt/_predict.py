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

from .._core._predict import apply_rows, check_width
from ._trees import margins

__all__ = ["check_local", "raw_margins"]


def check_local(est: Any, X: Any) -> Any:
    """``X`` as float numpy or CSR, NaN allowed, with the model's number of features."""
    return check_width(est, X, allow_nan=True)


def _part_margins(part: Any, T: np.ndarray, K: int, base: np.ndarray, missing: bool) -> np.ndarray:
    return margins(part.csr().to_scipy(), T, K, base, missing)


def _block_margins(x: Any, T: np.ndarray, K: int, base: np.ndarray, missing: bool) -> np.ndarray:
    return margins(x if hasattr(x, "tocsr") else np.asarray(x), T, K, base, missing)


def raw_margins(est: Any, X: Any, T: np.ndarray) -> Any:
    """Margins ``(n, K)`` of ``X`` under the trees ``T`` (see the module docstring)."""
    K = int(est.n_trees_per_iteration_)
    base = np.asarray(est.baseline_, np.float64)
    return apply_rows(
        est,
        X,
        T,
        partition=_part_margins,
        block=_block_margins,
        local=margins,
        args=(K, base, bool(est.unstored_missing_)),
        width=K,
        allow_nan=True,
    )
