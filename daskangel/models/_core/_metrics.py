"""Metrics every family computes the same way: AUC from histograms, early stopping.

Example
-------
>>> import numpy as np
>>> auc_from_hist(np.array([2.0, 0.0]), np.array([0.0, 2.0]))
1.0
>>> should_stop([{"val_loss": v} for v in (3.0, 2.0, 2.5, 2.4)], "val_loss", 0.0, 2)
True
>>> should_stop([{"val_loss": v} for v in (0.60, 0.598, 0.5979)], "val_loss", 1e-3, 1,
...             relative=True)
True
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["auc_from_hist", "should_stop"]


def auc_from_hist(neg: np.ndarray, pos: np.ndarray) -> float:
    """Area under the ROC curve from per-bin class counts (bins in score order)."""
    n_neg, n_pos = float(neg.sum()), float(pos.sum())
    if n_neg == 0 or n_pos == 0:
        return float("nan")
    below = np.concatenate([[0.0], np.cumsum(neg)[:-1]])
    return float((pos * (below + 0.5 * neg)).sum() / (n_neg * n_pos))


def should_stop(
    history: list[dict[str, Any]], key: str, tol: float, patience: int, relative: bool = False
) -> bool:
    """scikit-learn's rule: no improvement of ``key`` by ``tol`` for ``patience`` epochs.

    ``history`` is one dict per finished epoch; an epoch improves if its value is
    below the best earlier value minus ``tol`` (``relative``: minus ``tol`` times
    that best value's magnitude, the rule of scipy's L-BFGS ``ftol``, so one
    ``tol`` means the same on a log-loss of 0.06 and on a squared error of 1e4).
    """
    vals = [h[key] for h in history if key in h and np.isfinite(h[key])]
    if len(vals) <= patience:
        return False
    best = min(vals[: len(vals) - patience])
    margin = tol * abs(best) if relative else tol
    return all(v > best - margin for v in vals[len(vals) - patience :])
