"""Planted low-rank ratings for the factorisation tests, and one LocalCluster (2 worker
processes of one thread) for every module of the family that shares it: the workers
load the compiled kernels once, and two tasks a fit keep the clocks cheap."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tests.conftest import package_cluster

cluster, client = package_cluster(n_workers=2, threads=1)


def planted_ratings(
    n_users: int = 150, n_items: int = 80, rank: int = 3, density: float = 0.3, seed: int = 0
) -> pd.DataFrame:
    """``user, item, rating`` of a known biased rank-``rank`` model plus a little noise
    (string item ids, integer user ids), in a random order."""
    rng = np.random.default_rng(seed)
    P = rng.normal(scale=0.6, size=(n_users, rank))
    Q = rng.normal(scale=0.6, size=(n_items, rank))
    bu = rng.normal(scale=0.3, size=n_users)
    bi = rng.normal(scale=0.3, size=n_items)
    mask = rng.random((n_users, n_items)) < density
    u, i = np.nonzero(mask)
    r = 3.0 + bu[u] + bi[i] + np.einsum("ij,ij->i", P[u], Q[i]) + rng.normal(scale=0.1, size=u.size)
    order = rng.permutation(u.size)
    return pd.DataFrame(
        {
            "user": (u[order] * 7 + 100).astype(np.int64),
            "item": np.array([f"it{k}" for k in i[order]]),
            "rating": r[order],
        }
    )


def split(df: pd.DataFrame, frac: float = 0.2, seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    perm = np.random.default_rng(seed).permutation(len(df))
    k = int(len(df) * frac)
    return df.iloc[perm[k:]], df.iloc[perm[:k]]


FAST = {"progress": False, "random_state": 0}


@pytest.fixture(scope="module")
def data() -> tuple[pd.DataFrame, pd.DataFrame]:
    """The planted ratings split 80 / 20 (train, test), once per module."""
    return split(planted_ratings())


def bias_only_rmse(train: pd.DataFrame, test: pd.DataFrame) -> float:
    """Test RMSE of user and item mean offsets: what the factors must beat."""
    mu = train.rating.mean()
    bu = train.groupby("user").rating.mean() - mu
    bi = train.groupby("item").rating.mean() - mu
    p = mu + test.user.map(bu).fillna(0).values + test.item.map(bi).fillna(0).values
    return float(np.sqrt(np.mean((p - test.rating.values) ** 2)))
