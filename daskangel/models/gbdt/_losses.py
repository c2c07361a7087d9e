"""Losses of the boosting: gradients, hessians and metric sums over margins (numba).

Margins are ``(K, n)`` float64 (``K = 1`` except for the softmax), labels are
class indices (classifiers) or targets (regressors).  Loss ids:

| id | loss | gradient, hessian of margin ``m`` |
| --- | --- | --- |
| 0 ``log_loss`` (binary) | ``log(1 + e^m) - y m`` | ``p - y``, ``p (1 - p)`` |
| 1 ``log_loss`` (softmax) | ``-log p_y`` | ``p_k - [y = k]``, ``p_k (1 - p_k)`` |
| 2 ``squared_error`` | ``(m - y)^2 / 2`` | ``m - y``, 1 |
| 3 ``absolute_error`` | ``abs(m - y)`` | ``sign(m - y)``, 1 (leaves renewed to medians) |
| 4 ``huber`` | quadratic within ``delta``, linear beyond | ``m - y`` clipped to ``delta``, 1 |

Example
-------
>>> import numpy as np
>>> m = np.zeros((1, 2)); g = np.empty((1, 2)); h = np.empty((1, 2))
>>> gradients(0, m, np.array([0.0, 1.0]), 0, 2, 1.0, g, h); g.tolist()
[[0.5, -0.5]]
>>> round(loss_sum(0, m, np.array([0.0, 1.0]), 0, 2, 1.0), 4)
1.3863
"""

from __future__ import annotations

import math

from numba import njit

__all__ = ["LOSSES", "eval_sums", "gradients", "gradients_loss", "loss_sum", "N_STATS"]

LOSSES = {"binary": 0, "softmax": 1, "squared_error": 2, "absolute_error": 3, "huber": 4}
# eval_sums' stats: rows, loss, correct, squared error, absolute error
N_STATS = 5


@njit(nogil=True, cache=True)
def _log1pexp(m):  # type: ignore[no-untyped-def]
    return m + math.log1p(math.exp(-m)) if m > 0 else math.log1p(math.exp(m))


@njit(nogil=True, cache=True)
def _row_loss(kind, margin, y, r, delta):  # type: ignore[no-untyped-def]
    if kind == 0:
        m = margin[0, r]
        return _log1pexp(m) - y[r] * m
    if kind == 1:
        K = margin.shape[0]
        mx = margin[0, r]
        for k in range(1, K):
            mx = max(mx, margin[k, r])
        s = 0.0
        for k in range(K):
            s += math.exp(margin[k, r] - mx)
        return mx + math.log(s) - margin[int(y[r]), r]
    d = margin[0, r] - y[r]
    if kind == 2:
        return 0.5 * d * d
    if kind == 3:
        return abs(d)
    a = abs(d)
    return 0.5 * d * d if a <= delta else delta * (a - 0.5 * delta)


@njit(nogil=True, cache=True)
def gradients(kind, margin, y, a, b, delta, g, h):  # type: ignore[no-untyped-def]
    """Gradients and hessians of rows ``a .. b-1`` into ``g, h`` (``(K, n)``).

    The loss is :func:`loss_sum`'s (summing it here too cost two ``exp`` and a
    ``log`` a row that nobody read: 3.3 s of a 28 s tree on 5 M rows a task).
    """
    K = margin.shape[0]
    for r in range(a, b):
        if kind == 0:
            p = 1.0 / (1.0 + math.exp(-margin[0, r]))
            g[0, r] = p - y[r]
            h[0, r] = max(p * (1.0 - p), 1e-16)
        elif kind == 1:
            mx = margin[0, r]
            for k in range(1, K):
                mx = max(mx, margin[k, r])
            s = 0.0
            for k in range(K):
                s += math.exp(margin[k, r] - mx)
            yi = int(y[r])
            for k in range(K):
                p = math.exp(margin[k, r] - mx) / s
                g[k, r] = p - (1.0 if k == yi else 0.0)
                h[k, r] = max(p * (1.0 - p), 1e-16)
        else:
            d = margin[0, r] - y[r]
            if kind == 2:
                g[0, r] = d
            elif kind == 3:
                g[0, r] = 1.0 if d > 0 else (-1.0 if d < 0 else 0.0)
            else:
                g[0, r] = d if abs(d) <= delta else (delta if d > 0 else -delta)
            h[0, r] = 1.0


@njit(nogil=True, cache=True)
def gradients_loss(kind, margin, y, a, b, delta, g, h):  # type: ignore[no-untyped-def]
    """:func:`gradients` and :func:`loss_sum` of rows ``a .. b-1`` in one pass.

    The binary loss's ``log(1 + e^-|m|)`` reuses the gradient's ``e^-m`` (one
    ``exp`` and one ``log1p`` a row instead of three calls and two passes); the
    gradients are :func:`gradients`' to the bit.
    """
    if kind != 0:
        gradients(kind, margin, y, a, b, delta, g, h)
        return loss_sum(kind, margin, y, a, b, delta)
    total = 0.0
    for r in range(a, b):
        m = margin[0, r]
        e = math.exp(-m)
        p = 1.0 / (1.0 + e)
        g[0, r] = p - y[r]
        h[0, r] = max(p * (1.0 - p), 1e-16)
        total += (m + math.log1p(e) if m > 0 else math.log1p(1.0 / e)) - y[r] * m
    return total


@njit(nogil=True, cache=True)
def loss_sum(kind, margin, y, a, b, delta):  # type: ignore[no-untyped-def]
    """Sum of the loss over rows ``a .. b-1``."""
    total = 0.0
    for r in range(a, b):
        total += _row_loss(kind, margin, y, r, delta)
    return total


@njit(nogil=True, cache=True)
def eval_sums(kind, margin, y, a, b, delta, nbins, stats, neg, pos):  # type: ignore[no-untyped-def]
    """Add rows ``a .. b-1``'s metric sums to ``stats`` (see :data:`N_STATS`).

    Binary: the margins' histogram on ``[-16, 16]`` by class into ``neg`` / ``pos``
    (the AUC's; ``nbins`` bins).
    """
    K = margin.shape[0]
    for r in range(a, b):
        stats[0] += 1.0
        stats[1] += _row_loss(kind, margin, y, r, delta)
        if kind == 0:
            m = margin[0, r]
            if (m > 0) == (y[r] > 0.5):
                stats[2] += 1.0
            j = int((min(max(m, -16.0), 16.0) + 16.0) / 32.0 * nbins)
            j = min(j, nbins - 1)
            if y[r] > 0.5:
                pos[j] += 1.0
            else:
                neg[j] += 1.0
        elif kind == 1:
            best = 0
            for k in range(1, K):
                if margin[k, r] > margin[best, r]:
                    best = k
            if best == int(y[r]):
                stats[2] += 1.0
        else:
            d = margin[0, r] - y[r]
            stats[3] += d * d
            stats[4] += abs(d)
