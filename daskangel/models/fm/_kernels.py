"""Compiled hot loops of factorization machines: margins, minibatch gradients, validation sums.

A task's parameters are a dense ``(n_keys, D)`` float64 array ``W`` pulled for
its own keys (local slots, see :mod:`.._core._rows`): column 0 is a feature's
linear weight, the other columns its factors, and the last row is the bias
(column 0; its factors are unused).

* **FM** (Rendle 2010), ``D = 1 + k``: the pairwise term is computed with
  Rendle's identity ``1/2 sum_f [(sum_i v_if x_i)^2 - sum_i v_if^2 x_i^2]``,
  so a row costs ``O(nnz k)``, forward and backward.
* **FFM** (Juan et al. 2016), ``D = 1 + n_fields k``: feature ``i`` keeps one
  factor vector per field; the pair ``(i, j)`` uses ``<v_{i,F(j)}, v_{j,F(i)}>``
  (``fields[slot]`` is a slot's field), ``O(nnz^2 k)`` a row.  ``n_fields == 0``
  means FM.

Losses: ``LOGISTIC`` (labels ±1) and ``SQUARED``.  Every kernel is
``numba.njit(nogil=True)``: tasks of one worker run them in parallel threads.

Example
-------
>>> import numpy as np
>>> ip, ix, dx = np.array([0, 2]), np.array([0, 1]), np.array([1.0, 2.0])
>>> W = np.array([[0.5, 1.0, 0.0], [0.0, 1.0, 3.0], [0.1, 0.0, 0.0]])  # 2 features, bias
>>> round(float(margins(ip, ix, dx, W, np.zeros(0, np.int32), 0)[0]), 6)  # 0.1+0.5+1*2
2.6
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from .._core._epochs import AUC_RANGE, N_STATS

__all__ = [
    "LOGISTIC",
    "SQUARED",
    "batch_keys",
    "eval_rows",
    "grad_rows",
    "local_sgd",
    "margins",
]

LOGISTIC, SQUARED = 0, 3


@njit(nogil=True, cache=True)
def _dloss(kind: int, m: float, y: float) -> tuple[float, float]:  # pragma: no cover
    """(loss, d loss / d margin) of one row."""
    if kind == LOGISTIC:
        z = y * m
        if z > 0:
            e = math.exp(-z)
            return math.log1p(e), -y * e / (1.0 + e)
        e = math.exp(z)
        return -z + math.log1p(e), -y / (1.0 + e)
    r = m - y
    return 0.5 * r * r, r


@njit(nogil=True, cache=True)
def _fm_margin(indptr, indices, data, W, r, s):  # type: ignore[no-untyped-def]  # pragma: no cover
    """Margin of row ``r`` (bias in the last row); ``s[f]`` becomes ``sum_i v_if x_i``."""
    k = s.shape[0]
    m = W[W.shape[0] - 1, 0]
    for f in range(k):
        s[f] = 0.0
    sq = 0.0
    for q in range(indptr[r], indptr[r + 1]):
        j = indices[q]
        x = data[q]
        m += W[j, 0] * x
        for f in range(k):
            v = W[j, 1 + f] * x
            s[f] += v
            sq += v * v
    pair = 0.0
    for f in range(k):
        pair += s[f] * s[f]
    return m + 0.5 * (pair - sq)


@njit(nogil=True, cache=True)
def _ffm_margin(indptr, indices, data, W, fields, k, r):  # type: ignore[no-untyped-def]  # pragma: no cover
    m = W[W.shape[0] - 1, 0]
    a0, a1 = indptr[r], indptr[r + 1]
    for a in range(a0, a1):
        i = indices[a]
        xi = data[a]
        m += W[i, 0] * xi
        fi = fields[i]
        for b in range(a + 1, a1):
            j = indices[b]
            fj = fields[j]
            oi = 1 + fj * k
            oj = 1 + fi * k
            d = 0.0
            for f in range(k):
                d += W[i, oi + f] * W[j, oj + f]
            m += d * xi * data[b]
    return m


@njit(nogil=True, cache=True)
def _margin(indptr, indices, data, W, fields, nfields, r, s):  # type: ignore[no-untyped-def]  # pragma: no cover
    if nfields == 0:
        return _fm_margin(indptr, indices, data, W, r, s)
    return _ffm_margin(indptr, indices, data, W, fields, s.shape[0], r)


@njit(nogil=True, cache=True)
def _backward(indptr, indices, data, W, fields, nfields, r, s, dl, G):  # type: ignore[no-untyped-def]  # pragma: no cover
    """Add ``dl *`` d margin / d W of row ``r`` to ``G`` (``s`` from the forward pass)."""
    k = s.shape[0]
    G[G.shape[0] - 1, 0] += dl
    a0, a1 = indptr[r], indptr[r + 1]
    if nfields == 0:
        for q in range(a0, a1):
            j = indices[q]
            x = data[q]
            G[j, 0] += dl * x
            for f in range(k):
                G[j, 1 + f] += dl * x * (s[f] - W[j, 1 + f] * x)
        return
    for a in range(a0, a1):
        i = indices[a]
        xi = data[a]
        G[i, 0] += dl * xi
        fi = fields[i]
        for b in range(a + 1, a1):
            j = indices[b]
            fj = fields[j]
            c = dl * xi * data[b]
            oi = 1 + fj * k
            oj = 1 + fi * k
            for f in range(k):
                wi = W[i, oi + f]
                G[i, oi + f] += c * W[j, oj + f]
                G[j, oj + f] += c * wi


@njit(nogil=True, cache=True)
def margins(indptr, indices, data, W, fields, nfields):  # type: ignore[no-untyped-def]  # pragma: no cover
    """The margin of every row (``(n_rows,)``); ``k`` is taken from ``W``'s width."""
    n = indptr.shape[0] - 1
    k = (W.shape[1] - 1) // max(nfields, 1)
    s = np.empty(k)
    out = np.empty(n)
    for r in range(n):
        out[r] = _margin(indptr, indices, data, W, fields, nfields, r, s)
    return out


