"""Compiled preparation of a task's rows: pruned keys, local indices, the shuffled copy.

A training task of a sparse-feature model (linear models, factorization
machines) works on its partition's rows with *local* column indices (slots of
a dense ``(n_keys, K)`` copy of the parameters it pulls for its own keys
only).  Turning the partition's chunks into that form is one
pass to mark the used features in a bitmap and one pass that copies every row
straight to its place in the (shuffled) training or validation arrays while
rewriting its indices, so no concatenated or intermediate copy of the rows is
ever made (it used to be three: concatenate, localise, gather).
``benchmarks/bench_prep.py`` times each phase.

**Hot slots.**  With ``hot > 0`` the most frequent features (counted on a
sample of the entries, at most ``hot`` of them) get the first slots, and the
others follow in key order.  On power-law data these slots take
most of the accesses of SGD's inner loop and stay in the CPU cache, instead of
being spread over the whole ``n_keys`` array.  ``pos[slot]`` then gives the
slot's position in the sorted key list the PS is addressed with.

A feature's slot is computed from bitmaps (one bit per feature, 1.25 MB for
10 M features) and per-word prefix counts: ``count[word] + popcount(bits below
it)``, the hot and the cold bitmap and their counts packed in one 32-byte row
per word (:func:`_table`), so a lookup reads one cache line.

Example
-------
>>> import numpy as np
>>> keys, hot_bits, used_bits = used_keys([np.array([7, 2, 7, 7])], 10, hot=0)
>>> keys.tolist()
[2, 7]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numba import njit

__all__ = ["place_rows", "slot_positions", "used_keys"]


@njit(nogil=True, cache=True)
def _popcount(x):  # type: ignore[no-untyped-def]  # pragma: no cover
    x = x - ((x >> np.uint64(1)) & np.uint64(0x5555555555555555))
    x = (x & np.uint64(0x3333333333333333)) + ((x >> np.uint64(2)) & np.uint64(0x3333333333333333))
    x = (x + (x >> np.uint64(4))) & np.uint64(0x0F0F0F0F0F0F0F0F)
    return np.int64((x * np.uint64(0x0101010101010101)) >> np.uint64(56))


@njit(nogil=True, cache=True)
def _mark(indices, bits):  # type: ignore[no-untyped-def]  # pragma: no cover
    one = np.uint64(1)
    for q in range(indices.shape[0]):
        j = indices[q]
        bits[j >> 6] |= one << np.uint64(j & 63)


@njit(nogil=True, cache=True)
def _sample(indices, step, counts):  # type: ignore[no-untyped-def]  # pragma: no cover
    for q in range(0, indices.shape[0], step):
        j = indices[q]
        if counts[j] < 255:
            counts[j] += 1


@njit(nogil=True, cache=True)
def _hot_bits(counts, threshold, used, hot):  # type: ignore[no-untyped-def]  # pragma: no cover
    one = np.uint64(1)
    for j in range(counts.shape[0]):
        if counts[j] >= threshold:
            hot[j >> 6] |= one << np.uint64(j & 63)
    for w in range(used.shape[0]):
        hot[w] &= used[w]


@njit(nogil=True, cache=True)
def _prefix(bits, base):  # type: ignore[no-untyped-def]  # pragma: no cover
    """Per-word prefix counts of ``bits`` starting at ``base``; returns ``(count, total)``."""
    count = np.empty(bits.shape[0], np.int64)
    n = base
    for w in range(bits.shape[0]):
        count[w] = n
        n += _popcount(bits[w])
    return count, n - base


@njit(nogil=True, cache=True)
def _keys_of(bits, n):  # type: ignore[no-untyped-def]  # pragma: no cover
    one = np.uint64(1)
    keys = np.empty(n, np.int64)
    k = 0
    for w in range(bits.shape[0]):
        b = bits[w]
        while b:
            low = b & (~b + one)  # lowest set bit
            keys[k] = (w << 6) + _popcount(low - one)
            k += 1
            b ^= low
    return keys


@njit(nogil=True, cache=True)
def _table(hot, hot_count, cold, cold_count):  # type: ignore[no-untyped-def]  # pragma: no cover
    """Per 64-feature word: hot bits, cold bits, first hot slot, first cold slot (one
    32-byte row, so a feature's slot reads one cache line, not four)."""
    tab = np.empty((hot.shape[0], 4), np.uint64)
    for w in range(hot.shape[0]):
        tab[w, 0] = hot[w]
        tab[w, 1] = cold[w]
        tab[w, 2] = np.uint64(hot_count[w])
        tab[w, 3] = np.uint64(cold_count[w])
    return tab


@njit(nogil=True, cache=True)
def _slot(j, tab):  # type: ignore[no-untyped-def]  # pragma: no cover
    one = np.uint64(1)
    w = j >> 6
    bit = one << np.uint64(j & 63)
    below = bit - one
    hb = tab[w, 0]
    # both ranks and a select, no branch: whether a feature is hot is unpredictable
    h = np.int64(tab[w, 2]) + _popcount(hb & below)
    c = np.int64(tab[w, 3]) + _popcount(tab[w, 1] & below)
    return h if hb & bit else c


@njit(nogil=True, cache=True)
def _place(  # type: ignore[no-untyped-def]  # pragma: no cover
    indptr, indices, data, dest, tr_ptr, tr_idx, tr_val, va_ptr, va_idx, va_val, tab
):
    for r in range(indptr.shape[0] - 1):
        k = dest[r]
        a = indptr[r]
        n = indptr[r + 1] - a
        if k >= 0:
            o = tr_ptr[k]
            for i in range(n):
                tr_idx[o + i] = _slot(indices[a + i], tab)
                tr_val[o + i] = data[a + i]
        else:
            o = va_ptr[-k - 1]
            for i in range(n):
                va_idx[o + i] = _slot(indices[a + i], tab)
                va_val[o + i] = data[a + i]


def used_keys(
    pieces: Sequence[np.ndarray], n_features: int, hot: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The sorted distinct keys of ``pieces`` (index arrays), and the hot and used bitmaps.

    ``hot``: at most this many features are marked hot: the most frequent in a
    sample of about ``64 * hot`` entries (seen at least twice in it).
    """
    nw = (n_features + 63) >> 6
    used = np.zeros(nw, np.uint64)
    for ix in pieces:
        _mark(ix, used)
    hot_bits = np.zeros(nw, np.uint64)
    if hot > 0:
        counts = np.zeros(n_features, np.uint8)
        sample = max(1, sum(ix.shape[0] for ix in pieces) // (64 * hot))
        for ix in pieces:
            _sample(ix, sample, counts)
        hist = np.bincount(counts, minlength=256)
        above = np.cumsum(hist[::-1])[::-1]  # above[t]: features with count >= t
        ok = np.flatnonzero(above[2:] <= hot)
        _hot_bits(counts, int(ok[0]) + 2 if ok.size else 255, used, hot_bits)
    _c, n = _prefix(used, 0)
    return _keys_of(used, n), hot_bits, used


def slot_positions(keys: np.ndarray, hot_bits: np.ndarray) -> np.ndarray | None:
    """``pos[slot]``: the position in ``keys`` (sorted) of each slot's key; None if the
    slots are in key order (no hot features)."""
    if not hot_bits.any():
        return None
    return _positions(keys, hot_bits)  # type: ignore[no-any-return]


@njit(nogil=True, cache=True)
def _positions(keys, hot_bits):  # type: ignore[no-untyped-def]  # pragma: no cover
    one = np.uint64(1)
    n_hot = 0
    for i in range(keys.shape[0]):
        j = keys[i]
        if hot_bits[j >> 6] & (one << np.uint64(j & 63)):
            n_hot += 1
    pos = np.empty(keys.shape[0], np.int64)
    h, c = 0, n_hot
    for i in range(keys.shape[0]):
        j = keys[i]
        if hot_bits[j >> 6] & (one << np.uint64(j & 63)):
            pos[h] = i
            h += 1
        else:
            pos[c] = i
            c += 1
    return pos


def place_rows(
    pieces: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]],
    dest: Sequence[np.ndarray],
    train_lengths: np.ndarray,
    val_lengths: np.ndarray,
    hot_bits: np.ndarray,
    used_bits: np.ndarray,
    index_dtype: np.dtype[Any] | type = np.int32,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Copy every row of ``pieces`` (``(indptr, indices, data)``) to its place, localised.

    ``dest[p][r]`` is the training row ``k >= 0`` or the validation row ``-1 - k``
    of row ``r`` of piece ``p``.  Returns the training and validation
    ``(indptr, indices, data)``; indices are slots (hot features first).
    """
    tr_ptr = np.zeros(train_lengths.shape[0] + 1, np.int64)
    np.cumsum(train_lengths, out=tr_ptr[1:])
    va_ptr = np.zeros(val_lengths.shape[0] + 1, np.int64)
    np.cumsum(val_lengths, out=va_ptr[1:])
    dt = np.result_type(*[v.dtype for _p, _i, v in pieces]) if pieces else np.float64
    tr_idx: np.ndarray = np.empty(int(tr_ptr[-1]), index_dtype)
    tr_val = np.empty(int(tr_ptr[-1]), dt)
    va_idx: np.ndarray = np.empty(int(va_ptr[-1]), index_dtype)
    va_val = np.empty(int(va_ptr[-1]), dt)
    hot_count, n_hot = _prefix(hot_bits, 0)
    cold = used_bits & ~hot_bits
    cold_count, _n = _prefix(cold, n_hot)
    tab = _table(hot_bits, hot_count, cold, cold_count)
    for (ptr, ix, val), d in zip(pieces, dest, strict=True):
        _place(ptr, ix, val, d, tr_ptr, tr_idx, tr_val, va_ptr, va_idx, va_val, tab)
    return tr_ptr, tr_idx, tr_val, va_ptr, va_idx, va_val
