"""Weighted quantile summaries of a partition's columns: mergeable, compiled.

Each training task summarises the present values of every feature of its rows
(:func:`local_summaries`): per feature, the sorted distinct values with their
counts, pruned to at most ``S`` points when there are more.  A pruned point
keeps the weight of every value it stands for (the values since the previous
kept point), so the rank of any kept point is exact and the rank of any value
is off by at most ``W / S`` (``W`` the feature's present rows).  Summaries
merge by union (:func:`cuts_from_points`: sort, add the weights of equal
values), which is how the PS turns every task's summary of a feature into the
feature's bin edges (``_psfs.MergeSketches``).

Cut points (bin edges): a feature with at most ``max_bins`` distinct values
gets one bin per value, cut half-way between neighbours (as LightGBM does);
otherwise the cuts fall half-way between the points at ranks ``q W / max_bins``
and their successors.  A value ``v`` is in bin ``#{cuts < v}``, so
``bin(v) <= t`` exactly when ``v <= cuts[t]``: the trees test raw values
against the same cut.

Example
-------
>>> import numpy as np
>>> ptr, v, w = local_summaries(np.array([0, 2, 3, 4]), np.array([0, 1, 0, 0]),
...                             np.array([1.0, 5.0, 2.0, 1.0], np.float32),
...                             np.arange(3), 2, False, 64)
>>> ptr.tolist(), v.tolist(), w.tolist()
([0, 2, 3], [1.0, 2.0, 5.0], [2.0, 1.0, 1.0])
>>> cuts_of(v[:2], w[:2], 255).tolist()
[1.5]
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["cuts_from_points", "cuts_of", "local_summaries", "prune"]


@njit(nogil=True, cache=True)
def _prune_into(v, w, S, out_v, out_w, o):  # type: ignore[no-untyped-def]
    """Write at most ``S`` points of sorted distinct ``v`` (weights ``w``) at ``o``."""
    n = v.shape[0]
    if n <= S:
        for i in range(n):  # loops, not slice copies: those add seconds of compilation
            out_v[o + i] = v[i]
            out_w[o + i] = w[i]
        return o + n
    total = 0.0
    for i in range(n):
        total += w[i]
    step = total / (S - 1)
    acc = 0.0
    since = 0.0
    target = step
    k = o
    for i in range(n):
        acc += w[i]
        since += w[i]
        if i == 0 or i == n - 1 or acc >= target:
            out_v[k] = v[i]
            out_w[k] = since
            k += 1
            since = 0.0
            while target <= acc:
                target += step
    return k


@njit(nogil=True, cache=True)
def _gather(indptr, indices, data, rows, n_features, sample):  # type: ignore[no-untyped-def]
    """The present values of ``rows`` grouped by feature (row order), ``sample`` at most.

    Returns ``(ptr, vals, count, stored)``: feature ``f``'s kept values are
    ``vals[ptr[f]:ptr[f + 1]]`` (an evenly spaced ``sample`` of its ``count[f]``
    present values when there are more), ``stored[f]`` its stored entries.
    """
    count = np.zeros(n_features, np.int64)
    stored = np.zeros(n_features, np.int64)
    for k in range(rows.shape[0]):
        r = rows[k]
        for e in range(indptr[r], indptr[r + 1]):
            f = indices[e]
            stored[f] += 1
            if not np.isnan(data[e]):
                count[f] += 1
    start = np.zeros(n_features + 1, np.int64)
    for f in range(n_features):
        start[f + 1] = start[f] + count[f]
    vals = np.empty(start[n_features], np.float64)
    fill = start[:-1].copy()
    for k in range(rows.shape[0]):
        r = rows[k]
        for e in range(indptr[r], indptr[r + 1]):
            x = data[e]
            if not np.isnan(x):
                f = indices[e]
                vals[fill[f]] = x
                fill[f] += 1
    if sample <= 0:
        return start, vals, count, stored
    ptr = np.zeros(n_features + 1, np.int64)
    o = 0
    for f in range(n_features):  # in place: a feature's picks never pass its own start
        c = count[f]
        a = start[f]
        if c > sample:
            for i in range(sample):
                vals[o + i] = vals[a + (i * c) // sample]
            o += sample
        else:
            for i in range(c):
                vals[o + i] = vals[a + i]
            o += c
        ptr[f + 1] = o
    return ptr, vals[:o], count, stored


@njit(nogil=True, cache=True)
def _runs(vals, wts, a, b, weighted, buf_v, buf_w):  # type: ignore[no-untyped-def]
    """The distinct values of sorted ``vals[a:b]`` into ``buf_v`` with their summed
    weights (``wts``, or 1 a value unless ``weighted``) into ``buf_w``; their number."""
    m = 0
    for i in range(a, b):
        w = wts[i] if weighted else 1.0
        if m > 0 and buf_v[m - 1] == vals[i]:
            buf_w[m - 1] += w
        else:
            buf_v[m] = vals[i]
            buf_w[m] = w
            m += 1
    return m


@njit(nogil=True, cache=True)
def _summarise(ptr, vals, count, stored, n_rows, zero_is_value, S):  # type: ignore[no-untyped-def]
    """Per feature of sorted ``vals`` segments: distinct values, weights, pruned to ``S``."""
    F = ptr.shape[0] - 1
    cap = 1
    for f in range(F):
        cap = max(cap, ptr[f + 1] - ptr[f] + 1)
    buf_v = np.empty(cap, np.float64)
    buf_w = np.empty(cap, np.float64)
    out_v = np.empty(min(F * S, ptr[F] + F) + 1, np.float64)
    out_w = np.empty(out_v.shape[0], np.float64)
    optr = np.zeros(F + 1, np.int64)
    o = 0
    for f in range(F):
        a = ptr[f]
        b = ptr[f + 1]
        m = _runs(vals, vals, a, b, False, buf_v, buf_w)
        if b - a < count[f]:  # sampled: each pick weighs count / sample
            scale = count[f] / (b - a)
            for i in range(m):
                buf_w[i] *= scale
        zeros = float(n_rows - stored[f]) if zero_is_value else 0.0
        if zeros > 0:  # put the implicit zeros in their place
            pos = 0
            while pos < m and buf_v[pos] < 0.0:
                pos += 1
            if pos < m and buf_v[pos] == 0.0:
                buf_w[pos] += zeros
            else:
                for i in range(m, pos, -1):
                    buf_v[i] = buf_v[i - 1]
                    buf_w[i] = buf_w[i - 1]
                buf_v[pos] = 0.0
                buf_w[pos] = zeros
                m += 1
        o = _prune_into(buf_v[:m], buf_w[:m], S, out_v, out_w, o)
        optr[f + 1] = o
    return optr, out_v[:o].copy(), out_w[:o].copy()


def local_summaries(
    indptr: np.ndarray,
    indices: np.ndarray,
    data: np.ndarray,
    rows: np.ndarray,
    n_features: int,
    zero_is_value: bool,
    S: int,
    sample: int = 0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per feature, the pruned summary of the present values in ``rows`` of a CSR.

    NaN values are missing.  With ``zero_is_value`` the rows' unstored entries
    are the value 0 (a dense input); otherwise they are missing (a sparse one).
    A feature with more than ``sample`` (> 0) present values is summarised from
    an evenly spaced ``sample`` of them (in row order), each weighing
    ``count / sample``.  Returns ``(ptr, values, weights)``: feature ``f``'s
    points are ``values[ptr[f]:ptr[f + 1]]`` (float64, ascending).

    Values are gathered and summarised in numba (``nogil``); each feature's
    segment is sorted by numpy in between (numba's own sort would add seconds
    of compilation to every fresh process).
    """
    rows = np.asarray(rows, np.int64)
    ptr, vals, count, stored = _gather(indptr, indices, data, rows, int(n_features), int(sample))
    for f in np.flatnonzero(np.diff(ptr) > 1):
        vals[ptr[f] : ptr[f + 1]].sort()
    return _summarise(ptr, vals, count, stored, int(rows.shape[0]), bool(zero_is_value), int(S))


