"""The fitted trees: margins of raw rows, feature importances, JSON export.

A model's trees are one float64 array ``(n_trees, max_nodes, NF)`` (the PS
array ``<model>.trees``, one row per tree), tree ``t`` adding to output
``t % K``.  Node fields (``_grower.NODE_FIELDS``): ``feat`` (-1: leaf),
``thr`` (go left when ``value <= thr``), ``tbin`` (the same test on bin codes),
``mleft`` (missing values go left), ``left``, ``right``, ``value`` (leaf output,
learning rate included), ``gain``, ``count`` (training rows), ``hess``.

Raw rows are tested against ``thr``: NaN is missing; in a scipy.sparse row an
unstored entry is missing too, unless the model was trained on a dense input
(``unstored_missing=False``), where it is the value 0.

Example
-------
>>> import numpy as np
>>> T = np.zeros((1, 3, 10)); T[0, :, 0] = [0, -1, -1]; T[0, 0, 1] = 0.5
>>> T[0, 0, 4:6] = [1, 2]; T[0, 1, 6], T[0, 2, 6] = -1.0, 1.0
>>> out = np.zeros((2, 1)); predict_dense(np.array([[0.0], [np.nan]]), T, 1, 0, 1, out)
>>> out.ravel().tolist()
[-1.0, 1.0]
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
from numba import njit

from ...psarray._kernels import lower_bound
from ._grower import NODE_FIELDS

__all__ = ["NF", "importances", "margins", "predict_csr", "predict_dense", "to_json"]

NF = len(NODE_FIELDS)


@njit(nogil=True, cache=True)
def predict_dense(X, T, K, t0, t1, out):  # type: ignore[no-untyped-def]
    """``out[r, t % K] += tree_t(X[r])`` for trees ``t0 .. t1-1``."""
    for r in range(X.shape[0]):
        for t in range(t0, t1):
            n = 0
            while T[t, n, 0] >= 0:
                x = X[r, int(T[t, n, 0])]
                go = T[t, n, 3] > 0.5 if np.isnan(x) else x <= T[t, n, 1]
                n = int(T[t, n, 4]) if go else int(T[t, n, 5])
            out[r, t % K] += T[t, n, 6]


@njit(nogil=True, cache=True)
def predict_csr(indptr, indices, data, unstored_missing, T, K, t0, t1, out):  # type: ignore[no-untyped-def]
    """:func:`predict_dense` for CSR rows (column indices sorted within rows)."""
    for r in range(indptr.shape[0] - 1):
        a0 = indptr[r]
        b0 = indptr[r + 1]
        for t in range(t0, t1):
            n = 0
            while T[t, n, 0] >= 0:
                f = int(T[t, n, 0])
                a = lower_bound(indices, a0, b0, f)
                if a < b0 and indices[a] == f:
                    x = float(data[a])
                else:
                    x = np.nan if unstored_missing else 0.0
                go = T[t, n, 3] > 0.5 if np.isnan(x) else x <= T[t, n, 1]
                n = int(T[t, n, 4]) if go else int(T[t, n, 5])
            out[r, t % K] += T[t, n, 6]


def margins(
    X: Any, T: np.ndarray, K: int, baseline: np.ndarray, unstored_missing: bool,
    t0: int = 0, t1: int | None = None,
) -> np.ndarray:  # fmt: skip
    """Margins ``(n, K)`` of a numpy or scipy.sparse ``X`` under trees ``t0 .. t1-1``."""
    import scipy.sparse as sp

    t1 = T.shape[0] if t1 is None else t1
    n = X.shape[0]
    out = np.empty((n, K))
    out[:] = baseline
    if sp.issparse(X):
        m = sp.csr_matrix(X)
        if not m.has_sorted_indices:
            m = m.sorted_indices()
        # float64 values, C order: one compiled signature of each kernel (a float32 or
        # Fortran-ordered input would compile another)
        data = np.asarray(m.data, np.float64)
        predict_csr(m.indptr, m.indices, data, unstored_missing, T, K, t0, t1, out)
    else:
        X = np.asarray(X)
        predict_dense(np.ascontiguousarray(X, np.float64 if X.dtype != np.float32 else None),
                      T, K, t0, t1, out)  # fmt: skip
    return out


def importances(T: np.ndarray, n_features: int) -> np.ndarray:
    """Total gain of each feature's splits, normalised to sum 1 (zeros: no split)."""
    feat = T[:, :, 0].ravel()
    gain = T[:, :, 7].ravel()
    used = feat >= 0
    out = np.bincount(feat[used].astype(np.int64), weights=gain[used], minlength=n_features)
    total = out.sum()
    return out / total if total > 0 else out


def _tree(T: np.ndarray, t: int) -> list[dict[str, Any]]:
    nodes: list[dict[str, Any]] = []
    stack = [0]
    while stack:
        n = stack.pop()
        f = T[t, n]
        node: dict[str, Any] = {"id": n, "value": float(f[6]), "count": float(f[8])}
        if f[0] >= 0:
            node.update(
                feature=int(f[0]), threshold=float(f[1]), missing_left=bool(f[3] > 0.5),
                left=int(f[4]), right=int(f[5]), gain=float(f[7]),
            )  # fmt: skip
            stack += [int(f[5]), int(f[4])]
        nodes.append(node)
    return sorted(nodes, key=lambda d: d["id"])


def to_json(T: np.ndarray, K: int, baseline: np.ndarray, meta: dict[str, Any]) -> str:
    """The trees as JSON text: ``{"format", "baseline", "trees": [{"round", "output",
    "nodes": [...]}]}``; a node goes left when ``x <= threshold`` (missing:
    ``missing_left``); leaves carry ``value`` (learning rate included)."""
    doc = {
        "format": "daskangel-gbdt-1",
        **meta,
        "n_outputs": K,
        "baseline": [float(b) for b in np.ravel(baseline)],
        "trees": [
            {"round": t // K, "output": t % K, "nodes": _tree(T, t)} for t in range(T.shape[0])
        ],
    }
    return json.dumps(doc)
