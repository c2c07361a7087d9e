"""Held-out evaluation: document completion, folding in, and the scorer peers share.

*Document completion* (Wallach et al. 2009's "estimated theta" variant): the tokens
of a held-out document are split in two halves by a seeded hash of each token
(word id and occurrence), so the split depends on the document alone, never on
the partition it sits in or the system being scored.  The topic mixture theta is
*folded in* on the first half with the topics phi held fixed, by the fixed point

    gamma_k = alpha + sum_w c_w theta_k phi_kw / sum_j theta_j phi_jw ,     theta = gamma / sum gamma

(``fold-in`` iterations from a uniform theta), and the second half is scored:
``sum log sum_k theta_k phi_kw`` over its tokens.  The same fixed point on all of a
document's tokens is :meth:`LDA.transform`.  Documents with fewer than two
tokens are not scored.

:func:`completion_log_likelihood` applies the scorer to any topics (a ``K x V``
matrix of topic-word distributions), so scikit-learn's, tomotopy's and ours
are measured by one code path.

Example
-------
>>> import numpy as np, scipy.sparse as sp
>>> phi = np.array([[0.5, 0.5, 0.0, 0.0], [0.0, 0.0, 0.5, 0.5]]) + 1e-3
>>> X = sp.csr_matrix(np.array([[4, 4, 0, 0], [0, 0, 3, 5]]))
>>> ll, n = completion_log_likelihood(X, phi / phi.sum(1, keepdims=True), 0.1)
>>> n, round(ll / n, 2)
(8, -0.72)
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

from ._sampler import mix_seed

__all__ = ["completion_log_likelihood", "completion_sums", "fold_in", "phi_rows"]

FOLD_IN_ITERS = 50


def phi_rows(rows: np.ndarray, nk: np.ndarray, beta: float, n_words: int) -> np.ndarray:
    """``(n, K)`` topic-word probabilities ``(n_wk + beta) / (n_k + V*beta)`` of count rows."""
    r = np.maximum(np.asarray(rows, np.float64), 0.0)
    n = np.maximum(np.asarray(nk, np.float64), 0.0)
    return (r + beta) / (n + n_words * beta)[None, :]


@njit(nogil=True, cache=True)
def _fold(words, counts, n, phi, alpha, iters, theta, gamma):  # type: ignore[no-untyped-def]
    K = phi.shape[1]
    for k in range(K):
        theta[k] = 1.0 / K
    for _ in range(iters):
        for k in range(K):
            gamma[k] = alpha
        for i in range(n):
            w = words[i]
            s = 0.0
            for k in range(K):
                s += theta[k] * phi[w, k]
            if s <= 0.0:
                continue
            f = counts[i] / s
            for k in range(K):
                gamma[k] += f * theta[k] * phi[w, k]
        tot = 0.0
        for k in range(K):
            tot += gamma[k]
        for k in range(K):
            theta[k] = gamma[k] / tot


@njit(nogil=True, cache=True)
def fold_in(indptr, words, counts, phi, alpha, iters):  # type: ignore[no-untyped-def]
    """theta ``(n_docs, K)`` of CSR documents (``words`` index ``phi``'s rows); rows sum to 1."""
    nd = indptr.shape[0] - 1
    K = phi.shape[1]
    out = np.empty((nd, K))
    gamma = np.empty(K)
    for d in range(nd):
        a = indptr[d]
        n = indptr[d + 1] - a
        _fold(words[a:], counts[a:], n, phi, alpha, iters, out[d], gamma)
    return out


@njit(nogil=True, cache=True)
def completion_sums(indptr, words, gids, counts, phi, alpha, iters, seed):  # type: ignore[no-untyped-def]
    """``(log-likelihood sum, tokens scored)`` of CSR documents by document completion.

    ``words`` index ``phi``'s rows; ``gids`` are their global word ids (the
    hash that halves a document uses them, so the halves do not depend on
    the local numbering).
    """
    nd = indptr.shape[0] - 1
    K = phi.shape[1]
    theta = np.empty(K)
    gamma = np.empty(K)
    ll = 0.0
    scored = 0
    for d in range(nd):
        a = indptr[d]
        b = indptr[d + 1]
        n = 0
        for e in range(a, b):
            n += counts[e]
        if n < 2:
            continue
        tw = np.empty(n, np.int64)
        key = np.empty(n, np.uint64)
        t = 0
        for e in range(a, b):
            for j in range(counts[e]):
                tw[t] = words[e]
                key[t] = mix_seed(seed, gids[e], j)
                t += 1
        order = np.argsort(key)
        half = n // 2
        fw = np.empty(half, np.int64)
        fc = np.ones(half, np.int64)
        for i in range(half):
            fw[i] = tw[order[i]]
        _fold(fw, fc, half, phi, alpha, iters, theta, gamma)
        for i in range(half, n):
            w = tw[order[i]]
            s = 0.0
            for k in range(K):
                s += theta[k] * phi[w, k]
            ll += np.log(s)
            scored += 1
    return ll, scored


def completion_log_likelihood(
    X: Any, topics: np.ndarray, alpha: float, seed: int = 0, iters: int = FOLD_IN_ITERS
) -> tuple[float, int]:
    """Document-completion ``(log-likelihood sum, tokens scored)`` of ``X`` under ``topics``.

    ``X`` is a document-word count matrix (scipy.sparse or numpy), ``topics``
    a ``K x V`` matrix whose rows are topic-word distributions (rows are
    normalised here), ``alpha`` the document-topic prior used to fold in.
    """
    import scipy.sparse as sp

    X = sp.csr_matrix(X)
    X.sum_duplicates()
    phi = np.asarray(topics, np.float64)
    phi = phi / phi.sum(axis=1, keepdims=True)
    words = X.indices.astype(np.int64)
    ll, n = completion_sums(
        X.indptr.astype(np.int64), words, words, X.data.astype(np.int64),
        np.ascontiguousarray(phi.T), float(alpha), int(iters), int(seed),
    )  # fmt: skip
    return float(ll), int(n)
