"""Metrics evaluated next to the data, combined through one row of a PS array per epoch.

Every family that trains by epochs (linear models, factorization machines)
keeps its per-epoch figures the same way.  Each task evaluates the model on
its own validation rows and *increments* row ``e`` of the model's metrics
array (``<model>.metrics``, float64) with sums:
the training loss it saw during the epoch, validation sums (rows, loss,
correct, squared and absolute error, log-loss) and, for binary problems, two
histograms of the validation margins by class.  Sums add up across tasks on
the servers, so once every task has pushed row ``e`` it holds the exact
whole-validation-set figures, and :func:`finish` turns them into metrics.
AUC comes from the histograms (``daskangel.models.auc-bins`` bins of the margin
on ``[-16, 16]``; ties inside a bin count one half).

Row layout: ``[train_rows, train_loss, stats[N_STATS], neg_hist[nbins], pos_hist[nbins]]``.

Example
-------
>>> import numpy as np
>>> row = np.zeros(row_width(4)); row[:8] = [10, 5.0, 4, 3, 3, 0, 0, 2.0]
>>> row[8:12] = [2, 0, 0, 0]; row[12:16] = [0, 0, 0, 2]
>>> m = finish(row, "classifier", binary=True, logloss=True, nbins=4)
>>> m["train_loss"], m["val_accuracy"], m["val_auc"]
(0.5, 0.75, 1.0)
"""

from __future__ import annotations

import math

import numpy as np

from ._metrics import auc_from_hist

__all__ = ["AUC_RANGE", "N_STATS", "OFFSET", "finish", "row_width"]

OFFSET = 2  # stats start after train_rows, train_loss
# validation sums: rows, loss, correct, squared error, absolute error, log-loss
N_STATS = 6
# AUC histograms bin the margin on [-AUC_RANGE, AUC_RANGE]
AUC_RANGE = 16.0


def row_width(nbins: int) -> int:
    """Width of one metrics row for ``nbins`` AUC bins."""
    return OFFSET + N_STATS + 2 * nbins


def finish(
    row: np.ndarray, task: str, *, binary: bool, logloss: bool, nbins: int
) -> dict[str, float]:
    """Metrics of one epoch from its summed row (see the module docstring).

    ``task`` is ``"classifier"`` or ``"regressor"``.  Keys: ``train_loss`` and,
    with validation rows, ``val_loss`` plus ``val_accuracy`` / ``val_logloss`` /
    ``val_auc`` (classifiers) or ``val_rmse`` / ``val_mae`` (regressors).
    """
    out: dict[str, float] = {}
    if row[0] > 0:
        out["train_loss"] = float(row[1] / row[0])
    st = row[OFFSET : OFFSET + N_STATS]
    n = float(st[0])
    if n <= 0:
        return out
    out["val_loss"] = float(st[1] / n)
    if task == "regressor":
        out["val_rmse"] = math.sqrt(float(st[3]) / n)
        out["val_mae"] = float(st[4] / n)
        return out
    out["val_accuracy"] = float(st[2] / n)
    if logloss:
        out["val_logloss"] = float(st[5] / n)
    if binary:
        h = row[OFFSET + N_STATS :]
        out["val_auc"] = auc_from_hist(h[:nbins], h[nbins : 2 * nbins])
    return out
