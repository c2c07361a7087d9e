"""Small planted problems for the model tests."""

from __future__ import annotations

import numpy as np


def planted(
    n: int = 2000, d: int = 20, kind: str = "binary", seed: int = 0, sparse_w: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``X, y, w``: Gaussian rows and labels from a known linear model."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    w = rng.normal(size=d)
    if sparse_w:
        w[5:] = 0.0
    if kind == "multiclass":
        W = rng.normal(size=(d, 3)) * 2
        return X, (X @ W).argmax(axis=1), W
    m = X @ w + 0.3
    if kind == "binary":
        return X, (m > 0).astype(np.int64), w
    return X, m + 0.05 * rng.normal(size=n), w
