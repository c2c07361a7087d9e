"""Local AdaGrad for one output and one row a step on a 16-byte-a-key workspace.

The CTR case of :func:`._adaptive.adagrad_sgd` (and of the in-place path,
:mod:`._inplace`): each touched key's state is one 16-byte record of a
``(n, 2)`` float64 workspace ``ws``, so a row's keys are at most one cache line
each and twice as many keys stay in cache as with the 32-byte record before
(weight, sum, decay rate, last step, all float64):

* ``ws[j, 0]``: the key's squared-gradient sum ``G`` (float64: a frequent
  feature's sum reaches ~1e5 and must still take its 1e-4 increments);
* ``ws[j, 1]`` read as two float32 (``ws.view(np.float32)[j, 2:4]``): the
  weight during the pass and the step of the key's last touch (exact up to
  :data:`MAX_ROWS`; longer passes run in chunks of that many rows).

The per-step L2 decay's log-rate is recomputed from ``G`` at a touch
(``log(1 - alpha eta / sqrt(G))``, exact float64 arithmetic, as before) rather than
stored.  On 450,000 Zipf rows of 30 keys (one task's share of the calibration set,
three epochs, one process on the loaded 2-core VM) an epoch took 0.30-0.32 CPU
seconds against 0.34-0.36 for the 32-byte kernel.

.. warning:: The weights are float32 *during a pass*: :func:`put` rounds them in,
   and :func:`take` adds the pass's change (the float32 difference) to the
   float64 weights it started from, so a key no row touched comes back exactly and
   a touched one carries the change with float32's ~7 significant digits (as
   Vowpal Wabbit's weights).  Sums, steps, decays and the intercept stay float64;
   the result is deterministic for a ``random_state`` on any IEEE machine.

Example
-------
>>> import numpy as np
>>> ip, ix, dx = np.array([0, 1, 2]), np.array([0, 1]), np.array([1.0, 1.0])
>>> W, G = np.zeros((3, 1)), np.zeros((3, 1))          # two features and the bias
>>> ws, slots = np.empty((3, 2)), np.arange(3)
>>> loss = adagrad_ws(ip, ix, dx, np.array([1.0, -1.0]), np.array([0, 1]), ws, slots,
...                   W, G, LOGISTIC, 0.0, True, 0.5, 0.0, 0.0)
>>> bool(W[0, 0] > 0 > W[1, 0]), float(G[0, 0])         # the first step: eta * sign(g)
(True, 0.25)
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from ...psarray._scatter import _prefetch
from ._ahead import prefetch_rows
from ._kernels import AHEAD_ROWS, LOGISTIC, _dloss

__all__ = ["LOGISTIC", "MAX_ROWS", "adagrad_delta", "adagrad_ws", "put", "take", "take_delta"]

#: rows of one kernel call: the last-touch step is a float32, exact up to 2**24
MAX_ROWS = 1 << 24


def adagrad_ws(  # type: ignore[no-untyped-def]
    indptr, indices, data, y, order, ws, slots, W, G, kind, eps, has_bias, eta, alpha, l1,
    chunk=MAX_ROWS,
):  # fmt: skip
    """Local AdaGrad over the rows ``order`` from and into ``W`` and ``G`` (``(n, 1)``,
    the intercept's last with ``has_bias``) through the workspace ``ws`` (``(m, 2)``
    float64, any content): ``W[i]`` is key ``slots[i]``, the CSR column indices are
    rows of ``ws``, the intercept's row is the last.  Returns the loss sum.

    The rows go ``chunk`` (at most :data:`MAX_ROWS`) at a time, every key brought up
    to date between two: the same updates with L2 or L1 alone (a gap's decay or
    shrinkage split in two); with both, a gap's catch-up decays before it shrinks, so
    a cut moves a weight by about the product of the two (as the lazy scheme itself
    does against per-step updates)."""
    loss, b = _pass(
        indptr, indices, data, y, order, ws, slots, W, G, kind, eps, has_bias, eta, alpha, l1,
        chunk,
    )  # fmt: skip
    take(ws, slots, W, G)
    if has_bias:
        W[-1, 0] = b
    return loss


def adagrad_delta(  # type: ignore[no-untyped-def]
    indptr, indices, data, y, order, ws, slots, W0, G0, kind, eps, has_bias, eta, alpha, l1,
    share, chunk=MAX_ROWS,
):  # fmt: skip
    """:func:`adagrad_ws` from ``W0`` and ``G0`` (left unchanged) that returns what
    ``'ma-sgd'`` pushes: ``(loss sum, dW, dG)``, the pass's changes of the weights and
    sums times ``share`` (the task's share of the round's rows), made in one compiled
    pass over the workspace (no copies of ``W0`` / ``G0``, no array arithmetic after).

    A weight's change is the float32 difference itself (``adagrad_ws`` then
    ``(W - W0) * share`` adds it to ``W0`` and takes ``W0`` off again, a rounding
    of ``W0``'s size more); the sums' and the intercept's are the same to the bit."""
    loss, b = _pass(
        indptr, indices, data, y, order, ws, slots, W0, G0, kind, eps, has_bias, eta, alpha, l1,
        chunk,
    )  # fmt: skip
    dW = np.empty_like(W0)
    dG = np.empty_like(G0)
    take_delta(ws, slots, W0, G0, float(share), dW, dG)
    if has_bias:
        dW[-1, 0] = (b - W0[-1, 0]) * share
    return loss, dW, dG


