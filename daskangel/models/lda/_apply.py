"""A fitted LDA applied to documents: theta (transform) and document-completion scores.

Local in, local out; dask in, dask out; a Dataset is processed on the workers
holding its partitions (the topics travel once) and gives a dask array (theta) or a
number (scores).  Inputs are checked like the training input: non-negative
integer counts over the model's ``V`` words.

Example
-------
>>> import numpy as np
>>> phi = np.array([[0.9, 0.1], [0.1, 0.9]])
>>> local_theta(np.array([[5, 0], [0, 0]]), phi, 0.1).round(2).tolist()
[[0.98, 0.02], [0.5, 0.5]]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ... import config
from ...data import Dataset
from ...errors import InvalidArgumentError
from .._core._input import check_feature_names, is_dask
from .._core._predict import in_input_order
from ._corpus import check_counts
from ._eval import completion_sums, fold_in

__all__ = ["local_scores", "local_theta", "score_of", "theta_of"]


def _csr(X: Any, n_words: int) -> Any:
    import scipy.sparse as sp

    X = sp.csr_matrix(X)
    if X.shape[1] != n_words:
        raise InvalidArgumentError(
            f"X has {X.shape[1]} words (features), but LDA is expecting {n_words} words as input"
        )
    X.sum_duplicates()
    check_counts(X.data)
    return X


def local_theta(X: Any, phi: np.ndarray, alpha: float) -> np.ndarray:
    """theta ``(n_docs, K)`` of local counts under topics ``phi`` (``K x V``)."""
    X = _csr(X, phi.shape[1])
    iters = int(config.get("daskangel.lda.fold-in-iters"))
    return fold_in(  # type: ignore[no-any-return]
        X.indptr.astype(np.int64), X.indices.astype(np.int64), X.data.astype(np.int64),
        np.ascontiguousarray(phi.T), float(alpha), iters,
    )  # fmt: skip


def local_scores(X: Any, phi: np.ndarray, alpha: float, seed: int) -> np.ndarray:
    """``[log-likelihood sum, tokens scored]`` of local counts by document completion."""
    X = _csr(X, phi.shape[1])
    w = X.indices.astype(np.int64)
    iters = int(config.get("daskangel.lda.fold-in-iters"))
    ll, n = completion_sums(
        X.indptr.astype(np.int64), w, w, X.data.astype(np.int64),
        np.ascontiguousarray(phi.T), float(alpha), iters, int(seed),
    )  # fmt: skip
    return np.array([ll, n], np.float64)


def _part_csr(part: Any, n_words: int) -> Any:
    m = part.csr().to_scipy()
    if m.shape[1] < n_words:
        import scipy.sparse as sp

        m = sp.csr_matrix((m.data, m.indices, m.indptr), shape=(m.shape[0], n_words))
    return m


def _part_theta(part: Any, phi: np.ndarray, alpha: float) -> np.ndarray:
    return local_theta(_part_csr(part, phi.shape[1]), phi, alpha)


def _part_scores(part: Any, phi: np.ndarray, alpha: float, seed: int) -> np.ndarray:
    return local_scores(_part_csr(part, phi.shape[1]), phi, alpha, seed)


def _check_dataset(X: Dataset, n_words: int) -> Dataset:
    ds = X if X.persisted else X.persist()
    if ds.n_features > n_words:
        raise InvalidArgumentError(
            f"X has {ds.n_features} words (features), but LDA is expecting {n_words} words as input"
        )
    return ds


def theta_of(est: Any, X: Any, phi: np.ndarray, alpha: float) -> Any:
    """theta of any input (see the module docstring)."""
    K, V = phi.shape
    check_feature_names(est, X, reset=False)
    if isinstance(X, Dataset):
        ds = _check_dataset(X, V)
        client = ds.client
        assert client is not None
        [pf] = client.scatter([phi], broadcast=True)
        futs = ds.map_partitions(_part_theta, pf, alpha)
        return in_input_order(ds, futs, K)
    if hasattr(X, "to_dask_array"):
        X = X.to_dask_array(lengths=True)
    if is_dask(X):
        if X.shape[1] != V:
            raise InvalidArgumentError(
                f"X has {X.shape[1]} words (features), but LDA is expecting {V} words as input"
            )
        X = X.rechunk({1: -1})
        return X.map_blocks(local_theta, phi, alpha, chunks=(X.chunks[0], (K,)), dtype=np.float64)
    from sklearn.utils.validation import check_array

    X = check_array(X, accept_sparse="csr", dtype="numeric")
    return local_theta(X, phi, alpha)


def score_of(est: Any, X: Any, phi: np.ndarray, alpha: float) -> tuple[float, int]:
    """``(log-likelihood sum, tokens scored)`` of any input by document completion."""
    seed = int(getattr(est, "seed_", 0) or 0)
    V = phi.shape[1]
    check_feature_names(est, X, reset=False)
    if isinstance(X, Dataset):
        ds = _check_dataset(X, V)
        client = ds.client
        assert client is not None
        [pf] = client.scatter([phi], broadcast=True)
        s = np.sum(client.gather(ds.map_partitions(_part_scores, pf, alpha, seed)), axis=0)
        return float(s[0]), int(s[1])
    if hasattr(X, "to_dask_array"):
        X = X.to_dask_array(lengths=True)
    if is_dask(X):
        X = X.rechunk({1: -1})
        parts = X.map_blocks(
            lambda b: local_scores(b, phi, alpha, seed)[None, :],
            chunks=((1,) * X.numblocks[0], (2,)),
            dtype=np.float64,
        )
        s = np.asarray(parts.sum(axis=0).compute())
        return float(s[0]), int(s[1])
    from sklearn.utils.validation import check_array

    X = check_array(X, accept_sparse="csr", dtype="numeric")
    s = local_scores(X, phi, alpha, seed)
    return float(s[0]), int(s[1])