def prune(v: np.ndarray, w: np.ndarray, S: int) -> tuple[np.ndarray, np.ndarray]:
    """At most ``S`` points of one sorted distinct summary (weights kept)."""
    out_v = np.empty(min(len(v), S), np.float64)
    out_w = np.empty(len(out_v), np.float64)
    k = _prune_into(np.asarray(v, np.float64), np.asarray(w, np.float64), S, out_v, out_w, 0)
    return out_v[:k], out_w[:k]


@njit(nogil=True, cache=True)
def cuts_of(v, w, max_bins):  # type: ignore[no-untyped-def]
    """Cut points of one feature from its sorted distinct points ``v`` (weights ``w``)."""
    n = v.shape[0]
    if n <= 1:
        return np.empty(0, np.float64)
    if n <= max_bins:
        out = np.empty(n - 1, np.float64)
        for i in range(n - 1):
            out[i] = v[i] + (v[i + 1] - v[i]) / 2.0
        return out
    total = 0.0
    for i in range(n):
        total += w[i]
    out = np.empty(max_bins - 1, np.float64)
    k = 0
    acc = 0.0
    q = 1
    for i in range(n - 1):
        acc += w[i]
        if acc >= q * total / max_bins:
            out[k] = v[i] + (v[i + 1] - v[i]) / 2.0
            k += 1
            while q < max_bins and acc >= q * total / max_bins:
                q += 1
            if k == max_bins - 1:
                break
    return out[:k].copy()


@njit(nogil=True, cache=True)
def cuts_from_points(feat, vals, wts, n_features, max_bins):  # type: ignore[no-untyped-def]
    """Merge summary points of many tasks into each feature's cuts.

    ``feat, vals, wts`` are points of any tasks, sorted by ``(feat, vals)``.
    Returns ``(n_bins, cut_ptr, cuts)``: feature ``f`` has ``n_bins[f]`` bins
    (0 when it has no present value) and cuts ``cuts[cut_ptr[f]:cut_ptr[f+1]]``.
    """
    n = feat.shape[0]
    n_bins = np.zeros(n_features, np.int64)
    cut_ptr = np.zeros(n_features + 1, np.int64)
    cuts = np.empty(n, np.float64)
    buf_v = np.empty(n, np.float64)
    buf_w = np.empty(n, np.float64)
    i = 0
    o = 0
    for f in range(n_features):
        e = i
        while e < n and feat[e] == f:
            e += 1
        m = _runs(vals, wts, i, e, True, buf_v, buf_w)
        i = e
        if m > 0:
            c = cuts_of(buf_v[:m], buf_w[:m], max_bins)
            for j in range(c.shape[0]):
                cuts[o + j] = c[j]
            o += c.shape[0]
            n_bins[f] = c.shape[0] + 1
        cut_ptr[f + 1] = o
    return n_bins, cut_ptr, cuts[:o].copy()
