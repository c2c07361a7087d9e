"""The linear models: scikit-learn estimators whose weights live on the parameter server.

| estimator | loss | outputs |
| --- | --- | --- |
| :class:`LogisticRegression` | logistic (softmax for > 2 classes) | ``predict_proba`` |
| :class:`SoftmaxRegression` | softmax cross-entropy, one weight row per class | ``predict_proba`` |
| :class:`LinearSVC` | hinge or squared hinge (one-vs-rest for > 2 classes) | ``decision_function`` |
| :class:`LinearRegression` / :class:`Ridge` | squared error (``alpha`` = L2) | ``predict`` |
| :class:`HuberRegressor` | Huber (``epsilon``) | ``predict`` |
| :class:`Lasso` | squared error + ``l1`` (OWL-QN by default) | ``predict`` |

Every model takes the same training parameters (see :class:`LogisticRegression`);
L1 on any model is ``l1=`` (sparse logistic regression: ``LogisticRegression(
solver="ftrl", l1=...)`` or ``solver="owlqn"``).  The objective is the *mean*
loss over the training rows plus ``alpha/2 |w|^2 + l1 |w|_1``.

Example
-------
>>> from daskangel.models import LogisticRegression               # doctest: +SKIP
>>> clf = LogisticRegression(max_iter=5, sync="ssp:1").fit(X, y)  # doctest: +SKIP
>>> clf.predict_proba(X_dask)              # a dask array  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.base import ClassifierMixin, RegressorMixin

from ...errors import InvalidArgumentError
from .._core._predict import map_rows
from ._base import LinearModel

__all__ = [
    "HuberRegressor",
    "Lasso",
    "LinearRegression",
    "LinearSVC",
    "LogisticRegression",
    "Ridge",
    "SoftmaxRegression",
]

_COMMON_DOC = """
    Parameters
    ----------
    solver
        ``'ma-sgd'`` (model averaging: local SGD, deltas averaged on the PS),
        ``'sgd'`` (minibatch gradients pushed to a server-side optimiser),
        ``'ftrl'`` (FTRL-proximal on the PS), ``'lbfgs'`` / ``'owlqn'``
        (full-batch quasi-Newton, vectors on the PS).
    sync
        ``'bsp'``, ``'ssp:<s>'``, ``'asp'`` or a protocol object (``angel.SSP(2)``).
    max_iter
        Epochs (passes over the data; quasi-Newton: function evaluations).
    learning_rate, power_t
        Step size ``learning_rate / (1 + epoch) ** power_t`` (FTRL: its alpha;
        adaptive server optimisers: their lr; ``adaptive``: per weight, see there).
    batch_size
        Rows per SGD step (default 1 for ``'ma-sgd'``; for ``'sgd'``/``'ftrl'``,
        whose every step is a pull, a push and a clock on the PS,
        ``daskangel.models.sgd-batch``, 1024).
    local_steps
        ``'ma-sgd'``: local steps between two averagings (default: a whole pass).
    alpha, l1
        L2 and L1 strengths of the mean-loss objective.
    fit_intercept
        Learn an intercept (stored as the last weight, never regularised by SGD).
    tol, n_iter_no_change, early_stopping, validation_fraction
        A seeded ``validation_fraction`` of every partition is held out and
        evaluated each epoch (metrics in ``history_``); with ``early_stopping``
        training stops once the validation loss (training loss without a
        validation split) has not improved on its best by ``tol`` *relative*
        (``tol * |best|``) for ``n_iter_no_change`` epochs, and keeps the last
        epoch's model.  Under BSP ``'ma-sgd'`` decides before training the next
        epoch (no epoch is trained only to be thrown away).  Quasi-Newton
        solvers stop on a relative decrease below ``tol`` (pass a small one,
        e.g. ``1e-6``, for a tight fit).  ``LogisticRegression`` and
        ``SoftmaxRegression`` default to ``tol='auto', n_iter_no_change=1``:
        the epoch solvers stop at the first epoch that gains less than 0.5 %
        of the validation loss (``tol`` 5e-3, ``daskangel.models.auto-tol.epochs``;
        Keras' ``patience=0``; scikit-learn's ``SGDClassifier`` stops on an
        absolute 1e-3, 0.17-1.7 % of the log-losses of the benchmark sets),
        quasi-Newton on a decrease below 1e-4
        (``daskangel.models.auto-tol.quasi-newton``); the other models
        ``tol=1e-4, n_iter_no_change=3``.
    optimizer
        Server-side rule of ``'sgd'``: ``'sgd'``, ``'momentum'``, ``'adagrad'``, ``'adam'``.
    average
        ``'ma-sgd'``: each task pushes the mean of its local iterates of the
        round instead of the last one (Polyak-Ruppert averaging, like
        ``SGDClassifier(average=True)``): much less noise at the same cost.
        Ignored with ``l1 > 0`` (an average of iterates is not sparse).
    adaptive
        ``'ma-sgd'``: per-feature adaptive steps (AdaGrad, as Vowpal Wabbit's
        default updates): each weight steps by ``learning_rate * g / sqrt(G)``,
        ``G`` the sum of its squared gradients, kept on the PS with the weights.
        A rare feature of power-law data keeps large steps where one step size
        for all under-trains it.  ``power_t`` and ``average`` are then ignored
        (the sums are the schedule).  ``'auto'`` (the default of
        ``LogisticRegression`` and ``SoftmaxRegression``): adaptive with
        ``'ma-sgd'``, ignored by the other solvers; ``False`` (the other models'
        default): one step size ``learning_rate / (1 + epoch) ** power_t``.
    prune
        Pull only the keys a task's data uses (Angel's pruned pulls); ``False``
        pulls the whole model (for comparison).
    memory
        L-BFGS / OWL-QN curvature pairs.
    dtype
        Weights' dtype on the PS (default float64: the servers' arrival-order sums then
        round at 1e-16, so two fits with one ``random_state`` agree; float32 halves
        the PS memory).
    n_tasks
        Training tasks (default: one per worker thread).
    random_state, warm_start, progress, client, ps
        Seed of splits and shuffles; continue from the current weights on
        ``fit``; a progress bar of epochs (``"auto"``: shown in a terminal or
        Jupyter, not in batch logs; ``True`` / ``False``); the Dask client (default: the current
        one); an existing :class:`~daskangel.PSContext` to keep the weights in.

    Attributes
    ----------
    coef_, intercept_
        Read from the copy of the weights pulled at the end of a fit.
    classes_, n_features_in_, n_iter_, t_
        Classes, features, epochs of the last fit, epochs in total.
    history_
        pandas DataFrame, one row per epoch: ``train_loss`` and ``val_*`` metrics.