def _pass(  # type: ignore[no-untyped-def]
    indptr, indices, data, y, order, ws, slots, W, G, kind, eps, has_bias, eta, alpha, l1, chunk
):  # fmt: skip
    """``W`` and ``G`` into the workspace, then the rows ``chunk`` at a time;
    returns ``(loss sum, intercept)``."""
    put(ws, slots, W, G)
    nk = slots.shape[0] - (1 if has_bias else 0)
    b = float(W[-1, 0]) if has_bias else 0.0
    w32 = ws.view(np.float32)
    loss = 0.0
    step = min(int(chunk), MAX_ROWS)
    for a in range(0, max(order.shape[0], 1), step):
        part = order[a : a + step]
        lv, b = _adagrad16(
            indptr, indices, data, y, part, ws, w32, slots[:nk], kind, eps, has_bias, eta,
            alpha, l1, b,
        )  # fmt: skip
        loss += lv
    return float(loss), b


@njit(nogil=True, cache=True)
def put(ws, slots, W, G):  # type: ignore[no-untyped-def]  # pragma: no cover
    """``G[i]`` into ``ws[slots[i], 0]`` (unless ``G`` is empty) and ``W[i]`` rounded to
    float32 into the record's weight."""
    w32 = ws.view(np.float32)
    both = G.shape[0] > 0
    for i in range(slots.shape[0]):
        j = slots[i]
        if both:
            ws[j, 0] = G[i, 0]
        w32[j, 2] = W[i, 0]


@njit(nogil=True, cache=True)
def take(ws, slots, W, G):  # type: ignore[no-untyped-def]  # pragma: no cover
    """The inverse of :func:`put`: ``G[i]`` back, and ``W[i]`` plus the change of its
    float32 copy (an untouched weight comes back exactly)."""
    w32 = ws.view(np.float32)
    for i in range(slots.shape[0]):
        j = slots[i]
        W[i, 0] += float(w32[j, 2]) - float(np.float32(W[i, 0]))
        G[i, 0] = ws[j, 0]


@njit(nogil=True, cache=True)
def take_delta(ws, slots, W0, G0, share, dW, dG):  # type: ignore[no-untyped-def]  # pragma: no cover
    """``dW[i]`` = ``share`` times the change of key ``slots[i]``'s float32 weight from
    ``W0[i]`` rounded, ``dG[i]`` = ``share`` times its sum's change from ``G0[i]``."""
    w32 = ws.view(np.float32)
    for i in range(slots.shape[0]):
        j = slots[i]
        dW[i, 0] = (float(w32[j, 2]) - float(np.float32(W0[i, 0]))) * share
        dG[i, 0] = (ws[j, 0] - G0[i, 0]) * share


@njit(nogil=True, cache=True, inline="always")
def _log_keep(x):  # type: ignore[no-untyped-def]  # pragma: no cover
    """``log(1 - min(x, 0.5))`` for ``x >= 0``: near 0 (the common case: ``x`` is a
    step times ``alpha``) by its series to ``x**3``, error below 3e-13."""
    if x < 1e-3:
        return -x * (1.0 + x * (0.5 + x * (1.0 / 3.0)))
    return math.log1p(-min(x, 0.5))


