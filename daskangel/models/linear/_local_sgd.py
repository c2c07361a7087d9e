"""MA-SGD's compiled inner loop: local SGD over a partition's rows, L2 scaled or L1 lazy.

``local_sgd`` runs minibatch SGD in place on a task's dense local weights
``W`` (``(n_keys, K)``, slots as in :mod:`._kernels`).  Without L1 the
weights are kept as ``s * V`` so the L2 decay is one scalar product per step
(:func:`_local_sgd_scaled`, and :func:`sgd_pairs` for the one-output,
one-row-per-step case); with L1 every key catches up on the steps it missed
when next touched (:func:`_local_sgd_lazy`).  ``average=True`` (L2 only) ends
at the mean of the iterates of the second half of the pass.

Example
-------
>>> import numpy as np
>>> ip, ix, dx = np.array([0, 1, 2]), np.array([0, 1]), np.array([1.0, 1.0])
>>> W = np.zeros((3, 1))                       # two features and the bias
>>> loss, steps = local_sgd(ip, ix, dx, np.array([1.0, -1.0]), np.array([0, 1]), W,
...                         LOGISTIC, 0.0, True, 0.5, 0.0, 0.0, 1, False)
>>> steps, bool(W[0, 0] > 0 > W[1, 0])
(2, True)
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ._kernels import LOGISTIC, SOFTMAX, _row_d, _row_margin
from ._sgd_pairs import sgd_pairs

__all__ = ["LOGISTIC", "local_sgd", "sgd_pairs"]


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
            nt = _accumulate(indptr, indices, data, r, m, t, mark, touched, nt, gbuf, has_bias)
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
def _accumulate(indptr, indices, data, r, m, t, mark, touched, nt, gbuf, has_bias):  # type: ignore[no-untyped-def]  # pragma: no cover
    """Add row ``r``'s gradient (``m`` = d loss / d margins) into ``gbuf`` (the
    intercept's in its last row); keys first touched in step ``t`` are appended to
    ``touched``.  Returns the new count."""
    for q in range(indptr[r], indptr[r + 1]):
        j = indices[q]
        if mark[j] != t:
            mark[j] = t
            touched[nt] = j
            nt += 1
        x = data[q]
        for k in range(m.shape[0]):
            gbuf[j, k] += m[k] * x
    if has_bias:
        for k in range(m.shape[0]):
            gbuf[gbuf.shape[0] - 1, k] += m[k]
    return nt


@njit(nogil=True, cache=True)
def _scaled_margins(indptr, indices, data, V, sc, has_bias, r, m):  # type: ignore[no-untyped-def]  # pragma: no cover
    """Row ``r``'s margins into ``m`` for weights ``sc * V`` (intercept, last row, unscaled)."""
    nk = V.shape[0]
    for k in range(V.shape[1]):
        acc = 0.0
        for q in range(indptr[r], indptr[r + 1]):
            acc += V[indices[q], k] * data[q]
        m[k] = (V[nk - 1, k] if has_bias else 0.0) + sc * acc


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
            _scaled_margins(indptr, indices, data, V, sc, has_bias, r, m)
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
                _scaled_margins(indptr, indices, data, V, sc, has_bias, r, m)
                loss += _row_d(kind, m, y[r], eps)
                nt = _accumulate(indptr, indices, data, r, m, t, mark, touched, nt, gbuf, has_bias)
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
    """:func:`_local_sgd_scaled` for one output and one row per step (the CTR case),
    through :func:`sgd_pairs` on a ``(n_keys, 2)`` workspace."""
    nk = W.shape[0]
    nf = nk - 1 if has_bias else nk
    VP = np.zeros((nk, 2))
    for j in range(nk):
        VP[j, 0] = W[j, 0]
    keys = np.arange(nf)
    loss = sgd_pairs(
        indptr, indices, data, y, order, VP, keys, kind, eps, has_bias, eta, alpha, average
    )
    for j in range(nk):
        W[j, 0] = VP[j, 0]
    return loss, order.shape[0]


def local_sgd(  # type: ignore[no-untyped-def]
    indptr, indices, data, y, order, W, kind, eps, has_bias, eta, alpha, l1, batch, average
):
    """Local minibatch SGD over ``order`` (MA-SGD's inner loop), in place on ``W``.

    Without L1 the weights are kept scaled (:func:`_local_sgd_scaled`: a step
    costs its rows' nnz, the L2 decay is one scalar product); with ``l1 > 0``
    regularisation is lazy (:func:`_local_sgd_lazy`).  With ``average`` (L2
    only) ``W`` ends as the mean of the iterates after the steps of the second
    half of the pass (tail-averaged SGD).  Returns ``(loss sum, steps)``.

    A Python dispatch, not a compiled one: a compiled dispatcher compiled all
    three kernels for every argument types it met (on a cold numba cache 20-60 s
    each, in every test run on a fresh clone), where a fit needs one.
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
