"""The scaled SGD kernel for one output and one row per step (the CTR case).

:func:`sgd_pairs` keeps L2-only weights as ``s * VP[:, 0]`` (the decay is one
scalar product a step) with the tail average's running sums beside them in
``VP[:, 1]``, so an update touches one cache line a key.  MA-SGD's local pass
(:func:`._local_sgd.local_sgd`, through ``_local_sgd_scaled1``) and the in-place
path (:mod:`._inplace`, global features as workspace rows) both run it.

Example
-------
>>> import numpy as np
>>> ip, ix, dx = np.array([0, 1, 2]), np.array([0, 1]), np.array([1.0, 1.0])
>>> VP = np.zeros((3, 2))          # two features and the intercept; loss: log 2 + log(1 + e^0.25)
>>> loss = sgd_pairs(ip, ix, dx, np.array([1.0, -1.0]), np.array([0, 1]), VP,
...                  np.arange(2), 0, 0.0, True, 0.5, 0.0, False)
>>> bool(VP[0, 0] > 0 > VP[1, 0]), round(float(loss), 4)
(True, 1.5191)
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ._kernels import _dloss

__all__ = ["sgd_pairs"]


@njit(nogil=True, cache=True)
def sgd_pairs(  # type: ignore[no-untyped-def]  # pragma: no cover
    indptr, indices, data, y, order, VP, keys, kind, eps, has_bias, eta, alpha, average
):
    """One output, one row per step, L2 only: weights ``s * VP[:, 0]``, the tail
    average's running sums in ``VP[:, 1]`` (side by side: an update touches one cache
    line), the intercept in the last row; returns the loss sum.

    Column indices are rows of ``VP`` (local slots, or global features on the
    in-place path, :mod:`._inplace`); ``keys`` are the rows that can be touched
    (the intercept's excepted): only they are renormalised and finished at the
    end, so the workspace's other rows may hold anything.  ``VP[keys, 1]`` must be
    zero on entry.
    """
    nk = VP.shape[0]
    nkeys = keys.shape[0]
    decay = max(0.0, 1.0 - eta * alpha)
    n = order.shape[0]
    t0 = n // 2 if average else n + 1
    R = np.zeros(0)  # sums moved out when the scale is renormalised (rare)
    sc = 1.0
    C = 0.0
    b = VP[nk - 1, 0] if has_bias else 0.0
    bsum = 0.0
    loss = 0.0
    for t in range(n):
        on = t >= t0
        if sc < 1e-9 or decay == 0.0:
            if on and R.shape[0] == 0:
                R = np.zeros(nkeys)
            for i in range(nkeys):
                j = keys[i]
                if on:
                    R[i] += C * VP[j, 0] - VP[j, 1]
                    VP[j, 1] = 0.0
                VP[j, 0] *= sc
            C = 0.0
            sc = 1.0
        r = order[t]
        lo, hi = indptr[r], indptr[r + 1]
        acc = 0.0
        for q in range(lo, hi):
            acc += VP[indices[q], 0] * data[q]
        lv, d = _dloss(kind, b + sc * acc, y[r], eps)
        loss += lv
        g = -eta * d / sc
        if on:
            gc = g * C
            for q in range(lo, hi):
                j = indices[q]
                x = data[q]
                VP[j, 0] += g * x
                VP[j, 1] += gc * x
        else:
            for q in range(lo, hi):
                VP[indices[q], 0] += g * data[q]
        if has_bias:
            b -= eta * d
        sc *= decay
        if on:
            C += sc
            bsum += b
    if average and n > t0:
        for i in range(nkeys):
            j = keys[i]
            rs = R[i] if R.shape[0] else 0.0
            VP[j, 0] = (rs + C * VP[j, 0] - VP[j, 1]) / (n - t0)
        if has_bias:
            VP[nk - 1, 0] = bsum / (n - t0)
    else:
        for i in range(nkeys):
            VP[keys[i], 0] *= sc
        if has_bias:
            VP[nk - 1, 0] = b
    return loss