@njit(nogil=True, cache=True, inline="always")
def _decay(x):  # type: ignore[no-untyped-def]  # pragma: no cover
    """``exp(x)`` for ``x <= 0``; for ``x > -0.01`` (most touches of a Zipf set: a
    key's gap times its step times ``alpha``) by its series to ``x**5``, relative
    error below 2e-15 (the series from ``-1e-4`` only left the mid-frequency keys
    on ``exp``: ~5 % of the kernel's time)."""
    if x > -1e-2:
        return 1.0 + x * (1.0 + x * (0.5 + x * (1.0 / 6.0 + x * (1.0 / 24.0 + x * (1.0 / 120.0)))))
    return math.exp(x)


@njit(nogil=True, cache=True, inline="always")
def _shrink(w, c):  # type: ignore[no-untyped-def]  # pragma: no cover
    """``w`` moved ``c >= 0`` towards zero, stopping there (L1's proximal step)."""
    return w - c if w > c else (w + c if w < -c else 0.0)


@njit(nogil=True, cache=True, inline="always")
def _catch(w, gap, g, eta, alpha, l1):  # type: ignore[no-untyped-def]  # pragma: no cover
    """Weight ``w`` after ``gap`` skipped steps at the adaptive step of sum ``g``:
    L2 decay ``(1 - alpha r) ** gap`` and L1 shrinkage ``r l1 gap``."""
    r = eta / math.sqrt(g) if g > 0.0 else eta
    if alpha > 0.0:
        w *= _decay(gap * _log_keep(r * alpha))
    if l1 > 0.0:
        w = _shrink(w, r * l1 * gap)
    return w


# FMA contraction only (no reassociation, no finite-math assumptions)
@njit(nogil=True, cache=True, fastmath={"contract"})
def _adagrad16(  # type: ignore[no-untyped-def]  # pragma: no cover
    indptr, indices, data, y, order, ws, w32, keys, kind, eps, has_bias, eta, alpha, l1, b
):
    """One pass of at most :data:`MAX_ROWS` rows on the records of ``ws`` (``w32`` its
    float32 view); the intercept ``b`` comes in and goes out as a float64.  Returns
    ``(loss sum, b)``; every key of ``keys`` is brought up to date at the end."""
    nk = ws.shape[0]
    lazy = alpha > 0.0 or l1 > 0.0
    for u in range(keys.shape[0]):
        w32[keys[u], 3] = 0.0
    gb = ws[nk - 1, 0] if has_bias else 0.0
    loss = 0.0
    n_rows = order.shape[0]
    for t in range(n_rows):
        prefetch_rows(indptr, indices, data, order, t)  # the CSR lines of rows further ahead
        if t + AHEAD_ROWS < n_rows:  # the records of a row ahead (a hint, never a fault)
            ra = order[t + AHEAD_ROWS]
            for q in range(indptr[ra], indptr[ra + 1]):
                _prefetch(ws, indices[q], 0)  # type: ignore[call-arg]
        row = order[t]
        lo, hi = indptr[row], indptr[row + 1]
        acc = b
        tf = np.float32(t)
        for q in range(lo, hi):
            j = indices[q]
            w = float(w32[j, 2])
            if lazy:  # the decay and shrinkage of the steps since its last touch
                w = _catch(w, float(tf - w32[j, 3]), ws[j, 0], eta, alpha, l1)
                w32[j, 2] = w
                w32[j, 3] = tf
            acc += w * data[q]
        lv, d = _dloss(kind, acc, y[row], eps)
        loss += lv
        if d != 0.0:
            for q in range(lo, hi):
                j = indices[q]
                g = d * data[q]
                if g != 0.0:
                    s = ws[j, 0] + g * g
                    ws[j, 0] = s
                    w32[j, 2] = float(w32[j, 2]) - eta / math.sqrt(s) * g
            if has_bias:
                gb += d * d
                b -= eta * d / math.sqrt(gb)
    if lazy:
        n = np.float32(n_rows)
        for u in range(keys.shape[0]):
            j = keys[u]
            w32[j, 2] = _catch(float(w32[j, 2]), float(n - w32[j, 3]), ws[j, 0], eta, alpha, l1)
    if has_bias:
        ws[nk - 1, 0] = gb
    return loss, b