"""


class _Classifier(ClassifierMixin, LinearModel):
    _task = "classifier"

    def decision_function(self, X: Any) -> Any:
        """``X @ coef_.T + intercept_``: ``(n,)`` for one output, ``(n, K)`` else.

        (Classifiers only: scikit-learn's regressors have no decision function.)
        """
        m = self._margins(X)
        return m[:, 0] if m.shape[1] == 1 else m

    def predict(self, X: Any) -> Any:
        """Class labels (a dask array for a dask / Dataset input)."""
        m = self._margins(X)
        classes = self.classes_

        def pick(b: np.ndarray) -> np.ndarray:
            idx = (b[:, 0] > 0).astype(np.int64) if b.shape[1] == 1 else b.argmax(axis=1)
            return classes[idx]

        return map_rows(m, pick, classes.dtype, False)


class _Probabilistic(_Classifier):
    _logloss = True

    def predict_proba(self, X: Any) -> Any:
        """Class probabilities ``(n, n_classes)`` (sigmoid, or softmax for > 2 classes)."""
        m = self._margins(X)

        def proba(b: np.ndarray) -> np.ndarray:
            if b.shape[1] == 1:
                p = 1.0 / (1.0 + np.exp(-np.clip(b[:, 0], -500, 500)))
                return np.stack([1.0 - p, p], axis=1)
            e = np.exp(b - b.max(axis=1, keepdims=True))
            return e / e.sum(axis=1, keepdims=True)

        if hasattr(m, "dask"):
            return m.map_blocks(
                proba, dtype=np.float64, chunks=(m.chunks[0], (len(self.classes_),))
            )
        return proba(m)

    def predict_log_proba(self, X: Any) -> Any:
        p = self.predict_proba(X)
        return np.log(np.clip(p, 1e-300, None)) if not hasattr(p, "dask") else p.map_blocks(np.log)


class _Regressor(RegressorMixin, LinearModel):
    _task = "regressor"

    def predict(self, X: Any) -> Any:
        """Predicted values (a dask array for a dask / Dataset input)."""
        return map_rows(self._margins(X), lambda b: b[:, 0], np.float64, False)


class LogisticRegression(_Probabilistic):
    __doc__ = "Logistic regression (softmax for more than two classes).\n" + _COMMON_DOC
    _loss = "logistic"

    def __init__(
        self, *, solver: str = "ma-sgd", sync: Any = "bsp", max_iter: int = 10,
        learning_rate: float = 0.1, power_t: float = 0.5, batch_size: int | None = None,
        local_steps: int | None = None, alpha: float = 1e-5, l1: float = 0.0,
        fit_intercept: bool = True, tol: float | str | None = "auto", n_iter_no_change: int = 1,
        early_stopping: bool = True, validation_fraction: float = 0.1,
        optimizer: str = "adagrad", prune: bool = True, average: bool = True,
        adaptive: bool | str = "auto",
        memory: int = 10,
        dtype: Any = None, n_tasks: int | None = None, random_state: int | None = 0,
        warm_start: bool = False, progress: bool | str = "auto", client: Any = None, ps: Any = None,
    ) -> None:  # fmt: skip
        self._keep_params(locals())


class SoftmaxRegression(LogisticRegression):
    __doc__ = "Multinomial logistic regression: one weight row per class.\n" + _COMMON_DOC

    def _n_outputs(self, classes: np.ndarray | None) -> int:
        assert classes is not None
        return len(classes)

    def _kind(self, K: int) -> int:
        from ._kernels import SOFTMAX

        return SOFTMAX

    def decision_function(self, X: Any) -> Any:
        """``(n, K)`` class scores; for two classes one score ``(n,)``, positive for
        ``classes_[1]`` (scikit-learn's shape for binary classifiers)."""
        m = self._margins(X)
        return m[:, 1] - m[:, 0] if m.shape[1] == 2 else m


class LinearSVC(_Classifier):
    __doc__ = (
        "Linear support vector classifier (``loss='hinge'`` or ``'squared_hinge'``; "
        "one-vs-rest for more than two classes).\n" + _COMMON_DOC
    )

    def __init__(
        self, *, loss: str = "squared_hinge", solver: str = "ma-sgd", sync: Any = "bsp",
        max_iter: int = 10, learning_rate: float = 0.05, power_t: float = 0.5,
        batch_size: int | None = None, local_steps: int | None = None, alpha: float = 1e-4,
        l1: float = 0.0, fit_intercept: bool = True, tol: float | None = 1e-4,
        n_iter_no_change: int = 3, early_stopping: bool = True,
        validation_fraction: float = 0.1, optimizer: str = "adagrad", prune: bool = True,
        average: bool = True, adaptive: bool = False,
        memory: int = 10, dtype: Any = None, n_tasks: int | None = None,
        random_state: int | None = 0, warm_start: bool = False, progress: bool | str = "auto",
        client: Any = None, ps: Any = None,
    ) -> None:  # fmt: skip
        self._keep_params(locals())

    @property
    def _loss(self) -> str:  # type: ignore[override]
        if self.loss not in ("hinge", "squared_hinge"):
            raise InvalidArgumentError(
                f"loss: expected 'hinge' or 'squared_hinge', got {self.loss!r}"
            )
        return str(self.loss)


class LinearRegression(_Regressor):
    __doc__ = "Least-squares linear regression (``alpha`` > 0: ridge).\n" + _COMMON_DOC
    _loss = "squared"

    def __init__(
        self, *, solver: str = "ma-sgd", sync: Any = "bsp", max_iter: int = 10,
        learning_rate: float = 0.01, power_t: float = 0.25, batch_size: int | None = None,
        local_steps: int | None = None, alpha: float = 0.0, l1: float = 0.0,
        fit_intercept: bool = True, tol: float | None = 1e-4, n_iter_no_change: int = 3,
        early_stopping: bool = True, validation_fraction: float = 0.1,
        optimizer: str = "adagrad", prune: bool = True, average: bool = True,
        adaptive: bool = False,
        memory: int = 10,
        dtype: Any = None, n_tasks: int | None = None, random_state: int | None = 0,
        warm_start: bool = False, progress: bool | str = "auto", client: Any = None, ps: Any = None,
    ) -> None:  # fmt: skip
        self._keep_params(locals())


class Ridge(LinearRegression):
    __doc__ = "Ridge regression: squared error + ``alpha/2 |w|^2``.\n" + _COMMON_DOC

    def __init__(
        self, *, solver: str = "ma-sgd", sync: Any = "bsp", max_iter: int = 10,
        learning_rate: float = 0.01, power_t: float = 0.25, batch_size: int | None = None,
        local_steps: int | None = None, alpha: float = 1e-3, l1: float = 0.0,
        fit_intercept: bool = True, tol: float | None = 1e-4, n_iter_no_change: int = 3,
        early_stopping: bool = True, validation_fraction: float = 0.1,
        optimizer: str = "adagrad", prune: bool = True, average: bool = True,
        adaptive: bool = False,
        memory: int = 10,
        dtype: Any = None, n_tasks: int | None = None, random_state: int | None = 0,
        warm_start: bool = False, progress: bool | str = "auto", client: Any = None, ps: Any = None,
    ) -> None:  # fmt: skip
        self._keep_params(locals())


class HuberRegressor(_Regressor):
    __doc__ = (
        "Robust regression with the Huber loss (quadratic within ``epsilon``).\n" + _COMMON_DOC
    )
    _loss = "huber"

    def __init__(
        self, *, epsilon: float = 1.35, solver: str = "ma-sgd", sync: Any = "bsp",
        max_iter: int = 10, learning_rate: float = 0.01, power_t: float = 0.25,
        batch_size: int | None = None, local_steps: int | None = None, alpha: float = 1e-4,
        l1: float = 0.0, fit_intercept: bool = True, tol: float | None = 1e-4,
        n_iter_no_change: int = 3, early_stopping: bool = True,
        validation_fraction: float = 0.1, optimizer: str = "adagrad", prune: bool = True,
        average: bool = True, adaptive: bool = False,
        memory: int = 10, dtype: Any = None, n_tasks: int | None = None,
        random_state: int | None = 0, warm_start: bool = False, progress: bool | str = "auto",
        client: Any = None, ps: Any = None,
    ) -> None:  # fmt: skip
        self._keep_params(locals())


class Lasso(_Regressor):
    __doc__ = "Squared error + ``l1 |w|_1`` (sparse weights; OWL-QN by default).\n" + _COMMON_DOC
    _loss = "squared"

    def __init__(
        self, *, l1: float = 1e-3, solver: str = "owlqn", sync: Any = "bsp", max_iter: int = 100,
        learning_rate: float = 0.01, power_t: float = 0.25, batch_size: int | None = None,
        local_steps: int | None = None, alpha: float = 0.0, fit_intercept: bool = True,
        tol: float | None = 1e-6, n_iter_no_change: int = 3, early_stopping: bool = True,
        validation_fraction: float = 0.0, optimizer: str = "adagrad", prune: bool = True,
        average: bool = True, adaptive: bool = False,
        memory: int = 10, dtype: Any = None, n_tasks: int | None = None,
        random_state: int | None = 0, warm_start: bool = False, progress: bool | str = "auto",
        client: Any = None, ps: Any = None,
    ) -> None:  # fmt: skip
        self._keep_params(locals())
