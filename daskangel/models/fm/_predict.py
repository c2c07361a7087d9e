"""Margins of a fitted factorization machine on any input: local in, local out; dask in, dask out.

* numpy / ``scipy.sparse`` / pandas: checked like scikit-learn checks them and
  scored here by the compiled kernel over CSR rows (global indices: the model's
  rows are the features, the bias last);
* a dask array or dataframe: a lazy dask array, one block per row chunk (the
  model travels once, as one graph key);
* a daskangel Dataset: each partition is scored on the worker holding it and
  the result is a dask array over those futures, rows in the input's order
  (:func:`.._core._predict.in_input_order`); a Dataset with more features than
  the model is refused (fewer: the missing ones are absent, as for a libsvm
  test file whose last features never occur).

Example
-------
>>> import numpy as np
>>> W = np.array([[0.5, 1.0], [0.0, 2.0], [0.1, 0.0]])     # 2 features, k = 1, bias last
>>> local_margins(np.array([[1.0, 1.0]]), W, None).tolist()  # 0.1 + 0.5 + 1 * 2
[2.6]
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from ...errors import InvalidArgumentError
from .._core._predict import apply_rows
from ._kernels import margins

__all__ = ["local_margins", "margins_of"]

_NO_FIELDS = np.zeros(0, np.int32)


def local_margins(X: Any, W: np.ndarray, fields: np.ndarray | None) -> np.ndarray:
    """Margins ``(n,)`` of a numpy or scipy.sparse ``X`` under the model rows ``W``."""
    X = sp.csr_matrix(X)
    X.sort_indices()
    f = _NO_FIELDS if fields is None else np.append(fields, 0).astype(np.int32)
    nf = 0 if fields is None else int(fields.max(initial=0)) + 1
    return margins(  # type: ignore[no-any-return]
        X.indptr, X.indices, np.asarray(X.data, np.float64), W, f, nf
    )


def _partition_margins(part: Any, W: np.ndarray, fields: np.ndarray | None) -> np.ndarray:
    X = part.csr().to_scipy()
    n = W.shape[0] - 1
    if X.shape[1] > n:  # checked on the driver; a rewritten partition could differ
        raise InvalidArgumentError(
            f"X has {X.shape[1]} features, but the model is expecting {n} features as input"
        )
    X = sp.csr_matrix((X.data, X.indices, X.indptr), shape=(X.shape[0], n))
    return local_margins(X, W, fields)


def margins_of(est: Any, X: Any, W: np.ndarray, fields: np.ndarray | None) -> Any:
    """Margins ``(n,)`` of ``X`` (see the module docstring)."""
    return apply_rows(
        est,
        X,
        W,
        partition=_partition_margins,
        block=local_margins,
        local=local_margins,
        args=(fields,),
    )
