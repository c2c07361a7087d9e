"""The factorization machines: scikit-learn estimators whose model rows live on the PS.

| estimator | model | outputs |
| --- | --- | --- |
| :class:`FMClassifier` | Rendle's FM, logistic loss (binary) | ``predict_proba``, ``decision_function`` |
| :class:`FMRegressor` | Rendle's FM, squared error | ``predict`` |
| :class:`FFMClassifier` | field-aware FM (Juan et al.), logistic loss | ``predict_proba``, ``decision_function`` |

The objective is the mean loss over the training rows plus
``reg_linear/2 |w|^2 + reg_factors/2 |V|^2`` over the rows a step touches.

Example
-------
>>> from daskangel.models import FMClassifier                          # doctest: +SKIP
>>> clf = FMClassifier(n_factors=8, solver="adam").fit(X, y)            # doctest: +SKIP
>>> clf.predict_proba(X_dask)                  # a dask array          # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.base import ClassifierMixin, RegressorMixin

from ...errors import InvalidArgumentError
from .._core._input import Prepared
from .._core._predict import map_rows
from ._base import FMModel
from ._fields import field_map

__all__ = ["FFMClassifier", "FMClassifier", "FMRegressor"]

COMMON_DOC = """
    .. warning:: Two fits with one ``random_state`` give the same model under
       BSP (the default) only.  Under SSP / ASP a task may read rows other
       tasks changed in the same clock, and the server-side optimisers
       (``'adam'``, ``'adagrad'``, ``'ftrl'``, ``'sgd'``) step as each task's
       gradient arrives, so their state depends on the order of arrival.

    Parameters
    ----------
    n_factors
        ``k``: factors per feature (per feature and field for FFM).
    solver
        ``'ma-sgd'`` (default): local SGD passes whose deltas are averaged on
        the PS; ``'adam'``, ``'adagrad'``, ``'ftrl'``, ``'sgd'``: minibatch
        gradients pushed to that server-side optimiser (the batch's rows
        pulled, pruned); under BSP the tasks' gradients of a clock are summed
        and stepped once (a synchronous step of ``n_tasks * batch_size`` rows).
    learning_rate, power_t
        Step size of the optimiser (FTRL: its alpha); MA-SGD's local SGD step
        in epoch ``t`` is ``learning_rate / (1 + t) ** power_t``.
    reg_linear, reg_factors
        L2 strengths of the linear weights and of the factors (the bias is free).
    max_iter
        Epochs (passes over the data).
    batch_size
        Rows per step (default 256; 1 for ``'ma-sgd'``).
    local_steps
        ``'ma-sgd'``: local steps between two averagings (default: a whole pass).
    init_std
        Standard deviation of the initial factors (and linear weights).
    sync
        ``'bsp'``, ``'ssp:<s>'``, ``'asp'`` or a protocol object (``angel.SSP(2)``).
    tol, n_iter_no_change, early_stopping, validation_fraction
        A seeded ``validation_fraction`` of every partition (default 0: every
        row trains) is held out and evaluated each epoch (``val_*`` metrics in
        ``history_``); with ``early_stopping`` training stops once the
        validation loss (without validation rows: the training loss, as
        scikit-learn's ``tol``) has not improved by ``tol`` for
        ``n_iter_no_change`` epochs.  On census holding 10 % out costs the
        test log-loss 0.004 (``benchmarks/RESULTS.md``).
    dtype
        The model's dtype on the PS (default float64: the servers' arrival-order
        sums then round at 1e-16, so two fits with one ``random_state`` agree;
        float32 halves the PS memory).
    n_tasks
        Training tasks (default: one per worker thread).
    random_state, warm_start, progress, client, ps
        Seed of the initial factors, splits and shuffles (under BSP two fits
        with one seed give the same model); continue from the
        current model on ``fit``; a progress bar of epochs with the latest
        metrics (``"auto"``: shown in a terminal or Jupyter, not in batch logs;
        ``True`` / ``False``); the Dask client (default: the current one); an
        existing :class:`~daskangel.PSContext` to use.

    Attributes
    ----------
    w0_, coef_, factors_
        Bias, linear weights, factor matrix (of the copy pulled at the end of the fit).
    classes_, n_features_in_, n_iter_, t_
        Classes, features, epochs of the last fit, epochs in total.
    history_
        pandas DataFrame, one row per epoch: ``train_loss`` and ``val_*`` metrics.
