"""The linear family: scikit-learn estimators whose weights live on the parameter server.

Logistic regression, linear SVMs, least-squares / ridge / Huber / Lasso
regression and softmax regression, with Angel's solvers: minibatch SGD with a
server-side optimiser (``'sgd'``), model averaging (``'ma-sgd'``), FTRL
(``'ftrl'``) and full-batch L-BFGS / OWL-QN (``'lbfgs'`` / ``'owlqn'``).  User
guide: ``docs/models.md``.

Example
-------
>>> import daskangel as angel                                        # doctest: +SKIP
>>> ds = angel.data.read_libsvm("a9a", n_features=123)               # doctest: +SKIP
>>> clf = angel.models.LogisticRegression(max_iter=5).fit(ds)        # doctest: +SKIP
>>> clf.save("/tmp/a9a-lr"); angel.models.load("/tmp/a9a-lr")       # doctest: +SKIP
"""

from __future__ import annotations

from ._base import SOLVERS, LinearModel
from ._estimators import (
    HuberRegressor,
    Lasso,
    LinearRegression,
    LinearSVC,
    LogisticRegression,
    Ridge,
    SoftmaxRegression,
)

__all__ = [
    "SOLVERS",
    "HuberRegressor",
    "Lasso",
    "LinearModel",
    "LinearRegression",
    "LinearSVC",
    "LogisticRegression",
    "Ridge",
    "SoftmaxRegression",
]
