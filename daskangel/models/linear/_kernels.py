"""Compiled hot loops of the linear models: losses, CSR margins, minibatch gradients,
validation sums (MA-SGD's local SGD: :mod:`._local_sgd`).

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

from ...psarray._scatter import _prefetch
from .._core._epochs import AUC_RANGE, N_STATS
from ._ahead import prefetch_rows

__all__ = [
    "AHEAD_ROWS",
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
    "grad_batch",
    "grad_rows",
    "margins",
    "max_row_sq",
    "put_rows",
]

#: rows ahead whose keys' weight lines the row kernels prefetch (``llvm.prefetch``, a
#: hint that never faults): a row's keys are random lines of a model of tens of MiB,
#: and the CPU overlaps only the misses its reorder window holds.  Two rows of the
#: Zipf set's 30 keys took a local AdaGrad epoch from 0.43 to 0.25-0.32 CPU seconds
#: (450,000 rows, two processes at once); a kernel constant, like
#: :data:`...psarray._scatter.AHEAD`, not a setting
AHEAD_ROWS = 2

LOGISTIC, HINGE, SQ_HINGE, SQUARED, HUBER, SOFTMAX = 0, 1, 2, 3, 4, 5
KINDS = {
    "logistic": LOGISTIC,
    "hinge": HINGE,
    "squared_hinge": SQ_HINGE,
    "squared": SQUARED,
    "huber": HUBER,
    "softmax": SOFTMAX,
}


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
def max_row_sq(indptr, data, rows):  # type: ignore[no-untyped-def]  # pragma: no cover
    """The largest squared norm ``|x_r|^2`` of the rows ``rows`` (0.0 for none)."""
    best = 0.0
    for r in rows:
        s = 0.0
        for q in range(indptr[r], indptr[r + 1]):
            s += data[q] * data[q]
        best = max(best, s)
    return best


@njit(nogil=True, cache=True)
def _low_bit(t):  # type: ignore[no-untyped-def]  # pragma: no cover
    """The position of the single set bit of ``t`` (a power of two, uint64)."""
    b = 0
    if t >> np.uint64(32):
        b += 32
        t >>= np.uint64(32)
    if t >> np.uint64(16):
        b += 16
        t >>= np.uint64(16)
    if t >> np.uint64(8):
        b += 8
        t >>= np.uint64(8)
    if t >> np.uint64(4):
        b += 4
        t >>= np.uint64(4)
    if t >> np.uint64(2):
        b += 2
        t >>= np.uint64(2)
    if t >> np.uint64(1):
        b += 1
    return b


@njit(nogil=True, cache=True)
def batch_keys(indptr, indices, rows, bits):  # type: ignore[no-untyped-def]  # pragma: no cover
    """Sorted distinct local keys of ``rows``.

    ``bits`` is a zeroed uint64 bitmap of at least ``n_keys / 64`` words, zeroed
    again on return: a key marks one bit and the keys come out in order by a scan
    of the marked words (a bitmap of 300 k keys is 37 KiB, cache-resident, where
    a mark array per key and a sort cost 4x as much).
    """
    n = 0
    lo = bits.shape[0]
    hi = -1
    for r in rows:
        for q in range(indptr[r], indptr[r + 1]):
            j = indices[q]
            w = j >> 6
            m = np.uint64(1) << np.uint64(j & 63)
            if (bits[w] & m) == 0:
                bits[w] |= m
                n += 1
                lo = min(lo, w)
                hi = max(hi, w)
    out = np.empty(n, np.int64)
    k = 0
    for w in range(lo, hi + 1):
        x = bits[w]
        if x == 0:
            continue
        bits[w] = 0
        while x != 0:
            t = x & (~x + np.uint64(1))
            out[k] = (w << 6) + _low_bit(t)
            k += 1
            x ^= t
    return out


@njit(nogil=True, cache=True)
def put_rows(W, keys, values):  # type: ignore[no-untyped-def]  # pragma: no cover
    """``W[keys] = values`` (``values`` of shape ``(len(keys), K)``, any float dtype)."""
    for i in range(keys.shape[0]):
        for k in range(W.shape[1]):
            W[keys[i], k] = values[i, k]


@njit(nogil=True, cache=True)
def grad_batch(indptr, indices, data, y, rows, W, kind, eps, has_bias, G, keys, scale):  # type: ignore[no-untyped-def]  # pragma: no cover
    """A minibatch's gradient on its ``keys`` (those of ``rows``, and the bias's):
    ``(loss sum, scale * G[keys])``, ``G`` zeroed on ``keys`` first (scratch)."""
    K = W.shape[1]
    for i in range(keys.shape[0]):
        for k in range(K):
            G[keys[i], k] = 0.0
    loss = grad_rows(indptr, indices, data, y, rows, W, kind, eps, has_bias, G)
    g = np.empty((keys.shape[0], K))
    for i in range(keys.shape[0]):
        for k in range(K):
            g[i, k] = G[keys[i], k] * scale
    return loss, g


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
    """:func:`eval_stats` over the rows ``rows`` only (``y`` indexed by row); the weights
    of the keys of the row :data:`AHEAD_ROWS` ahead are prefetched, and the CSR lines of
    rows further ahead (:func:`._ahead.prefetch_rows`)."""
    K = W.shape[1]
    st = np.zeros(N_STATS)
    hist = np.zeros((2, nbins))
    m = np.empty(K)
    width = 2.0 * AUC_RANGE / nbins
    n = rows.shape[0]
    for i in range(n):
        prefetch_rows(indptr, indices, data, rows, i)  # the CSR lines of rows further ahead
        if i + AHEAD_ROWS < n:
            ra = rows[i + AHEAD_ROWS]
            for q in range(indptr[ra], indptr[ra + 1]):
                _prefetch(W, indices[q], 0)  # type: ignore[call-arg]
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
        st[5] += lv if kind == LOGISTIC else _dloss(LOGISTIC, m[0], y[r], 0.0)[0]
        b = int((min(max(m[0], -AUC_RANGE), AUC_RANGE) + AUC_RANGE) / width)
        b = min(b, nbins - 1)
        hist[1 if pos else 0, b] += 1.0
    return st, hist