"""


class _Classifier(ClassifierMixin, FMModel):
    _task = "classifier"

    def __sklearn_tags__(self) -> Any:
        # ClassifierMixin comes first and sets fresh classifier tags after FMModel's
        tags = super().__sklearn_tags__()
        assert tags.classifier_tags is not None
        tags.classifier_tags.multi_class = False
        return tags

    def decision_function(self, X: Any) -> Any:
        """The margins ``(n,)``: positive for ``classes_[1]``."""
        return self._margins(X)

    def predict(self, X: Any) -> Any:
        """Class labels (a dask array for a dask / Dataset input)."""
        m = self._margins(X)  # first: refuses an unfitted model (NotFittedError)
        classes = self.classes_

        def pick(m: np.ndarray) -> np.ndarray:
            return classes[(m > 0).astype(np.int64)]

        if hasattr(m, "dask"):
            return m.map_blocks(pick, dtype=classes.dtype)
        return pick(m)

    def predict_proba(self, X: Any) -> Any:
        """Class probabilities ``(n, 2)``."""

        def proba(m: np.ndarray) -> np.ndarray:
            p = 1.0 / (1.0 + np.exp(-np.clip(m, -500, 500)))
            return np.stack([1.0 - p, p], axis=1)

        m = self._margins(X)
        if hasattr(m, "dask"):
            return m.map_blocks(proba, dtype=np.float64, new_axis=1, chunks=(m.chunks[0], (2,)))
        return proba(m)

    def predict_log_proba(self, X: Any) -> Any:
        p = self.predict_proba(X)
        return np.log(np.clip(p, 1e-300, None)) if not hasattr(p, "dask") else p.map_blocks(np.log)


class FMClassifier(_Classifier):
    __doc__ = "Factorization machine for binary classification (logistic loss).\n" + COMMON_DOC

    def __init__(
        self, *, n_factors: int = 8, solver: str = "ma-sgd", learning_rate: float = 0.02,
        power_t: float = 0.5, reg_linear: float = 1e-5, reg_factors: float = 1e-4,
        max_iter: int = 10, batch_size: int | None = None, local_steps: int | None = None,
        init_std: float = 0.01,
        sync: Any = "bsp", tol: float | None = 1e-4, n_iter_no_change: int = 3,
        early_stopping: bool = True, validation_fraction: float = 0.0, dtype: Any = None,
        n_tasks: int | None = None, random_state: int | None = 0, warm_start: bool = False,
        progress: bool | str = "auto", client: Any = None, ps: Any = None,
    ) -> None:  # fmt: skip
        self._keep_params(locals())


class FMRegressor(RegressorMixin, FMModel):
    __doc__ = "Factorization machine for regression (squared error).\n" + COMMON_DOC
    _task = "regressor"

    def __init__(
        self, *, n_factors: int = 8, solver: str = "ma-sgd", learning_rate: float = 0.02,
        power_t: float = 0.5, reg_linear: float = 1e-5, reg_factors: float = 1e-4,
        max_iter: int = 10, batch_size: int | None = None, local_steps: int | None = None,
        init_std: float = 0.01,
        sync: Any = "bsp", tol: float | None = 1e-4, n_iter_no_change: int = 3,
        early_stopping: bool = True, validation_fraction: float = 0.0, dtype: Any = None,
        n_tasks: int | None = None, random_state: int | None = 0, warm_start: bool = False,
        progress: bool | str = "auto", client: Any = None, ps: Any = None,
    ) -> None:  # fmt: skip
        self._keep_params(locals())

    def predict(self, X: Any) -> Any:
        """Predicted values (a dask array for a dask / Dataset input)."""
        return map_rows(self._margins(X), lambda m: m, np.float64, True)


FFM_DOC = """
    fields
        The field of every feature: an array of ``n_features`` ints, a dict
        ``{field: [column, ...]}`` of the DataFrame's column groups, or ``None``:
        the Dataset's ``fields`` (:func:`daskangel.data.read_libffm`), or a
        field per column of a DataFrame.  A map that misses features is refused.
""" + COMMON_DOC.replace(
    "``k``: factors per feature (per feature and field for FFM).",
    "``k``: factors per feature and field (default 4, as libffm).",
).replace(
    "w0_, coef_, factors_\n        Bias, linear weights, factor matrix",
    "w0_, coef_, factors_, fields_\n        Bias, linear weights, factor matrix ``(n_features, n_fields * k)``, "
    "the field of every feature",
)


class FFMClassifier(_Classifier):
    __doc__ = (
        "Field-aware factorization machine for binary classification (logistic loss).\n\n"
        "Feature ``i`` keeps one factor vector per field; the pair ``(i, j)`` weighs\n"
        "``<v_{i,F(j)}, v_{j,F(i)}>``, ``O(nnz^2 k)`` a row.\n" + FFM_DOC
    )

    def __init__(
        self, *, fields: Any = None, n_factors: int = 4, solver: str = "ma-sgd",
        learning_rate: float = 0.02, power_t: float = 0.5, reg_linear: float = 1e-5,
        reg_factors: float = 1e-4, max_iter: int = 10, batch_size: int | None = None, local_steps: int | None = None,
        init_std: float = 0.01, sync: Any = "bsp", tol: float | None = 1e-4,
        n_iter_no_change: int = 3, early_stopping: bool = True, validation_fraction: float = 0.0,
        dtype: Any = None, n_tasks: int | None = None, random_state: int | None = 0,
        warm_start: bool = False, progress: bool | str = "auto", client: Any = None,
        ps: Any = None,
    ) -> None:  # fmt: skip
        self._keep_params(locals())

    def _fields(self, data: Prepared, n_features: int) -> np.ndarray | None:
        names = getattr(self, "feature_names_in_", None)
        spec = self.fields if self.fields is not None else getattr(data.ds, "fields", None)
        f = field_map(spec, n_features, None if names is None else list(names))
        old = getattr(self, "fields_", None)
        if old is not None and getattr(self, "_arrays", None) and not np.array_equal(old, f):
            raise InvalidArgumentError(
                "fields: differ from the field map the model was fitted with; fit from "
                "scratch (warm_start=False) to change them"
            )
        return f
