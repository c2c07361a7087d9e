"""Compiled hot loops of the linear models: CSR margins, minibatch gradients, local SGD.

Every kernel takes one partition's rows as CSR arrays whose column indices are
*local*: positions in the partition's sorted key list (Angel's pruned keys), so
the weights a task works on are a dense ``(n_keys, K)`` float64 array ``W``
pulled for those keys only.  With ``has_bias`` the last row of ``W`` is the
intercept (a feature that is 1 in every row and is never regularised).

Losses (``kind``): ``LOGISTIC`` (labels ±1), ``HINGE``, ``SQ_HINGE`` (±1),
``SQUARED`` and ``HUBER`` (real targets, ``eps`` = Huber's threshold) with
``K = 1``, and ``SOFTMAX`` (labels are class indices, ``K`` classes).

All kernels are ``numba.njit(nogil=True)``: tasks of one worker run them in
parallel threads.

Example
-------
>>> import numpy as np
>>> ip, ix, dx = np.array([0, 1, 2]), np.array([0, 1]), np.array([1.0, 1.0])
>>> W = np.array([[2.0], [-1.0], [0.5]])        # two features and the bias
>>> margins(ip, ix, dx, W, True).ravel().tolist()
[2.5, -0.5]
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

__all__ = [
    "HINGE",
    "HUBER",
    "KINDS",
    "LOGISTIC",
    "SOFTMAX",
    "SQUARED",
    "SQ_HINGE",
    "N_STATS",
    "batch_keys",
    "eval_rows",
    "eval_stats",
    "grad_rows",
    "local_sgd",
    "margins",
]

LOGISTIC, HINGE, SQ_HINGE, SQUARED, HUBER, SOFTMAX = 0, 1, 2, 3, 4, 5
KINDS = {
    "logistic": LOGISTIC,
    "hinge": HINGE,
    "squared_hinge": SQ_HINGE,
    "squared": SQUARED,
    "huber": HUBER,
    "softmax": SOFTMAX,
}
# eval_stats columns: rows, loss, correct, squared error, absolute error, log-loss
N_STATS = 6
# AUC histograms bin the margin on [-AUC_RANGE, AUC_RANGE]
AUC_RANGE = 16.0


@njit(nogil=True, cache=True)
def _dloss(kind: int, m: float, y: float, eps: float) -> tuple[float, float]:  # pragma: no cover
    """(loss, d loss / d margin) of one row for the scalar losses."""
    if kind == LOGISTIC:
        z = y * m
        if z > 0:
            e = math.exp(-z)
            return math.log1p(e), -y * e / (1.0 + e)
        e = math.exp(z)
        return -z + math.log1p(e), -y / (1.0 + e)
    if kind == HINGE:
        z = y * m
        if z < 1.0:
            return 1.0 - z, -y
        return 0.0, 0.0
    if kind == SQ_HINGE:
        z = 1.0 - y * m
        if z > 0.0:
            return z * z, -2.0 * y * z
        return 0.0, 0.0
    r = m - y
    if kind == SQUARED:
        return 0.5 * r * r, r
    a = abs(r)  # HUBER
    if a <= eps:
        return 0.5 * r * r, r
    return eps * a - 0.5 * eps * eps, eps if r > 0 else -eps


@njit(nogil=True, cache=True)
def _row_margin(indptr, indices, data, W, has_bias, r, k):  # type: ignore[no-untyped-def]  # pragma: no cover
    s = W[W.shape[0] - 1, k] if has_bias else 0.0
    for q in range(indptr[r], indptr[r + 1]):
        s += W[indices[q], k] * data[q]
    return s


@njit(nogil=True, cache=True)
def _softmax_d(m, y):  # type: ignore[no-untyped-def]  # pragma: no cover
    """Cross-entropy loss of margins ``m`` for class ``y``; ``m`` becomes p - onehot."""
    mx = m.max()
    s = 0.0
    for k in range(m.shape[0]):
        m[k] = math.exp(m[k] - mx)
        s += m[k]
    yi = int(y)
    loss = -math.log(max(m[yi] / s, 1e-300))
    for k in range(m.shape[0]):
        m[k] /= s
    m[yi] -= 1.0
    return loss


@njit(nogil=True, cache=True)
def _row_d(kind, m, y, eps):  # type: ignore[no-untyped-def]  # pragma: no cover
    """Loss of one row with margins ``m``; ``m`` becomes d loss / d margins.

    ``K > 1`` with a scalar loss is one-vs-rest: column ``k`` sees label +1 for
    class ``k`` and -1 otherwise.
    """
    if kind == SOFTMAX:
        return _softmax_d(m, y)
    K = m.shape[0]
    if K == 1:
        lv, d = _dloss(kind, m[0], y, eps)
        m[0] = d
        return lv
    loss = 0.0
    yi = int(y)
    for k in range(K):
        lv, d = _dloss(kind, m[k], 1.0 if k == yi else -1.0, eps)
        loss += lv
        m[k] = d
    return loss


@njit(nogil=True, cache=True)
def margins(indptr, indices, data, W, has_bias):  # type: ignore[no-untyped-def]  # pragma: no cover
    """``X @ W[:-1] + W[-1]`` (or without the bias row) as an ``(n_rows, K)`` array."""
    n = indptr.shape[0] - 1
    K = W.shape[1]
    out = np.empty((n, K))
    for r in range(n):
        for k in range(K):
            out[r, k] = _row_margin(indptr, indices, data, W, has_bias, r, k)
    return out


@njit(nogil=True, cache=True)
def batch_keys(indptr, indices, rows, mark, stamp):  # type: ignore[no-untyped-def]  # pragma: no cover
    """Sorted distinct local keys of ``rows`` (``mark`` is scratch, ``stamp`` unique per call)."""
    out = np.empty(64, np.int64)
    n = 0
    for r in rows:
        for q in range(indptr[r], indptr[r + 1]):
            j = indices[q]
            if mark[j] != stamp:
                mark[j] = stamp
                if n == out.shape[0]:
                    bigger = np.empty(2 * n, np.int64)
                    bigger[:n] = out[:n]
                    out = bigger
                out[n] = j
                n += 1
    return np.sort(out[:n])


@njit(nogil=True, cache=True)
def grad_rows(indptr, indices, data, y, rows, W, kind, eps, has_bias, G):  # type: ignore[no-untyped-def]  # pragma: no cover
    """Add the loss gradient of ``rows`` to ``G`` (same shape as ``W``); return the loss sum."""
    K = W.shape[1]
    nb = W.shape[0] - 1
    m = np.empty(K)
    loss = 0.0
    for r in rows:
        for k in range(K):
            m[k] = _row_margin(indptr, indices, data, W, has_bias, r, k)
        loss += _row_d(kind, m, y[r], eps)
        for q in range(indptr[r], indptr[r + 1]):
            j = indices[q]
            x = data[q]
            for k in range(K):
                G[j, k] += m[k] * x
        if has_bias:
            for k in range(K):
                G[nb, k] += m[k]
    return loss


@njit(nogil=True, cache=True)
def _catch_up(W, last, j, t, powt, geot, shrink, S):  # type: ignore[no-untyped-def]  # pragma: no cover
    """Apply the L2 decay and L1 shrinkage of steps ``last[j] .. t-1`` to key ``j``.

    ``powt[g]`` is ``decay ** g`` and ``geot[g]`` is ``decay + ... + decay ** g``
    (tables: a power per touched key was the kernel's hot spot).  With a
    non-empty ``S`` (averaging, L2 only) the iterates of those steps,
    ``w geot[gap]``, are added to the running sums ``S[j]``.
    """
    gap = t - last[j]
    if gap <= 0:
        return
    f = powt[gap]
    c = shrink * gap
    avg = S.shape[0] > 0
    for k in range(W.shape[1]):
        if avg:
            S[j, k] += W[j, k] * geot[gap]
        w = W[j, k] * f
        if c > 0.0:
            if w > c:
                w -= c
            elif w < -c:
                w += c
            else:
                w = 0.0
        W[j, k] = w
    last[j] = t


@njit(nogil=True, cache=True)
def _decay_tables(decay, n):  # type: ignore[no-untyped-def]  # pragma: no cover
    powt = np.empty(n + 1)
    geot = np.empty(n + 1)
    powt[0] = 1.0
    geot[0] = 0.0
    for g in range(1, n + 1):
        powt[g] = powt[g - 1] * decay
        geot[g] = geot[g - 1] + powt[g]
    return powt, geot


@njit(nogil=True, cache=True)
def _local_sgd_lazy(  # type: ignore[no-untyped-def]  # pragma: no cover
    indptr, indices, data, y, order, W, kind, eps, has_bias, eta, alpha, l1, batch, average
):
    """Local minibatch SGD over ``order`` (MA-SGD's inner loop), in place on ``W``.

    Regularisation is lazy (Bottou): a key's L2 decay ``(1 - eta alpha)`` and L1
    shrinkage ``eta l1`` of the steps since it was last touched are applied when a
    row touches it again and once at the end, so a step costs the row's nnz, not
    the model size.  With ``average`` (ignored when ``l1 > 0``: an average of
    iterates is not sparse) ``W`` ends as the mean of the iterates after each
    step of the second half of the pass (tail-averaged SGD: Polyak-Ruppert
    averaging without the drag of the first, far-off iterates), kept lazily
    too: a key's untouched steps add a geometric sum.  Returns
    ``(loss sum, steps)``.
    """
    K = W.shape[1]
    nk = W.shape[0]
    nf = nk - 1 if has_bias else nk
    decay = max(0.0, 1.0 - eta * alpha)
    shrink = eta * l1
    last = np.zeros(nk, np.int64)
    mark = np.full(nk, -1, np.int64)
    touched = np.empty(nk, np.int64)
    gbuf = np.zeros((nk, K))
    avg = average and l1 == 0.0
    S = np.zeros((nk if avg else 0, K))  # sums of the iterates since step t0
    none = np.zeros((0, K))
    n = order.shape[0]
    n_steps = (n + batch - 1) // batch
    powt, geot = _decay_tables(decay, n_steps)
    t0 = n_steps // 2 if avg else -1  # averaging starts at step t0
    Sa = none
    m = np.empty(K)
    loss = 0.0
    t = 0
    i = 0
    while i < n:
        if t == t0:  # bring every key to step t0, then start summing
            for j in range(nf):
                _catch_up(W, last, j, t, powt, geot, shrink, none)
            Sa = S
        end = min(i + batch, n)
        nt = 0
        for p in range(i, end):
            r = order[p]
            for q in range(indptr[r], indptr[r + 1]):
                _catch_up(W, last, indices[q], t, powt, geot, shrink, Sa)
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
        step = eta / (end - i)
        for u in range(nt):
            j = touched[u]
            for k in range(K):
                W[j, k] -= step * gbuf[j, k]
                gbuf[j, k] = 0.0
        if has_bias:
            for k in range(K):
                W[nk - 1, k] -= step * gbuf[nk - 1, k]
                gbuf[nk - 1, k] = 0.0
                if Sa.shape[0] > 0:
                    Sa[nk - 1, k] += W[nk - 1, k]  # the intercept is never decayed
        t += 1
        i = end
    for j in range(nf):
        _catch_up(W, last, j, t, powt, geot, shrink, Sa)
    if Sa.shape[0] > 0 and t > t0:
        for j in range(nk):
            for k in range(K):
                W[j, k] = S[j, k] / (t - t0)
    return loss, t


@njit(nogil=True, cache=True)
def _local_sgd_scaled(  # type: ignore[no-untyped-def]  # pragma: no cover
    indptr, indices, data, y, order, W, kind, eps, has_bias, eta, alpha, batch, average
):
    """L2-only local SGD with the weights kept as ``s * V`` (Bottou / Shalev-Shwartz).

    A step's decay is one multiplication of the scalar ``s``; a step touches only
    its rows' keys, with no per-key catch-up.  The tail average uses running
    scalars (as Xu 2011 / ``SGDClassifier(average=True)``): with ``C`` the sum
    of the scales since averaging started and ``P[j]`` the sum of each change of
    ``V[j]`` times the ``C`` before it, the sum of the iterates is
    ``R + C V - P`` (``R`` collects it whenever ``s`` is renormalised).
    """
    K = W.shape[1]
    nk = W.shape[0]
    nf = nk - 1 if has_bias else nk
    decay = max(0.0, 1.0 - eta * alpha)
    n = order.shape[0]
    n_steps = (n + batch - 1) // batch
    t0 = n_steps // 2 if average else n_steps + 1
    V = W.copy()
    sc = 1.0
    C = 0.0
    P = np.zeros((nk if average else 0, K))
    R = np.zeros((nk if average else 0, K))
    bsum = np.zeros(K)
    mark = np.full(nk if batch > 1 else 0, -1, np.int64)
    touched = np.empty(nk if batch > 1 else 0, np.int64)
    gbuf = np.zeros((nk if batch > 1 else 0, K))
    m = np.empty(K)
    loss = 0.0
    t = 0
    i = 0
    while i < n:
        on = t >= t0
        if sc < 1e-9 or decay == 0.0:  # renormalise V (rare); the sums so far go to R
            for j in range(nf):
                for k in range(K):
                    if on:
                        R[j, k] += C * V[j, k] - P[j, k]
                        P[j, k] = 0.0
                    V[j, k] *= sc
            C = 0.0
            sc = 1.0
        end = min(i + batch, n)
        if batch == 1:
            r = order[i]
            for k in range(K):
                mm = V[nk - 1, k] if has_bias else 0.0
                acc = 0.0
                for q in range(indptr[r], indptr[r + 1]):
                    acc += V[indices[q], k] * data[q]
                m[k] = mm + sc * acc
            loss += _row_d(kind, m, y[r], eps)
            for q in range(indptr[r], indptr[r + 1]):
                j = indices[q]
                x = data[q]
                for k in range(K):
                    dv = -eta * m[k] * x / sc
                    V[j, k] += dv
                    if on:
                        P[j, k] += dv * C
            if has_bias:
                for k in range(K):
                    V[nk - 1, k] -= eta * m[k]
        else:
            nt = 0
            for p in range(i, end):
                r = order[p]
                for k in range(K):
                    mm = V[nk - 1, k] if has_bias else 0.0
                    acc = 0.0
                    for q in range(indptr[r], indptr[r + 1]):
                        acc += V[indices[q], k] * data[q]
                    m[k] = mm + sc * acc
                loss += _row_d(kind, m, y[r], eps)
                for q in range(indptr[r], indptr[r + 1]):
                    j = indices[q]
                    if mark[j] != t:
                        mark[j] = t
                        touched[nt] = j
                        nt += 1
                    for k in range(K):
                        gbuf[j, k] += m[k] * data[q]
                if has_bias:
                    for k in range(K):
                        gbuf[nk - 1, k] += m[k]
            step = eta / (end - i)
            for u in range(nt):
                j = touched[u]
                for k in range(K):
                    dv = -step * gbuf[j, k] / sc
                    V[j, k] += dv
                    if on:
                        P[j, k] += dv * C
                    gbuf[j, k] = 0.0
            if has_bias:
                for k in range(K):
                    V[nk - 1, k] -= step * gbuf[nk - 1, k]
                    gbuf[nk - 1, k] = 0.0
        sc *= decay
        if on:
            C += sc
            if has_bias:
                for k in range(K):
                    bsum[k] += V[nk - 1, k]
        t += 1
        i = end
    if average and t > t0:
        for j in range(nf):
            for k in range(K):
                W[j, k] = (R[j, k] + C * V[j, k] - P[j, k]) / (t - t0)
        if has_bias:
            for k in range(K):
                W[nk - 1, k] = bsum[k] / (t - t0)
    else:
        for j in range(nf):
            for k in range(K):
                W[j, k] = sc * V[j, k]
        if has_bias:
            for k in range(K):
                W[nk - 1, k] = V[nk - 1, k]
    return loss, t


@njit(nogil=True, cache=True)
def _local_sgd_scaled1(  # type: ignore[no-untyped-def]  # pragma: no cover
    indptr, indices, data, y, order, W, kind, eps, has_bias, eta, alpha, average
):
    """:func:`_local_sgd_scaled` for one output and one row per step (the CTR case):
    flat arrays and no loops over outputs, so the per-entry work compiles tight."""
    nk = W.shape[0]
    nf = nk - 1 if has_bias else nk
    decay = max(0.0, 1.0 - eta * alpha)
    n = order.shape[0]
    t0 = n // 2 if average else n + 1
    V = W[:, 0].copy()
    P = np.zeros(nk if average else 0)
    R = np.zeros(nk if average else 0)
    sc = 1.0
    C = 0.0
    b = V[nk - 1] if has_bias else 0.0
    bsum = 0.0
    loss = 0.0
    for t in range(n):
        on = t >= t0
        if sc < 1e-9 or decay == 0.0:  # renormalise V (rare); the sums so far go to R
            for j in range(nf):
                if on:
                    R[j] += C * V[j] - P[j]
                    P[j] = 0.0
                V[j] *= sc
            C = 0.0
            sc = 1.0
        r = order[t]
        lo, hi = indptr[r], indptr[r + 1]
        acc = 0.0
        for q in range(lo, hi):
            acc += V[indices[q]] * data[q]
        lv, d = _dloss(kind, b + sc * acc, y[r], eps)
        loss += lv
        g = -eta * d / sc
        if on:
            gc = g * C
            for q in range(lo, hi):
                j = indices[q]
                x = data[q]
                V[j] += g * x
                P[j] += gc * x
        else:
            for q in range(lo, hi):
                V[indices[q]] += g * data[q]
        if has_bias:
            b -= eta * d
        sc *= decay
        if on:
            C += sc
            bsum += b
    if average and n > t0:
        for j in range(nf):
            W[j, 0] = (R[j] + C * V[j] - P[j]) / (n - t0)
        if has_bias:
            W[nk - 1, 0] = bsum / (n - t0)
    else:
        for j in range(nf):
            W[j, 0] = sc * V[j]
        if has_bias:
            W[nk - 1, 0] = b
    return loss, n


@njit(nogil=True, cache=True)
def local_sgd(  # type: ignore[no-untyped-def]  # pragma: no cover
    indptr, indices, data, y, order, W, kind, eps, has_bias, eta, alpha, l1, batch, average
):
    """Local minibatch SGD over ``order`` (MA-SGD's inner loop), in place on ``W``.

    Without L1 the weights are kept scaled (:func:`_local_sgd_scaled`: a step
    costs its rows' nnz, the L2 decay is one scalar product); with ``l1 > 0``
    regularisation is lazy (:func:`_local_sgd_lazy`).  With ``average`` (L2
    only) ``W`` ends as the mean of the iterates after the steps of the second
    half of the pass (tail-averaged SGD).  Returns ``(loss sum, steps)``.
    """
    if l1 == 0.0 and batch == 1 and W.shape[1] == 1 and kind != SOFTMAX:
        return _local_sgd_scaled1(
            indptr, indices, data, y, order, W, kind, eps, has_bias, eta, alpha, average
        )
    if l1 == 0.0:
        return _local_sgd_scaled(
            indptr, indices, data, y, order, W, kind, eps, has_bias, eta, alpha, batch, average
        )
    return _local_sgd_lazy(
        indptr, indices, data, y, order, W, kind, eps, has_bias, eta, alpha, l1, batch, average
    )


@njit(nogil=True, cache=True)
def eval_stats(indptr, indices, data, y, W, kind, eps, has_bias, nbins):  # type: ignore[no-untyped-def]  # pragma: no cover
    """Validation sums over all rows, and AUC histograms of the margin by class.

    Returns ``(stats, hist)``: ``stats`` = rows, loss sum, correct, squared
    error, absolute error, log-loss sum; ``hist`` is ``(2, nbins)``: counts of
    negatives and positives per margin bin on ``[-16, 16]`` (binary only).
    """
    rows = np.arange(indptr.shape[0] - 1)
    return eval_rows(indptr, indices, data, y, rows, W, kind, eps, has_bias, nbins)


@njit(nogil=True, cache=True)
def eval_rows(indptr, indices, data, y, rows, W, kind, eps, has_bias, nbins):  # type: ignore[no-untyped-def]  # pragma: no cover
    """:func:`eval_stats` over the rows ``rows`` only (``y`` indexed by row)."""
    K = W.shape[1]
    st = np.zeros(N_STATS)
    hist = np.zeros((2, nbins))
    m = np.empty(K)
    width = 2.0 * AUC_RANGE / nbins
    for i in range(rows.shape[0]):
        r = rows[i]
        for k in range(K):
            m[k] = _row_margin(indptr, indices, data, W, has_bias, r, k)
        st[0] += 1.0
        if K > 1:
            pred = np.argmax(m)
            st[2] += 1.0 if pred == int(y[r]) else 0.0
            lv = _row_d(kind, m, y[r], eps)
            st[1] += lv
            st[5] += lv
            continue
        lv, _d = _dloss(kind, m[0], y[r], eps)
        st[1] += lv
        if kind == SQUARED or kind == HUBER:  # noqa: SIM109 (numba: no tuple membership)
            e = m[0] - y[r]
            st[3] += e * e
            st[4] += abs(e)
            continue
        pos = y[r] > 0
        st[2] += 1.0 if (m[0] > 0) == pos else 0.0
        ll, _d2 = _dloss(LOGISTIC, m[0], y[r], 0.0)
        st[5] += ll
        b = int((min(max(m[0], -AUC_RANGE), AUC_RANGE) + AUC_RANGE) / width)
        b = min(b, nbins - 1)
        hist[1 if pos else 0, b] += 1.0
    return st, hist
