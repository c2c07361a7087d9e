"""MA-SGD's local SGD with per-feature adaptive steps (AdaGrad): ``adaptive=True`` (``'auto'``,
LogisticRegression's default, with ``solver='ma-sgd'``).

On sparse data whose features follow a power law, one step size for every
weight either under-trains the rare features or over-steps the frequent ones:
plain SGD needed nine epochs to creep to the log-loss Vowpal Wabbit reaches in
one pass (its default updates are adaptive).  :func:`adagrad_sgd` steps every
weight by ``eta * g / sqrt(G)``, where ``G`` is the sum of the squares of that
weight's gradients so far (Duchi, Hazan & Singer 2011; McMahan & Streeter 2010):
a rare feature keeps large steps, a frequent one settles.

The accumulators live on the PS beside the weights (one per weight, the
intercept's included): a task pulls them with its base weights, updates its
copy during the local pass, and pushes their change weighted by its share of
the round's rows, as it does the weights' change, so every task starts a round
with the accumulators a single task would have gathered on its share, and a
later ``fit`` (``warm_start``, ``partial_fit``) continues the same schedule.

Regularisation is lazy and exact: between two touches of a key its
accumulator, hence its step ``eta / sqrt(G)``, does not change, so the L2 decay
of the ``gap`` steps it missed is ``(1 - eta alpha / sqrt(G)) ** gap``, applied
(with the L1 shrinkage of those steps) when a row touches it again and at the
end of the pass.

Example
-------
>>> import numpy as np
>>> ip, ix, dx = np.array([0, 1, 2]), np.array([0, 1]), np.array([1.0, 1.0])
>>> W, G = np.zeros((3, 1)), np.zeros((3, 1))          # two features and the bias
>>> loss = adagrad_sgd(ip, ix, dx, np.array([1.0, -1.0]), np.array([0, 1]), W, G,
...                    np.array([0, 1]), LOGISTIC, 0.0, True, 0.5, 0.0, 0.0, 1)
>>> bool(W[0, 0] > 0 > W[1, 0]), float(G[0, 0])         # the first step: eta * sign(g)
(True, 0.25)
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from ._adagrad16 import adagrad_ws
from ._kernels import LOGISTIC, SOFTMAX, _row_d, _row_margin

__all__ = ["LOGISTIC", "adagrad_sgd"]


def adagrad_sgd(  # type: ignore[no-untyped-def]
    indptr, indices, data, y, order, W, G, keys, kind, eps, has_bias, eta, alpha, l1, batch
):
    """Local minibatch AdaGrad over the rows ``order``, in place on ``W`` and ``G``.

    ``W`` and ``G`` are ``(n, K)``: weights and their sums of squared gradients,
    rows indexed by the CSR column indices (local slots), the intercept's in the
    last row with ``has_bias`` (adaptive, never regularised).  ``keys`` are the
    rows the data can touch (the intercept's excepted): they are brought up to
    date at the end.  A step of ``batch`` rows adds each touched weight's mean
    gradient ``g`` to ``G`` as ``g**2`` and moves the weight by
    ``-eta g / sqrt(G)``.  Returns the loss sum.

    One output and one row a step (the CTR case) run :func:`._adagrad16.adagrad_ws`
    on a 16-byte-a-key workspace (float32 weights during the pass: see its warning);
    a Python dispatch, so a fit compiles the kernel it runs.
    """
    if batch == 1 and W.shape[1] == 1 and kind != SOFTMAX:
        ws = np.empty((W.shape[0], 2))
        slots = np.arange(W.shape[0])
        return adagrad_ws(
            indptr, indices, data, y, order, ws, slots, W, G, kind, eps, has_bias, eta, alpha, l1
        )
    loss = _adagrad_batch(
        indptr, indices, data, y, order, W, G, keys, kind, eps, has_bias, eta, alpha, l1, batch
    )
    return float(loss)


@njit(nogil=True, cache=True)
def _catch_up(W, G, last, j, t, eta, alpha, l1):  # type: ignore[no-untyped-def]  # pragma: no cover
    """Key ``j``'s L2 decay and L1 shrinkage of the steps ``last[j] .. t-1`` at its
    (unchanged) adaptive step."""
    gap = t - last[j]
    if gap <= 0:
        return
    last[j] = t
    for k in range(W.shape[1]):
        w = W[j, k]
        if w == 0.0:
            continue
        g = G[j, k]
        r = eta / math.sqrt(g) if g > 0.0 else eta
        if alpha > 0.0:
            a = min(r * alpha, 0.5)
            w *= math.exp(gap * math.log1p(-a))
        c = r * l1 * gap
        if c > 0.0:
            if w > c:
                w -= c
            elif w < -c:
                w += c
            else:
                w = 0.0
        W[j, k] = w


@njit(nogil=True, cache=True)
def _adagrad_batch(  # type: ignore[no-untyped-def]  # pragma: no cover
    indptr, indices, data, y, order, W, G, keys, kind, eps, has_bias, eta, alpha, l1, batch
):
    """:func:`adagrad_sgd` in general: ``K`` outputs, minibatches of ``batch`` rows."""
    K = W.shape[1]
    nk = W.shape[0]
    lazy = alpha > 0.0 or l1 > 0.0
    last = np.zeros(nk if lazy else 0, np.int64)
    mark = np.full(nk, -1, np.int64)
    touched = np.empty(nk, np.int64)
    gbuf = np.zeros((nk, K))
    m = np.empty(K)
    loss = 0.0
    n = order.shape[0]
    t = 0
    i = 0
    while i < n:
        end = min(i + batch, n)
        nt = 0
        for p in range(i, end):
            r = order[p]
            if lazy:
                for q in range(indptr[r], indptr[r + 1]):
                    _catch_up(W, G, last, indices[q], t, eta, alpha, l1)
            for k in range(K):
                m[k] = _row_margin(indptr, indices, data, W, has_bias, r, k)
            loss += _row_d(kind, m, y[r], eps)
            for q in range(indptr[r], indptr[r + 1]):
                j = indices[q]
                if mark[j] != t:
                    mark[j] = t
                    touched[nt] = j
                    nt += 1
                x = data[q]
                for k in range(K):
                    gbuf[j, k] += m[k] * x
            if has_bias:
                for k in range(K):
                    gbuf[nk - 1, k] += m[k]
        inv = 1.0 / (end - i)
        for u in range(nt):
            j = touched[u]
            for k in range(K):
                g = gbuf[j, k] * inv
                gbuf[j, k] = 0.0
                if g != 0.0:
                    G[j, k] += g * g
                    W[j, k] -= eta * g / math.sqrt(G[j, k])
        if has_bias:
            for k in range(K):
                g = gbuf[nk - 1, k] * inv
                gbuf[nk - 1, k] = 0.0
                if g != 0.0:
                    G[nk - 1, k] += g * g
                    W[nk - 1, k] -= eta * g / math.sqrt(G[nk - 1, k])
        t += 1
        i = end
    if lazy:
        for u in range(keys.shape[0]):
            _catch_up(W, G, last, keys[u], t, eta, alpha, l1)
    return loss
