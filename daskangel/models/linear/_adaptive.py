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

from ...psarray._scatter import _prefetch
from ._ahead import prefetch_rows
from ._kernels import AHEAD_ROWS, LOGISTIC, SOFTMAX, _dloss, _row_d, _row_margin

__all__ = ["LOGISTIC", "adagrad_packed", "adagrad_sgd"]


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

    One output and one row a step (the CTR case) run :func:`_adagrad1` on a
    packed workspace; a Python dispatch, so a fit compiles the kernel it runs.
    """
    if batch == 1 and W.shape[1] == 1 and kind != SOFTMAX:
        n = W.shape[0]
        ws = np.empty((n, 4))
        ws[:, 0] = W[:, 0]
        ws[:, 1] = G[:, 0]
        loss = _adagrad1(
            indptr, indices, data, y, order, ws, keys, kind, eps, has_bias, eta, alpha, l1
        )
        W[:, 0] = ws[:, 0]
        G[:, 0] = ws[:, 1]
        return float(loss)
    loss = _adagrad_batch(
        indptr, indices, data, y, order, W, G, keys, kind, eps, has_bias, eta, alpha, l1, batch
    )
    return float(loss)


@njit(nogil=True, cache=True, inline="always")
def _log_keep(x):  # type: ignore[no-untyped-def]  # pragma: no cover
    """``log(1 - min(x, 0.5))`` for ``x >= 0``: near 0 (the common case: ``x`` is a
    step times ``alpha``) by its series to ``x**3``, error below 3e-13."""
    if x < 1e-3:
        return -x * (1.0 + x * (0.5 + x * (1.0 / 3.0)))
    return math.log1p(-min(x, 0.5))


@njit(nogil=True, cache=True, inline="always")
def _decay_of(g, eta, alpha):  # type: ignore[no-untyped-def]  # pragma: no cover
    """``log(1 - step * alpha)`` of a weight whose squared-gradient sum is ``g``."""
    r = eta / math.sqrt(g) if g > 0.0 else eta
    return _log_keep(r * alpha)


@njit(nogil=True, cache=True, inline="always")
def _decay(x):  # type: ignore[no-untyped-def]  # pragma: no cover
    """``exp(x)`` for ``x <= 0``; for ``x > -0.01`` (most touches of a Zipf set: a
    key's gap times its step times ``alpha``) by its series to ``x**5``, relative
    error below 2e-15 (the series from ``-1e-4`` only left the mid-frequency keys
    on ``exp``: ~5 % of the kernel's time)."""
    if x > -1e-2:
        return 1.0 + x * (1.0 + x * (0.5 + x * (1.0 / 6.0 + x * (1.0 / 24.0 + x * (1.0 / 120.0)))))
    return math.exp(x)


def adagrad_packed(  # type: ignore[no-untyped-def]
    indptr, indices, data, y, order, ws, keys, kind, eps, has_bias, eta, alpha, l1
):
    """One output, one row a step, on a packed ``(n, 4)`` workspace ``ws`` whose
    columns 0 and 1 hold the weights and their sums (columns 2, 3: scratch of the
    rows in ``keys`` and the intercept's, the last): :func:`_adagrad1`, for the
    in-place path (:mod:`._inplace`, global column indices)."""
    return _adagrad1(indptr, indices, data, y, order, ws, keys, kind, eps, has_bias, eta, alpha, l1)


@njit(nogil=True, cache=True, inline="always")
def _shrink(w, c):  # type: ignore[no-untyped-def]  # pragma: no cover
    """``w`` moved ``c >= 0`` towards zero, stopping there (L1's proximal step)."""
    return w - c if w > c else (w + c if w < -c else 0.0)


@njit(nogil=True, cache=True, inline="always")
def _lazy(w, gap, rate, g, eta, alpha, l1):  # type: ignore[no-untyped-def]  # pragma: no cover
    """Weight ``w`` after ``gap`` skipped steps: L2 decay at its log-rate ``rate``
    and L1 shrinkage at its adaptive step (its gradient sum ``g``)."""
    if alpha > 0.0:
        w *= _decay(gap * rate)
    if l1 > 0.0:
        w = _shrink(w, (eta / math.sqrt(g) if g > 0.0 else eta) * l1 * gap)
    return w


# FMA contraction only (no reassociation, no finite-math assumptions: a NaN still
# shows as one): 9 % off the kernel (two concurrent tasks, 450,000 Zipf rows each)
@njit(nogil=True, cache=True, fastmath={"contract"})
def _adagrad1(  # type: ignore[no-untyped-def]  # pragma: no cover
    indptr, indices, data, y, order, ws, keys, kind, eps, has_bias, eta, alpha, l1
):
    """:func:`adagrad_sgd` for one output and one row a step on ``ws`` ``(n, 4)``:
    weight, squared-gradient sum, log of its per-step L2 decay, last step seen
    (side by side: a key's catch-up, margin and update touch one cache line).

    One compiled body, every helper inlined and the regularisation's branches on
    loop constants (the earlier calls per touched key into a catch-up helper that
    re-tested the gap and the weight cost ~30 % of the kernel)."""
    nk = ws.shape[0]
    lazy = alpha > 0.0 or l1 > 0.0
    for u in range(keys.shape[0]):
        j = keys[u]
        ws[j, 2] = _decay_of(ws[j, 1], eta, alpha) if alpha > 0.0 else 0.0
        ws[j, 3] = 0.0
    b = ws[nk - 1, 0] if has_bias else 0.0
    gb = ws[nk - 1, 1] if has_bias else 0.0
    loss = 0.0
    n_rows = order.shape[0]
    for t in range(n_rows):
        prefetch_rows(indptr, indices, data, order, t)  # the CSR lines of rows further ahead
        if t + AHEAD_ROWS < n_rows:  # ask for the lines of a row ahead (a hint, never a fault)
            ra = order[t + AHEAD_ROWS]
            for q in range(indptr[ra], indptr[ra + 1]):
                _prefetch(ws, indices[q], 0)  # type: ignore[call-arg]
        row = order[t]
        lo, hi = indptr[row], indptr[row + 1]
        acc = b
        tf = float(t)
        for q in range(lo, hi):
            j = indices[q]
            w = ws[j, 0]
            if lazy:  # the decay and shrinkage of the steps since its last touch
                w = _lazy(w, tf - ws[j, 3], ws[j, 2], ws[j, 1], eta, alpha, l1)
                ws[j, 0] = w
                ws[j, 3] = tf
            acc += w * data[q]
        lv, d = _dloss(kind, acc, y[row], eps)
        loss += lv
        if d != 0.0:
            for q in range(lo, hi):
                j = indices[q]
                g = d * data[q]
                if g != 0.0:
                    s = ws[j, 1] + g * g
                    ws[j, 1] = s
                    r = eta / math.sqrt(s)  # this key's step from now on
                    ws[j, 0] -= r * g
                    if alpha > 0.0:
                        ws[j, 2] = _log_keep(r * alpha)
            if has_bias:
                gb += d * d
                b -= eta * d / math.sqrt(gb)
    n = float(n_rows)
    if lazy:
        for u in range(keys.shape[0]):
            j = keys[u]
            ws[j, 0] = _lazy(ws[j, 0], n - ws[j, 3], ws[j, 2], ws[j, 1], eta, alpha, l1)
    if has_bias:
        ws[nk - 1, 0] = b
        ws[nk - 1, 1] = gb
    return loss


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