@njit(nogil=True, cache=True)
def grad_rows(indptr, indices, data, y, rows, W, fields, nfields, kind, G):  # type: ignore[no-untyped-def]  # pragma: no cover
    """Add the loss gradient of ``rows`` to ``G`` (shaped like ``W``); return the loss sum."""
    k = (W.shape[1] - 1) // max(nfields, 1)
    s = np.empty(k)
    loss = 0.0
    for r in rows:
        m = _margin(indptr, indices, data, W, fields, nfields, r, s)
        lv, dl = _dloss(kind, m, y[r])
        loss += lv
        _backward(indptr, indices, data, W, fields, nfields, r, s, dl, G)
    return loss


@njit(nogil=True, cache=True)
def _touch(indptr, indices, r, mark, stamp, touched, nt):  # type: ignore[no-untyped-def]  # pragma: no cover
    for q in range(indptr[r], indptr[r + 1]):
        j = indices[q]
        if mark[j] != stamp:
            mark[j] = stamp
            touched[nt] = j
            nt += 1
    return nt


@njit(nogil=True, cache=True)
def local_sgd(  # type: ignore[no-untyped-def]  # pragma: no cover
    indptr, indices, data, y, order, W, fields, nfields, kind, eta, reg_linear, reg_factors, batch
):
    """MA-SGD's local steps: minibatch SGD over the rows ``order``, in place on ``W``.

    A step averages the gradient of ``batch`` rows and adds the L2 terms
    ``reg_linear w`` / ``reg_factors v`` of the rows it touched (the bias is not
    regularised), then moves those rows by ``-eta``.  Returns the loss sum.
    """
    nk, D = W.shape
    k = (D - 1) // max(nfields, 1)
    s = np.empty(k)
    G = np.zeros((nk, D))
    mark = np.full(nk, -1, np.int64)
    touched = np.empty(nk, np.int64)
    nb = nk - 1
    loss = 0.0
    n = order.shape[0]
    i = 0
    step = 0
    while i < n:
        end = min(i + batch, n)
        nt = 0
        for p in range(i, end):
            r = order[p]
            m = _margin(indptr, indices, data, W, fields, nfields, r, s)
            lv, dl = _dloss(kind, m, y[r])
            loss += lv
            nt = _touch(indptr, indices, r, mark, step, touched, nt)
            _backward(indptr, indices, data, W, fields, nfields, r, s, dl, G)
        scale = eta / (end - i)
        for t in range(nt):
            j = touched[t]
            W[j, 0] -= scale * G[j, 0] + eta * reg_linear * W[j, 0]
            G[j, 0] = 0.0
            for c in range(1, D):
                W[j, c] -= scale * G[j, c] + eta * reg_factors * W[j, c]
                G[j, c] = 0.0
        W[nb, 0] -= scale * G[nb, 0]
        G[nb, 0] = 0.0
        step += 1
        i = end
    return loss


@njit(nogil=True, cache=True)
def batch_keys(indptr, indices, rows, mark, stamp, touched):  # type: ignore[no-untyped-def]  # pragma: no cover
    """Sorted distinct local keys of ``rows`` (``mark``, ``touched``: scratch of n_keys;
    ``stamp`` unique per call)."""
    nt = 0
    for r in rows:
        nt = _touch(indptr, indices, r, mark, stamp, touched, nt)
    return np.sort(touched[:nt])


@njit(nogil=True, cache=True)
def eval_rows(indptr, indices, data, y, W, fields, nfields, kind, nbins):  # type: ignore[no-untyped-def]  # pragma: no cover
    """Validation sums of every row and AUC histograms of the margin by class.

    ``stats`` = rows, loss sum, correct, squared error, absolute error,
    log-loss sum (see :mod:`.._core._epochs`); ``hist`` is ``(2, nbins)``.
    """
    k = (W.shape[1] - 1) // max(nfields, 1)
    s = np.empty(k)
    st = np.zeros(N_STATS)
    hist = np.zeros((2, nbins))
    width = 2.0 * AUC_RANGE / nbins
    for r in range(indptr.shape[0] - 1):
        m = _margin(indptr, indices, data, W, fields, nfields, r, s)
        lv, _d = _dloss(kind, m, y[r])
        st[0] += 1.0
        st[1] += lv
        if kind == SQUARED:
            e = m - y[r]
            st[3] += e * e
            st[4] += abs(e)
            continue
        pos = y[r] > 0
        st[2] += 1.0 if (m > 0) == pos else 0.0
        st[5] += lv
        b = int((min(max(m, -AUC_RANGE), AUC_RANGE) + AUC_RANGE) / width)
        hist[1 if pos else 0, min(b, nbins - 1)] += 1.0
    return st, hist
