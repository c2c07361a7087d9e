"""Planted pairwise interactions for the factorization-machine tests."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp


def planted_pairs(
    n: int = 4000,
    n_fields: int = 6,
    card: int = 8,
    rank: int = 2,
    seed: int = 0,
    regression: bool = False,
) -> tuple[sp.csr_matrix, np.ndarray]:
    """One-hot rows of ``n_fields`` categorical fields (``card`` values each) whose label
    comes from a planted rank-``rank`` interaction of fields 0 and 1 plus weak linear
    terms: a linear model cannot see the interaction, an FM can."""  # fmt: skip
    rng = np.random.default_rng(seed)
    cats = rng.integers(0, card, size=(n, n_fields))
    cols = cats + np.arange(n_fields) * card
    X = sp.csr_matrix(
        (np.ones(n * n_fields), cols.ravel(), np.arange(0, n * n_fields + 1, n_fields)),
        shape=(n, n_fields * card),
    )
    U = rng.normal(size=(card, rank))
    V = rng.normal(size=(card, rank))
    w = rng.normal(scale=0.3, size=n_fields * card)
    m = 2.0 * np.einsum("ij,ij->i", U[cats[:, 0]], V[cats[:, 1]]) + X @ w
    if regression:
        return X, m + 0.05 * rng.normal(size=n)
    return X, (m + 0.3 * rng.normal(size=n) > 0).astype(np.int64)
