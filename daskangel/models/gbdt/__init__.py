"""Gradient-boosted decision trees on the parameter server (Angel's GBDT).

| module | what |
| --- | --- |
| ``_estimators`` | :class:`GBDTClassifier`, :class:`GBDTRegressor` |
| ``_fit`` | a fit from the driver: input, sketch, edges, arrays, the boosting job |
| ``_sketch`` | mergeable weighted quantile summaries (numba) |
| ``_binning`` | bin edges and histogram layout; a partition's rows as bin codes |
| ``_rows`` | a partition's split, sketch push and cached bin codes |
| ``_hist`` | worker kernels: histograms, row partitions, tree walks |
| ``_losses`` | gradients, hessians, metric sums |
| ``_worker`` | one task's rows during a fit |
| ``_grower`` | the leader's level-by-level split decisions |
| ``_psfs`` | ``MergeSketches`` and ``FindSplits``: the PS side |
| ``_task`` | the boosting task and its command protocol |
| ``_plan`` | what a fit tells its tasks; the PS arrays' layout |
| ``_trees`` | margins of raw rows, importances, JSON export |
| ``_predict`` | predictions on any input |
| ``_params`` | parameter checks |

Example
-------
>>> from daskangel.models import GBDTClassifier                   # doctest: +SKIP
>>> GBDTClassifier(n_estimators=50).fit(X, y).predict(X)          # doctest: +SKIP
"""

from __future__ import annotations

from ._estimators import GBDTClassifier, GBDTRegressor

__all__ = ["GBDTClassifier", "GBDTRegressor"]
