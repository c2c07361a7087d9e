"""The algorithm library: one subpackage per model family, on one shared estimator base.

| family | estimators |
| --- | --- |
| ``fm/`` | :class:`FMClassifier`, :class:`FMRegressor`, :class:`FFMClassifier` (factorization machines on the PS) |
| ``gbdt/`` | :class:`GBDTClassifier`, :class:`GBDTRegressor` (two-phase split finding on the PS) |
| ``kmeans/`` | :class:`KMeans` (Lloyd on the PS: centres updated by the servers), :class:`MiniBatchKMeans` |
| ``lda/`` | :class:`LDA` (collapsed Gibbs sampling on the PS) |
| ``linear/`` | :class:`LogisticRegression`, :class:`SoftmaxRegression`, :class:`LinearSVC`, :class:`LinearRegression`, :class:`Ridge`, :class:`HuberRegressor`, :class:`Lasso` |
| ``mf/`` | :class:`MatrixFactorization` (SGD, ALS-WR, implicit ALS; recommendations) |

Every estimator keeps the scikit-learn contract, trains on the parameter
server with Dask tasks, and saves to zarr (:func:`load` reads any of them
back).  The machinery the families share (the estimator base, input coercion,
the model format, metrics) is in ``models/_core/``.  User guide:
``docs/models.md``.

Example
-------
>>> import daskangel as angel                                        # doctest: +SKIP
>>> ds = angel.data.read_libsvm("a9a", n_features=123)               # doctest: +SKIP
>>> clf = angel.models.LogisticRegression(max_iter=5).fit(ds)        # doctest: +SKIP
>>> clf.save("/tmp/a9a-lr"); angel.models.load("/tmp/a9a-lr")       # doctest: +SKIP
"""

from __future__ import annotations

from ._core import PSEstimator, auc_from_hist, load
from .fm import FFMClassifier, FMClassifier, FMRegressor
from .gbdt import GBDTClassifier, GBDTRegressor
from .kmeans import KMeans, MiniBatchKMeans
from .lda import LDA
from .linear import (
    SOLVERS,
    HuberRegressor,
    Lasso,
    LinearModel,
    LinearRegression,
    LinearSVC,
    LogisticRegression,
    Ridge,
    SoftmaxRegression,
)
from .mf import MatrixFactorization

__all__ = [
    "LDA",
    "SOLVERS",
    "FFMClassifier",
    "FMClassifier",
    "FMRegressor",
    "GBDTClassifier",
    "GBDTRegressor",
    "HuberRegressor",
    "KMeans",
    "Lasso",
    "LinearModel",
    "LinearRegression",
    "LinearSVC",
    "LogisticRegression",
    "MatrixFactorization",
    "MiniBatchKMeans",
    "PSEstimator",
    "Ridge",
    "SoftmaxRegression",
    "auc_from_hist",
    "load",
]
