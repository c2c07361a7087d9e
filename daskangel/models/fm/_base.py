"""What every factorization machine shares: its rows on the PS, the fit, margins anywhere.

A model keeps one PS matrix of ``n_features + 1`` rows: row ``i`` is feature
``i``'s linear weight (column 0) and its factors (``n_factors`` columns, or
``n_fields * n_factors`` for a field-aware model), the last row's column 0 is
the bias.  Factors start ``N(0, init_std^2)`` from ``random_state`` (the
linear weights too: one seeded draw per entry, whatever the partitioning),
and a server-side optimiser keeps its state in matrices co-partitioned with it.
``fit`` turns the input into a persisted Dataset (``_core._input``), runs one
:class:`~._solvers.FMTask` per partition with ``angel.train``, finishes the
per-epoch metrics rows into ``history_`` and leaves the model on the servers
with a float64 copy pulled at the end of the fit, which predicting reads (so
``predict`` changes nothing in the estimator).  A fit whose loss or model turns
non-finite raises :class:`~daskangel.errors.DivergedError` and leaves the
estimator unfitted.

State shapes: ``_arrays = {"weights": name, "state": {slot: name}, "rule": name}``;
``_w`` is the pulled float64 copy or ``None``.

Example
-------
>>> from daskangel.models import FMClassifier                      # doctest: +SKIP
>>> clf = FMClassifier(n_factors=8, max_iter=10).fit(X, y)          # doctest: +SKIP
>>> clf.history_[["epoch", "train_loss", "val_auc"]]               # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import uuid
from typing import Any, ClassVar

import numpy as np

from ... import ops
from ...context import PSContext
from ...errors import InvalidArgumentError
from ...scheduler._clock_rule import as_sync
from ...train import train
from .._core import EpochEstimator, Prepared, PSEstimator, as_dataset, check_finite, diverged
from .._core._epochs import row_width
from ._params import check_params, make_plan, rule_of
from ._predict import margins_of
from ._solvers import FMTask

__all__ = ["FMModel"]


class FMModel(EpochEstimator):
    """Base of the factorization machines (see the module docstring); not used directly."""

    _task: str = "classifier"
    _fitted: ClassVar[tuple[str, ...]] = (*PSEstimator._fitted, "classes_", "fields_")
    _saved: ClassVar[tuple[str, ...]] = (*PSEstimator._saved, "classes_", "fields_")
    _arrays: Any
    _w: np.ndarray | None
    n_features_in_: int
    classes_: np.ndarray
    fields_: np.ndarray | None

    def _check_params(self) -> None:
        check_params(self)

    # -- fields (FFM overrides) -------------------------------------------------------

    def _fields(self, data: Prepared, n_features: int) -> np.ndarray | None:
        """The field of every feature (int32), or None for a plain FM."""
        return None

    def _width(self) -> int:
        f = getattr(self, "fields_", None)
        nf = 0 if f is None else int(f.max(initial=0)) + 1
        return 1 + max(nf, 1) * int(self.n_factors)

    # -- the PS side ------------------------------------------------------------------

    @property
    def ps_array(self) -> Any:
        """The :class:`~daskangel.PSArray` of the model rows (bias last)."""
        if not getattr(self, "_arrays", None):
            raise AttributeError(f"{type(self).__name__} has no model on a PS (not fitted here)")
        return self._ps.get_array(self._arrays["weights"])

    def _make_arrays(self, ps: PSContext, n_features: int) -> None:
        name = f"{type(self).__name__.lower()}-{uuid.uuid4().hex[:8]}"
        shape = (n_features + 1, self._width())
        dtype = self.dtype or "float64"  # sums in arrival order: rounding at 1e-16, not 1e-7
        init = getattr(self, "_w", None)
        if init is not None and init.shape == shape:
            w = ps.from_array(f"{name}.w", init, dtype=dtype)
        else:
            seed = int(self.random_state or 0)
            w = ps.random(
                f"{name}.w", shape, seed=seed, dist="normal", scale=float(self.init_std),
                dtype=dtype,
            )  # fmt: skip
        opt = rule_of(self)
        state: dict[str, str] = {}
        if opt is not None:
            bound = opt.attach(ps, w, name=f"{name}.opt")
            state = {s: a.name for s, a in bound.state.items()}
        self._arrays = {
            "weights": w.name,
            "state": state,
            "rule": type(opt).__name__ if opt else None,
        }

    def _bound(self) -> Any:
        rule = rule_of(self)
        if rule is None:
            return None
        ps = self._ps
        w = ps.get_array(self._arrays["weights"])
        state = {s: ps.get_array(n) for s, n in self._arrays["state"].items()}
        return ops.BoundOptimizer(rule, w, state)

    def _pull(self) -> np.ndarray | None:
        if getattr(self, "_w", None) is not None:
            return self._w
        if not self._on_ps():
            return getattr(self, "_w", None)
        self._w = np.asarray(self.ps_array.get(), np.float64)
        return self._w

    def _reset(self) -> None:
        self._w = None

    # -- fitting (``fit`` / ``partial_fit``: _core.EpochEstimator) ---------------------

    def _fit(self, X: Any, y: Any, epochs: int, classes: Any) -> FMModel:
        client = self._client()
        n_tasks = self._n_tasks(client)
        classifier = self._task == "classifier"
        known = getattr(self, "classes_", None) if classes is None else classes
        data = as_dataset(self, X, y, client, n_tasks, classifier=classifier, classes=known)
        try:
            return self._fit_dataset(data, epochs)
        finally:
            data.release()

    def _check_classes(self, data: Prepared) -> None:
        classes = data.classes if not hasattr(self, "classes_") else self.classes_
        n = 0 if classes is None else len(classes)
        if n != 2:
            raise InvalidArgumentError(
                f"y: Only binary classification is supported. {type(self).__name__} needs "
                f"samples of exactly 2 classes, got {n} class{'' if n == 1 else 'es'}"
            )
        self.classes_ = np.asarray(classes)

    def _fit_dataset(self, data: Prepared, epochs: int) -> FMModel:
        ds = data.ds
        n_features = int(ds.n_features)
        if hasattr(self, "n_features_in_") and n_features != self.n_features_in_:
            if n_features > self.n_features_in_ or not data.native:
                raise InvalidArgumentError(
                    f"X has {n_features} features, but {type(self).__name__} is expecting "
                    f"{self.n_features_in_} features as input"
                )
            n_features = self.n_features_in_  # a libsvm file whose last features are unused
        if self._task == "classifier":
            self._check_classes(data)
        check_finite(data)  # a Dataset or dask input (local ones were checked already)
        fields = self._fields(data, n_features)
        ps = self._context(self._client())
        self.n_features_in_ = n_features
        self.fields_ = fields
        if not getattr(self, "_arrays", None):
            self._make_arrays(ps, n_features)
        self._w = None
        n_fields = 0 if fields is None else int(fields.max(initial=0)) + 1
        plan = make_plan(self, data, n_features, epochs, fields, n_fields, self._bound())
        met = ps.zeros(plan.metrics, (max(plan.epochs, 1), row_width(plan.nbins)), "float64")
        made = [met.name]
        try:
            if plan.acc:
                made.append(ps.zeros_like(ps.get_array(plan.weights), plan.acc, "float64").name)
            per = plan.clock_rounds.clocks_per_epoch
            with diverged(self):
                res = train(
                    ps, FMTask(plan), ds, sync=as_sync(self.sync), epochs=plan.epochs * per,
                    progress=self.progress, unit="epoch", clocks_per_unit=per,
                )  # fmt: skip
            done = min(int(r["epochs"]) for r in res.results) if res.results else 0
            done = min(done, plan.epochs)
            rows = np.asarray(met.get()) if done else np.zeros((0, 1))
        finally:
            for n in made:
                with contextlib.suppress(Exception):
                    ps.drop(n)
        self._record_epochs(rows[: max(done, 0)], plan, res.job)
        self.t_ = int(getattr(self, "t_", 0)) + done
        self.n_iter_ = done
        self.train_result_ = res
        return self

    # -- predicting ---------------------------------------------------------------------

    def _model(self) -> np.ndarray:
        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(self, "n_features_in_")
        w = self._pull()
        if w is None:
            raise InvalidArgumentError(f"{type(self).__name__}: the model is gone (closed context)")
        return w

    def _margins(self, X: Any) -> Any:
        return margins_of(self, X, self._model(), getattr(self, "fields_", None))

    @property
    def w0_(self) -> float:
        """The bias."""
        return float(self._model()[-1, 0])

    @property
    def coef_(self) -> np.ndarray:
        """The linear weights ``(n_features,)``."""
        return self._model()[:-1, 0].copy()

    @property
    def factors_(self) -> np.ndarray:
        """The factor matrix ``(n_features, n_factors)`` (FFM: ``n_fields * n_factors`` columns)."""
        return self._model()[:-1, 1:].copy()

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        if tags.classifier_tags is not None:
            tags.classifier_tags.multi_class = False
        return tags
