"""Compiled row solves of ALS (numba, ``nogil``): ALS-WR and Hu-Koren-Volinsky implicit ALS.

Rows come as CSR: ratings ``indptr[k] .. indptr[k+1]-1`` belong to row ``k``,
``slot[j]`` is the fixed side's row of rating ``j`` in ``Y`` (the pulled rows,
float32 with ``K + 1`` columns: factors, then the bias).  A solved row is
written into ``X`` in place; a row without ratings becomes zeros (the minimiser
of its regularisation alone: predictions fall back to the other side's bias).

* :func:`als_rows` (explicit, ALS-WR of Zhou et al.): each row the exact
  solution of ``(Y_r^T Y_r + lam * n_r * I) x = Y_r^T t`` by Cholesky, ``t`` the
  ratings less ``mu`` and the other side's biases; with ``biases`` the row's own
  bias is solved along (a column of ones).
* :func:`cg_rows` (implicit): confidence ``c = 1 + alpha * r`` on the observed
  pairs, preference 1 there and 0 elsewhere; ``G = Y^T Y + reg * I`` covers the
  unobserved pairs at once, and ``steps`` conjugate-gradient steps from the
  current row refine it (as the ``implicit`` library does).
* :func:`gram`, :func:`implicit_loss`: the Gram matrix of solved rows and the
  implicit objective's share of a phase.

Example
-------
>>> import numpy as np
>>> Y = np.array([[1.0, 0.0], [0.0, 0.0]], np.float32)  # K=1: factor, bias
>>> X = np.zeros((1, 2), np.float32)
>>> als_rows(np.array([0, 2]), np.array([0, 0]), np.array([3.0, 3.0], np.float32), Y, X,
...          0.0, 0.5, False)
>>> X.round(3).tolist()  # (2 + 0.5 * 2) x = 6
[[2.0, 0.0]]
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["als_rows", "cg_rows", "gram", "implicit_loss"]


@njit(nogil=True, cache=True)
def als_rows(indptr, slot, r, Y, X, mu, lam, biases):  # type: ignore[no-untyped-def]
    """Exact ALS-WR solves of every row into ``X`` (see the module docstring)."""
    K = Y.shape[1] - 1
    D = K + 1 if biases else K
    A = np.empty((D, D))
    b = np.empty(D)
    y = np.empty(D)
    for row in range(indptr.shape[0] - 1):
        s = indptr[row]
        e = indptr[row + 1]
        if e == s:
            X[row, :] = 0.0
            continue
        A[:, :] = 0.0
        b[:] = 0.0
        for j in range(s, e):
            q = Y[slot[j]]
            t = r[j] - mu
            if biases:
                t -= q[K]
            for a in range(K):
                y[a] = q[a]
            if biases:
                y[K] = 1.0
            for a in range(D):
                ya = y[a]
                b[a] += t * ya
                for c in range(a, D):
                    A[a, c] += ya * y[c]
        reg = lam * (e - s)
        for a in range(D):
            A[a, a] += reg
            for c in range(a + 1, D):
                A[c, a] = A[a, c]
        x = np.linalg.solve(A, b)
        for a in range(K):
            X[row, a] = x[a]
        X[row, K] = x[K] if biases else 0.0


@njit(nogil=True, cache=True)
def cg_rows(indptr, slot, r, Y, X, G, alpha, steps):  # type: ignore[no-untyped-def]
    """Implicit ALS: ``steps`` conjugate-gradient steps per row from its current value."""
    K = G.shape[0]
    x = np.empty(K)
    res = np.empty(K)
    p = np.empty(K)
    ap = np.empty(K)
    for row in range(indptr.shape[0] - 1):
        s = indptr[row]
        e = indptr[row + 1]
        if e == s:
            X[row, :] = 0.0
            continue
        for a in range(K):
            x[a] = X[row, a]
        for a in range(K):  # res = b - A x
            v = 0.0
            for c in range(K):
                v -= G[a, c] * x[c]
            res[a] = v
        for j in range(s, e):
            q = Y[slot[j]]
            conf = 1.0 + alpha * r[j]
            qx = 0.0
            for a in range(K):
                qx += q[a] * x[a]
            coef = conf - (conf - 1.0) * qx
            for a in range(K):
                res[a] += coef * q[a]
        rs_old = 0.0
        for a in range(K):
            p[a] = res[a]
            rs_old += res[a] * res[a]
        for _ in range(steps):
            if rs_old < 1e-20:
                break
            for a in range(K):
                v = 0.0
                for c in range(K):
                    v += G[a, c] * p[c]
                ap[a] = v
            for j in range(s, e):
                q = Y[slot[j]]
                w = alpha * r[j]
                qp = 0.0
                for a in range(K):
                    qp += q[a] * p[a]
                for a in range(K):
                    ap[a] += w * qp * q[a]
            pap = 0.0
            for a in range(K):
                pap += p[a] * ap[a]
            if pap <= 0.0:
                break
            step = rs_old / pap
            rs_new = 0.0
            for a in range(K):
                x[a] += step * p[a]
                res[a] -= step * ap[a]
                rs_new += res[a] * res[a]
            for a in range(K):
                p[a] = res[a] + (rs_new / rs_old) * p[a]
            rs_old = rs_new
        for a in range(K):
            X[row, a] = x[a]
        X[row, K] = 0.0


@njit(nogil=True, cache=True)
def gram(X, K):  # type: ignore[no-untyped-def]
    """``X[:, :K]^T X[:, :K]`` in float64."""
    G = np.zeros((K, K))
    for n in range(X.shape[0]):
        for a in range(K):
            xa = X[n, a]
            for c in range(a, K):
                G[a, c] += xa * X[n, c]
    for a in range(K):
        for c in range(a + 1, K):
            G[c, a] = G[a, c]
    return G


@njit(nogil=True, cache=True)
def implicit_loss(indptr, slot, r, Y, X, GY, alpha, reg):  # type: ignore[no-untyped-def]
    """This phase's share of the implicit objective for solved rows ``X``.

    ``sum_rows [x^T GY x + reg |x|^2 + sum_observed (c (1 - x.y)^2 - (x.y)^2)]``
    (``GY`` the other side's Gram, unregularised), and the squared preference
    error ``sum_observed (1 - x.y)^2``.
    """
    K = GY.shape[0]
    loss = 0.0
    sq = 0.0
    for row in range(indptr.shape[0] - 1):
        x = X[row]
        for a in range(K):
            v = 0.0
            for c in range(K):
                v += GY[a, c] * x[c]
            loss += x[a] * v + reg * x[a] * x[a]
        for j in range(indptr[row], indptr[row + 1]):
            q = Y[slot[j]]
            qx = 0.0
            for a in range(K):
                qx += q[a] * x[a]
            conf = 1.0 + alpha * r[j]
            loss += conf * (1.0 - qx) ** 2 - qx * qx
            sq += (1.0 - qx) ** 2
    return loss, sq
