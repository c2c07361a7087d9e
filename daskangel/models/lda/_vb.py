"""Compiled kernels of stochastic variational inference for LDA (MA-LDA's local steps).

The topics' variational parameter is ``lambda (V x K)``; a task keeps it *lazily*
as ``lambda = eta + S * mu`` where ``S`` is one scale shared by every word: the
SVI step ``lambda <- (1 - rho) lambda + rho (eta + D/B * sstats)`` then touches only
the rows of the words its minibatch uses (``mu[w] += rho D/B sstats[w] / S'``)
and decays all the others at once by ``S' = (1 - rho) S`` (the MLlib* paper's lazy
sparse update).  ``E[log beta_wk] = digamma(lambda_wk) - digamma(sum_w lambda_wk)``
is computed only for those rows too, with the fast digamma below (recurrence up
to 6, then the asymptotic series: relative error < 1e-10).

The E-step is Hoffman et al.'s (as scikit-learn's ``_update_doc_distribution``):
``gamma_d = alpha + expElogtheta_d * sum_w c_dw expElogbeta_w / phinorm_dw``
iterated until the mean change is below ``tol``, from the ``gamma`` it is given.

Example
-------
>>> import math
>>> round(digamma(1.0) + 0.5772156649, 9), round(digamma(0.1) - (-10.4237549404), 8)
(0.0, 0.0)
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

__all__ = ["batch_words", "digamma", "estep", "expected_log_rows", "sgd_update"]


@njit(nogil=True, cache=True)
def digamma(x):  # type: ignore[no-untyped-def]
    """psi(x) for x > 0: recurrence up to 6, then the asymptotic series."""
    r = 0.0
    while x < 6.0:
        r -= 1.0 / x
        x += 1.0
    f = 1.0 / (x * x)
    return (
        r + math.log(x) - 0.5 / x
        - f * (1.0 / 12.0 - f * (1.0 / 120.0 - f * (1.0 / 252.0 - f * (1.0 / 240.0))))
    )  # fmt: skip


@njit(nogil=True, cache=True)
def expected_log_rows(words, mu, musum, scale, eta, veta, out):  # type: ignore[no-untyped-def]
    """``out[w] = exp(E[log beta_w])`` for the local rows ``words`` (``lambda = eta + scale*mu``)."""
    K = mu.shape[1]
    tot = np.empty(K)
    for k in range(K):
        tot[k] = digamma(veta + scale * musum[k])
    for i in range(words.shape[0]):
        w = words[i]
        for k in range(K):
            lam = eta + scale * mu[w, k]
            if lam < 1e-300:
                lam = 1e-300
            out[w, k] = math.exp(digamma(lam) - tot[k])


@njit(nogil=True, cache=True)
def estep(docs, indptr, words, counts, ebeta, alpha, gamma, tol, max_iter, sstats):  # type: ignore[no-untyped-def]
    """E-step of the documents ``docs``; adds their sufficient statistics to ``sstats``.

    ``words`` index the rows of ``ebeta`` (``exp E[log beta]``) and ``sstats``;
    ``gamma`` (``n_docs x K``) is read as the start and written back.  Returns the
    number of E-step iterations summed over the documents.
    """
    K = ebeta.shape[1]
    etheta = np.empty(K)
    acc = np.empty(K)
    last = np.empty(K)
    iters = 0
    for i in range(docs.shape[0]):
        d = docs[i]
        a = indptr[d]
        b = indptr[d + 1]
        if b == a:
            continue
        for _ in range(max_iter):
            s = 0.0
            for k in range(K):
                s += gamma[d, k]
            ds = digamma(s)
            for k in range(K):
                etheta[k] = math.exp(digamma(gamma[d, k]) - ds)
                acc[k] = 0.0
                last[k] = gamma[d, k]
            for e in range(a, b):
                w = words[e]
                p = 1e-100
                for k in range(K):
                    p += etheta[k] * ebeta[w, k]
                f = counts[e] / p
                for k in range(K):
                    acc[k] += f * ebeta[w, k]
            change = 0.0
            for k in range(K):
                g = alpha + etheta[k] * acc[k]
                change += abs(g - last[k])
                gamma[d, k] = g
            iters += 1
            if change / K < tol:
                break
        # statistics with the final gamma
        s = 0.0
        for k in range(K):
            s += gamma[d, k]
        ds = digamma(s)
        for k in range(K):
            etheta[k] = math.exp(digamma(gamma[d, k]) - ds)
        for e in range(a, b):
            w = words[e]
            p = 1e-100
            for k in range(K):
                p += etheta[k] * ebeta[w, k]
            f = counts[e] / p
            for k in range(K):
                sstats[w, k] += f * etheta[k] * ebeta[w, k]
    return iters


@njit(nogil=True, cache=True)
def sgd_update(words, sstats, mu, musum, step):  # type: ignore[no-untyped-def]
    """``mu[w] += step * sstats[w]`` for the rows ``words`` (``sstats`` rows zeroed after)."""
    K = mu.shape[1]
    for i in range(words.shape[0]):
        w = words[i]
        for k in range(K):
            v = step * sstats[w, k]
            mu[w, k] += v
            musum[k] += v
            sstats[w, k] = 0.0


@njit(nogil=True, cache=True)
def batch_words(docs, indptr, words, mark, stamp):  # type: ignore[no-untyped-def]
    """The distinct rows the documents ``docs`` use (``mark``: scratch, ``stamp``: a fresh id)."""
    n = 0
    for i in range(docs.shape[0]):
        d = docs[i]
        n += indptr[d + 1] - indptr[d]
    out = np.empty(n, np.int64)
    m = 0
    for i in range(docs.shape[0]):
        d = docs[i]
        for e in range(indptr[d], indptr[d + 1]):
            w = words[e]
            if mark[w] != stamp:
                mark[w] = stamp
                out[m] = w
                m += 1
    return np.sort(out[:m])
