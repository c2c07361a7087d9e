"""Compiled inner loops of the factorisation models (numba, ``nogil``).

Factor matrices are float32 with ``K + 1`` columns: the ``K`` factors and, last,
the row's bias.  A prediction is ``mu + b_u + b_i + p_u . q_i``.  Rows a kernel
does not know are ``-1`` and fall back to what is known: ``mu`` plus the known
bias, never NaN.

Example
-------
>>> import numpy as np
>>> P = np.array([[1.0, 0.5]], np.float32); Q = np.array([[2.0, -0.5]], np.float32)
>>> predict(np.array([0, 0, -1]), np.array([0, -1, 0]), P, Q, 3.0, 1.0, 5.0, True).tolist()
[5.0, 3.5, 2.5]
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = [
    "fill_blocks",
    "grad_block",
    "group_by_slot",
    "predict",
    "sgd_block",
    "sgd_blocks",
    "sse",
    "touched_slots",
]


@njit(nogil=True, cache=True, fastmath=True, inline="always")
def _residual(p, q, K, mu, rating):  # type: ignore[no-untyped-def]
    """``rating - (mu + b_u + b_i + p . q)`` of one user row ``p`` and item row ``q``."""
    dot = mu + p[K] + q[K]
    for f in range(K):
        dot += p[f] * q[f]
    return rating - dot


@njit(nogil=True, cache=True, fastmath=True, inline="always")
def _sgd_step(p, q, K, mu, rating, lr, reg, lrb, regb):  # type: ignore[no-untyped-def]
    """One rating's plain SGD step on user row ``p`` and item row ``q``; its error."""
    e = _residual(p, q, K, mu, rating)
    if lrb != 0.0:
        p[K] += lrb * (e - regb * p[K])
        q[K] += lrb * (e - regb * q[K])
    for f in range(K):
        pf = p[f]
        qf = q[f]
        p[f] = pf + lr * (e * qf - reg * pf)
        q[f] = qf + lr * (e * pf - reg * qf)
    return e


@njit(nogil=True, cache=True, fastmath=True)
def sgd_block(seq, u, slot, r, P, Q, mu, lr, reg, lrb, regb):  # type: ignore[no-untyped-def]
    """Plain SGD over ratings ``seq`` (in that order), updating ``P`` and ``Q`` in place.

    Returns the sum of squared errors seen before each update.
    """
    K = P.shape[1] - 1
    loss = 0.0
    for n in range(seq.shape[0]):
        k = seq[n]
        e = _sgd_step(P[u[k]], Q[slot[k]], K, mu, r[k], lr, reg, lrb, regb)
        loss += e * e
    return loss


@njit(nogil=True, cache=True, fastmath=True)
def sgd_blocks(starts, lim, block, u, slot, r, P, Q, mu, lr, reg, lrb, regb):  # type: ignore[no-untyped-def]
    """:func:`sgd_block` over the ratings ``starts[j] .. min(starts[j] + block, lim) - 1``
    for each ``j`` in turn: the same updates as over the order those blocks spell out
    (:func:`~daskangel.models._core.epoch_order`), without writing and reading it."""
    K = P.shape[1] - 1
    loss = 0.0
    for j in range(starts.shape[0]):
        b1 = min(starts[j] + block, lim)
        for k in range(starts[j], b1):
            e = _sgd_step(P[u[k]], Q[slot[k]], K, mu, r[k], lr, reg, lrb, regb)
            loss += e * e
    return loss


@njit(nogil=True, cache=True)
def fill_blocks(starts, lim, block, out):  # type: ignore[no-untyped-def]
    """``out[:]`` = the ratings :func:`sgd_blocks` visits, in its order."""
    n = 0
    for j in range(starts.shape[0]):
        for k in range(starts[j], min(starts[j] + block, lim)):
            out[n] = k
            n += 1
    return out


@njit(nogil=True, cache=True, fastmath=True)
def grad_block(seq, u, slot, r, P, H, Q, G, mu, lr, reg, lrb, regb, eps):  # type: ignore[no-untyped-def]
    """Item gradients into ``G`` against the fixed ``Q`` (a read-only copy, as
    Bösen's versioned optimisers need); users step locally with AdaGrad (``H``
    their accumulators).  Returns the sum of squared errors."""
    K = P.shape[1] - 1
    loss = 0.0
    for n in range(seq.shape[0]):
        k = seq[n]
        a = u[k]
        b = slot[k]
        p = P[a]
        h = H[a]
        q = Q[b]
        g = G[b]
        e = _residual(p, q, K, mu, r[k])
        loss += e * e
        if lrb != 0.0:
            gb = -e + regb * p[K]
            h[K] += gb * gb
            p[K] -= lrb * gb / (np.sqrt(h[K]) + eps)
            g[K] += -e + regb * q[K]
        for f in range(K):
            pf = p[f]
            qf = q[f]
            gp = -e * qf + reg * pf
            h[f] += gp * gp
            p[f] = pf - lr * gp / (np.sqrt(h[f]) + eps)
            g[f] += -e * pf + reg * qf
    return loss


@njit(nogil=True, cache=True)
def sse(u, slot, r, P, Q, mu, lo, hi):  # type: ignore[no-untyped-def]
    """Sum of squared errors of predictions clipped to ``[lo, hi]`` (rows ``-1``:
    unknown, they fall back to the known bias)."""
    K = P.shape[1] - 1
    out = 0.0
    for k in range(r.shape[0]):
        a = u[k]
        b = slot[k]
        v = mu
        if a >= 0:
            v += P[a, K]
        if b >= 0:
            v += Q[b, K]
        if a >= 0 and b >= 0:
            for f in range(K):
                v += P[a, f] * Q[b, f]
        v = min(max(v, lo), hi)
        e = r[k] - v
        out += e * e
    return out


@njit(nogil=True, cache=True)
def predict(u, i, P, Q, mu, lo, hi, clip):  # type: ignore[no-untyped-def]
    """Predictions for row pairs (``-1``: unknown user / item), float64."""
    K = P.shape[1] - 1
    out = np.empty(u.shape[0], np.float64)
    for k in range(u.shape[0]):
        a = u[k]
        b = i[k]
        v = mu
        if a >= 0:
            v += P[a, K]
        if b >= 0:
            v += Q[b, K]
        if a >= 0 and b >= 0:
            for f in range(K):
                v += P[a, f] * Q[b, f]
        if clip:
            v = min(max(v, lo), hi)
        out[k] = v
    return out


@njit(nogil=True, cache=True)
def touched_slots(seq, slot, mark, stamp):  # type: ignore[no-untyped-def]
    """The distinct slots of ratings ``seq`` (``mark``: a per-slot scratch of stamps)."""
    out = np.empty(seq.shape[0], np.int64)
    n = 0
    for j in range(seq.shape[0]):
        s = slot[seq[j]]
        if mark[s] != stamp:
            mark[s] = stamp
            out[n] = s
            n += 1
    return np.sort(out[:n])


@njit(nogil=True, cache=True)
def group_by_slot(seq, slot, group, n_groups):  # type: ignore[no-untyped-def]
    """``seq`` stably reordered by the group of each rating's slot; group starts."""
    counts = np.zeros(n_groups + 1, np.int64)
    for j in range(seq.shape[0]):
        counts[group[slot[seq[j]]] + 1] += 1
    for g in range(n_groups):
        counts[g + 1] += counts[g]
    pos = counts[:-1].copy()
    out = np.empty_like(seq)
    for j in range(seq.shape[0]):
        g = group[slot[seq[j]]]
        out[pos[g]] = seq[j]
        pos[g] += 1
    return out, counts
