"""What a GBDT fit tells its tasks (:class:`Plan`), and the layout of its PS arrays.

PS arrays of one fit (``<model>`` is a fresh name):

* ``<model>.sketch`` (sparse float64, ``(n_features, n_tasks * 2 * points)``,
  dropped once merged): every task's quantile summary of every feature;
* ``<model>.hist`` (float64, ``(n_hist_rows, width)``, rows cut on feature
  edges by :class:`~daskangel.psarray.RowBoundsPartitioner`): the gradient
  histograms of one boosting round.  Level ``L``'s built nodes are column
  triplets ``(g, h, count)`` from ``col_base[L]``; ``K * cap(L)`` of them,
  ``cap(0) = 1`` and ``cap(L) = 2 ** (L - 1)`` (one built child per split);
* ``<model>.trees`` (float64, ``(n_estimators * K, max_nodes * NF)``): the
  model, one row per tree, :data:`NF` fields per node (``_trees``);
* ``<model>.metrics`` (float64, ``(n_estimators, 2 * len(_resume.METRICS))``,
  dropped after the fit): a ``history_`` row per finished round, so that a fit
  resumed from a snapshot knows them (``_resume``).

Example
-------
>>> col_bases(3, 1)
(0, 3, 6, 12)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._binning import BinSpec

__all__ = ["Plan", "col_bases", "hist_bounds", "level_cap"]


def level_cap(level: int, max_leaf_nodes: int) -> int:
    """Built nodes of one tree at ``level``: the root, then one per split above."""
    cap = 1 if level == 0 else 2 ** (level - 1)
    if max_leaf_nodes > 0:
        cap = min(cap, max_leaf_nodes - 1) if level else 1
    return max(cap, 1)


def col_bases(max_depth: int, K: int, max_leaf_nodes: int = 0) -> tuple[int, ...]:
    """First column of each level's section of the histogram array, and its width."""
    out = [0]
    for lvl in range(max_depth):
        out.append(out[-1] + 3 * K * level_cap(lvl, max_leaf_nodes))
    return tuple(out)


def hist_bounds(offsets: np.ndarray, n_blocks: int) -> tuple[int, ...]:
    """Row bounds of ``n_blocks`` near-equal blocks of the histogram, on feature edges."""
    total = int(offsets[-1])
    edges = np.unique(offsets)
    cut = [0]
    for i in range(1, n_blocks):
        want = total * i // n_blocks
        e = int(edges[min(int(np.searchsorted(edges, want)), len(edges) - 1)])
        if cut[-1] < e < total:
            cut.append(e)
    cut.append(max(total, 1))
    return tuple(cut)


@dataclass(frozen=True, eq=False)
class Plan:
    """Everything a boosting task needs (plain values and a :class:`BinSpec`)."""

    hist: str  # PS array names
    trees: str
    metrics: str
    spec: BinSpec
    K: int  # trees per round: classes of the softmax, else 1
    loss: int  # _losses.LOSSES id
    delta: float  # Huber
    n_estimators: int
    learning_rate: float
    max_depth: int
    max_leaf_nodes: int  # 0: no limit
    min_child_weight: float
    min_samples_leaf: int
    reg_lambda: float
    subsample: float
    colsample: float
    seed: int
    val_fraction: float
    patience: int  # 0: no early stopping
    tol: float
    zero_is_value: bool  # dense input: unstored entries are the value 0
    dense_fraction: float  # bin codes as a matrix from this share of stored entries
    baseline: tuple[float, ...]  # initial margin per output
    col_base: tuple[int, ...]
    max_nodes: int
    nbins: int  # AUC histogram bins
    n_tasks: int
    renew_points: int  # absolute loss: points of a leaf's residual summary
    classes: tuple[float, ...] | None  # label values to map to class indices (Datasets)

    @property
    def classifier(self) -> bool:
        return self.loss in (0, 1)
