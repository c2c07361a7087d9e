"""Ratings with a planted low-rank structure (tests, benchmarks, the notebook).

:func:`planted_ratings` draws users and items with power-law activity and
popularity (as real rating data: a few heavy users, a long tail of rare
items), rates each pair with a biased rank-``rank`` model plus noise and clips
to ``[lo, hi]``.  Everything follows from ``seed``; nothing is downloaded.

Example
-------
>>> df = planted_ratings(n_users=50, n_items=20, n_ratings=300, seed=0)
>>> list(df.columns), len(df) <= 300, bool(df.rating.between(1, 5).all())
(['user', 'item', 'rating'], True, True)
"""

from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = ["planted_ratings"]


def planted_ratings(
    n_users: int,
    n_items: int,
    n_ratings: int,
    seed: int = 0,
    rank: int = 10,
    lo: float = 1.0,
    hi: float = 5.0,
) -> pd.DataFrame:
    """``user, item, rating`` (int32, int32, float32) drawn as the module says.

    Parameters
    ----------
    n_users, n_items
        Users and items (ids ``0 .. n - 1``; the rarest may draw no rating).
    n_ratings
        Pairs drawn; duplicate pairs are dropped (the first kept), so a few less
        come back.
    seed
        Seed of everything.
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
    mid = 0.5 * (lo + hi) + 0.1
    us, its, rs = [], [], []
    step = 5_000_000
    for s in range(0, n_ratings, step):
        m = min(step, n_ratings - s)
        u = rng.choice(n_users, size=m, p=uact).astype(np.int32)
        i = rng.choice(n_items, size=m, p=ipop).astype(np.int32)
        r = mid + bu[u] + bi[i] + np.einsum("ij,ij->i", P[u], Q[i])
        r += rng.normal(scale=0.4, size=m).astype(np.float32)
        us.append(u)
        its.append(i)
        rs.append(np.clip(r, lo, hi).astype(np.float32))
    u, i, r = np.concatenate(us), np.concatenate(its), np.concatenate(rs)
    del us, its, rs
    key = u.astype(np.int64) * n_items + i
    _, first = np.unique(key, return_index=True)
    del key
    first.sort()
    return pd.DataFrame({"user": u[first], "item": i[first], "rating": r[first]})
