"""Ratings with a planted low-rank structure (tests, benchmarks, the notebook).

:func:`planted_ratings` draws users and items with power-law activity and
popularity (as real rating data: a few heavy users, a long tail of rare
items), rates each pair with a biased rank-``rank`` model plus noise and clips
to ``[lo, hi]``.  Everything follows from ``seed``; nothing is downloaded.

How it is drawn, fast enough for the issue's Netflix shape (100 M ratings in
well under a minute on two cores): the number of ratings of each user is one
multinomial draw over the activities (as if every rating drew its user),
capped at half the items; then a compiled loop draws each user's distinct
items from the popularity (inverse CDF, a repeat drawn again) and rates them.
Every user has its own random stream (a counter-based ``splitmix64`` keyed by
``seed`` and the user), so the users are drawn in chunks on any number of
threads with the same result.

Example
-------
>>> df = planted_ratings(n_users=50, n_items=20, n_ratings=300, seed=0)
>>> list(df.columns), len(df) <= 300, bool(df.rating.between(1, 5).all())
(['user', 'item', 'rating'], True, True)
>>> bool(df.duplicated(['user', 'item']).any())
False
>>> bool(df.equals(planted_ratings(n_users=50, n_items=20, n_ratings=300, seed=0)))
True
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from numba import njit, prange

__all__ = ["planted_ratings"]

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


@njit(nogil=True, cache=True)
def _mix(z):  # type: ignore[no-untyped-def]
    """splitmix64's finaliser (a bijection of uint64 with good avalanche)."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@njit(nogil=True, cache=True)
def _uniform(state):  # type: ignore[no-untyped-def]
    """The next state and a uniform in ``(0, 1)`` (53 bits)."""
    state = state + _GOLDEN
    x = _mix(state) >> np.uint64(11)
    return state, (np.float64(x) + 0.5) * (1.0 / 9007199254740992.0)


@njit(nogil=True, cache=True)
def _user(u, seed, start, counts, cdf, P, Q, bu, bi, mid, noise, lo, hi, out_i, out_r, seen):  # type: ignore[no-untyped-def]
    """User ``u``'s ``counts[u]`` distinct items (inverse CDF of ``cdf``, a repeat
    drawn again), rated, written from ``start[u]`` (``seen``: the items' last user)."""
    n_items = cdf.shape[0]
    state = _mix(np.uint64(seed) * _GOLDEN + np.uint64(u) + np.uint64(1))
    pos = start[u]
    end = pos + counts[u]
    while pos < end:
        state, x = _uniform(state)
        i = min(np.searchsorted(cdf, x * cdf[n_items - 1], side="right"), n_items - 1)
        if seen[i] == u:
            continue
        seen[i] = u
        state, a = _uniform(state)
        state, b = _uniform(state)
        v = mid + bu[u] + bi[i]
        for f in range(P.shape[1]):
            v += P[u, f] * Q[i, f]
        v += noise * np.sqrt(-2.0 * np.log(a)) * np.cos(2.0 * np.pi * b)
        out_i[pos] = i
        out_r[pos] = min(max(v, lo), hi)
        pos += 1


@njit(nogil=True, cache=True)
def _draw(seed, start, counts, cdf, P, Q, bu, bi, mid, noise, lo, hi, out_i, out_r):  # type: ignore[no-untyped-def]
    """Every user's ratings on one thread (small sets: no parallel loop to compile)."""
    seen = np.full(cdf.shape[0], -1, np.int64)
    for u in range(counts.shape[0]):
        _user(u, seed, start, counts, cdf, P, Q, bu, bi, mid, noise, lo, hi, out_i, out_r, seen)


@njit(nogil=True, cache=True, parallel=True)
def _draw_parallel(seed, start, counts, cdf, P, Q, bu, bi, mid, noise, lo, hi, out_i, out_r):  # type: ignore[no-untyped-def]
    """Every user's ratings, chunks of users on all threads (the same result)."""
    n_users = counts.shape[0]
    chunk = 4096
    for c in prange((n_users + chunk - 1) // chunk):
        seen = np.full(cdf.shape[0], -1, np.int64)
        for u in range(c * chunk, min(n_users, (c + 1) * chunk)):
            _user(u, seed, start, counts, cdf, P, Q, bu, bi, mid, noise, lo, hi, out_i, out_r, seen)


PARALLEL_FROM = 2_000_000  # ratings


def planted_ratings(
    n_users: int,
    n_items: int,
    n_ratings: int,
    seed: int = 0,
    rank: int = 10,
    lo: float = 1.0,
    hi: float = 5.0,
) -> pd.DataFrame:
    """``user, item, rating`` (int32, int32, float32) drawn as the module says,
    sorted by user (items in the order drawn).

    Parameters
    ----------
    n_users, n_items
        Users and items (ids ``0 .. n - 1``; the rarest may draw no rating).
    n_ratings
        Ratings wanted: each user's count is drawn for it (multinomial over the
        activities), then capped at half the items, so the heaviest users give a
        few less than asked for.
    seed
        Seed of everything (the same seed gives the same frame).
    rank, lo, hi
        Rank of the planted model and the rating range.
    """
    rng = np.random.default_rng(seed)
    ipop = 1.0 / np.arange(1, n_items + 1) ** 0.9
    uact = 1.0 / np.arange(1, n_users + 1) ** 0.6
    ipop = rng.permutation(ipop / ipop.sum())
    uact = rng.permutation(uact / uact.sum())
    P = rng.normal(scale=0.5, size=(n_users, rank)).astype(np.float32)
    Q = rng.normal(scale=0.5, size=(n_items, rank)).astype(np.float32)
    bu = rng.normal(scale=0.3, size=n_users).astype(np.float32)
    bi = rng.normal(scale=0.4, size=n_items).astype(np.float32)
    counts = np.minimum(rng.multinomial(int(n_ratings), uact), max(1, n_items // 2))
    start = np.zeros(n_users, np.int64)
    np.cumsum(counts[:-1], out=start[1:])
    total = int(counts.sum())
    out_i = np.empty(total, np.int32)
    out_r = np.empty(total, np.float32)
    stream = int(rng.integers(0, 2**63))
    mid = 0.5 * (lo + hi) + 0.1
    draw = _draw_parallel if total >= PARALLEL_FROM else _draw
    draw(stream, start, counts, np.cumsum(ipop), P, Q, bu, bi, mid, 0.4, lo, hi, out_i, out_r)
    users = np.repeat(np.arange(n_users, dtype=np.int32), counts)
    return pd.DataFrame({"user": users, "item": out_i, "rating": out_r})
