"""The compiled FM / FFM kernels against naive pairwise formulas and finite differences."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from daskangel.models.fm._kernels import LOGISTIC, SQUARED, grad_rows, local_sgd, margins

pytestmark = pytest.mark.timeout(120)


def _naive(X: np.ndarray, W: np.ndarray, fields: np.ndarray | None, k: int) -> np.ndarray:
    """Margins by the definition: every pair of non-zero features, O(nnz^2 k)."""
    out = np.full(X.shape[0], W[-1, 0])
    for r in range(X.shape[0]):
        nz = np.flatnonzero(X[r])
        out[r] += X[r, nz] @ W[nz, 0]
        for a in range(len(nz)):
            for b in range(a + 1, len(nz)):
                i, j = nz[a], nz[b]
                if fields is None:
                    vi, vj = W[i, 1:], W[j, 1:]
                else:
                    vi = W[i, 1 + fields[j] * k : 1 + (fields[j] + 1) * k]
                    vj = W[j, 1 + fields[i] * k : 1 + (fields[i] + 1) * k]
                out[r] += vi @ vj * X[r, i] * X[r, j]
    return out


def _data(n_fields: int, seed: int = 0) -> tuple[sp.csr_matrix, np.ndarray, np.ndarray, int]:
    rng = np.random.default_rng(seed)
    d, k = 12, 3
    X = rng.normal(size=(7, d)) * (rng.random((7, d)) < 0.5)
    fields = rng.integers(0, max(n_fields, 1), size=d).astype(np.int32)
    W = rng.normal(size=(d + 1, 1 + max(n_fields, 1) * k))
    return sp.csr_matrix(X), W, fields, k


@pytest.mark.parametrize("n_fields", [0, 3])
def test_margins_match_the_pairwise_definition(n_fields: int) -> None:
    X, W, fields, k = _data(n_fields)
    f = np.append(fields, 0).astype(np.int32) if n_fields else np.zeros(0, np.int32)
    got = margins(X.indptr, X.indices, X.data, W, f, n_fields)
    want = _naive(X.toarray(), W, fields if n_fields else None, k)
    np.testing.assert_allclose(got, want, rtol=1e-10)


@pytest.mark.parametrize(("n_fields", "kind"), [(0, LOGISTIC), (0, SQUARED), (2, LOGISTIC)])
def test_gradient_matches_finite_differences(n_fields: int, kind: int) -> None:
    X, W, fields, _k = _data(n_fields, seed=1)
    f = np.append(fields, 0).astype(np.int32) if n_fields else np.zeros(0, np.int32)
    y = np.where(np.arange(X.shape[0]) % 2 == 0, 1.0, -1.0)
    rows = np.arange(X.shape[0])

    def loss(w: np.ndarray) -> float:
        return float(grad_rows(X.indptr, X.indices, X.data, y, rows, w, f, n_fields, kind,
                               np.zeros_like(w)))  # fmt: skip

    G = np.zeros_like(W)
    grad_rows(X.indptr, X.indices, X.data, y, rows, W, f, n_fields, kind, G)
    num = np.zeros_like(W)
    eps = 1e-6
    for idx in np.ndindex(W.shape):
        Wp, Wm = W.copy(), W.copy()
        Wp[idx] += eps
        Wm[idx] -= eps
        num[idx] = (loss(Wp) - loss(Wm)) / (2 * eps)
    np.testing.assert_allclose(G, num, rtol=1e-5, atol=1e-6)


def test_local_sgd_fits_a_planted_interaction() -> None:
    from .conftest import planted_pairs

    X, y = planted_pairs(n=3000)
    W = np.random.default_rng(0).normal(scale=0.01, size=(X.shape[1] + 1, 1 + 4))
    yy = 2.0 * y - 1.0
    order = np.arange(X.shape[0])
    none = np.zeros(0, np.int32)
    data = X.data.astype(np.float64)
    first = local_sgd(X.indptr, X.indices, data, yy, order, W, none, 0, LOGISTIC, 0.05, 0.0,
                      1e-4, 1)  # fmt: skip
    for _ in range(4):
        last = local_sgd(X.indptr, X.indices, data, yy, order, W, none, 0, LOGISTIC, 0.05, 0.0,
                         1e-4, 1)  # fmt: skip
    m = margins(X.indptr, X.indices, data, W, none, 0)
    assert last < 0.6 * first
    assert ((m > 0) == (y == 1)).mean() > 0.9
