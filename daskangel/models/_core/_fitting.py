"""``fit`` / ``partial_fit`` of the estimators trained by epochs over a persisted Dataset.

:class:`EpochEstimator` is the :class:`._estimator.PSEstimator` of the
sparse-feature families (linear models, factorization machines): ``fit``
checks the hyper-parameters, forgets the fitted state unless ``warm_start``
keeps it, and trains ``max_iter`` epochs; ``partial_fit`` trains one more
epoch from the current model and clock, refusing ``classes`` that differ from
the first call's.  Both end by pulling what predicting needs (``_pull``), so
``predict`` reads that copy and changes nothing in the estimator.  A family
implements ``_check_params()`` (refuse a bad value before anything is made)
and ``_fit(X, y, epochs, classes)``, and records each epoch's metrics with
``_record_epochs``.

Example
-------
>>> class Toy(EpochEstimator):
...     def __init__(self, max_iter=3, warm_start=False):
...         self.max_iter, self.warm_start = max_iter, warm_start
...     def _check_params(self):
...         pass
...     def _fit(self, X, y, epochs, classes):
...         self.t_ = getattr(self, "t_", 0) + epochs
...         self.n_features_in_ = 1
...         return self
>>> Toy().fit(None).partial_fit(None).t_
4
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import InvalidArgumentError
from ._epochs import finish
from ._estimator import PSEstimator

__all__ = ["EpochEstimator"]


class EpochEstimator(PSEstimator):
    """Base of the epoch-trained estimators (see the module docstring); not used directly."""

    max_iter: int
    warm_start: bool
    classes_: np.ndarray

    def _check_params(self) -> None:
        raise NotImplementedError

    def _record_epochs(self, rows: np.ndarray, plan: Any, job: str | None = None) -> None:
        """Append the metric rows of the epochs a fit ran (``_epochs``' layout, one
        row an epoch from ``plan.epoch0 + 1`` on) to ``history_``, scored for
        ``plan``'s task (``plan``: the family's frozen plan)."""
        recs = [
            {
                "epoch": plan.epoch0 + e + 1,
                **finish(r, plan.task, binary=plan.binary, logloss=plan.logloss, nbins=plan.nbins),
            }
            for e, r in enumerate(rows)
        ]
        self._append_history(recs, plan.epoch0, job)

    def _fit(self, X: Any, y: Any, epochs: int, classes: Any) -> Any:
        raise NotImplementedError

    def fit(self, X: Any, y: Any = None, *, resume: str | None = None) -> Any:
        """Train from scratch (or from the current model with ``warm_start=True``).

        ``X``: numpy, ``scipy.sparse``, pandas, dask array / dataframe, or a
        daskangel Dataset (then ``y=None``: it carries its labels).  ``resume``:
        a snapshot taken during an earlier fit of this model with the same
        parameters and data (see :meth:`PSEstimator._resuming`).
        """
        self._check_params()
        if not self.warm_start or not hasattr(self, "n_features_in_"):
            self._forget()
        with self._resuming(resume):
            return self._fitted_copy(self._fit(X, y, self.max_iter, None))

    def _fitted_copy(self, est: Any) -> Any:
        """Pull what predicting needs at the end of a fit (scikit-learn's contract:
        ``predict`` changes nothing in the estimator)."""
        self._pull()
        return est

    def partial_fit(self, X: Any, y: Any = None, classes: Any = None) -> Any:
        """One more epoch over ``X, y``, continuing from the current model and clock."""
        self._check_params()
        if (
            classes is not None
            and hasattr(self, "classes_")
            and not np.array_equal(np.asarray(classes), self.classes_)
        ):
            raise InvalidArgumentError(
                f"classes: {np.asarray(classes).tolist()} differs from the classes of the "
                f"first partial_fit {self.classes_.tolist()}"
            )
        return self._fitted_copy(
            self._fit(X, y, 1, None if classes is None else np.asarray(classes))
        )
