"""What every linear model shares: weights on the PS, fit by the solvers, predict anywhere.

A :class:`LinearModel` keeps its weights on the parameter server: a vector of
``n_features + 1`` entries (the intercept last) or, with ``K > 1`` outputs, a
``(n_features + 1, K)`` matrix, in a :class:`~daskangel.PSContext` it opens on
the client (or the ``ps=`` it is given).  ``fit`` turns the input into a
persisted Dataset (``_input``), runs the solver's tasks with ``angel.train``
(``_solvers``, ``_lbfgs``), reads the per-epoch metrics row by row into
``history_``, and leaves the weights on the servers with a local copy pulled at
the end of the fit, which ``predict``, ``coef_`` and ``intercept_`` read (so
predicting changes nothing in the estimator).

State shapes: ``_arrays = {"weights": name, "state": {slot: name}}`` (and
``"accum": name`` once an ``adaptive=True`` fit made its sums); ``_w`` is
the pulled ``(n_features + 1, K)`` float64 copy or ``None``.

The PS context, pickling, closing and saving come from the families' shared
base, :class:`~daskangel.models._core.PSEstimator`: a pickled model carries its
pulled weights and no PS, predicts locally, and uploads them again to a new
context when it is fitted again.

Example
-------
>>> from daskangel.models import LogisticRegression               # doctest: +SKIP
>>> clf = LogisticRegression(solver="ma-sgd", max_iter=5).fit(X, y)  # doctest: +SKIP
>>> clf.history_[["epoch", "train_loss", "val_auc"]]  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import dataclasses
import uuid
from typing import Any, ClassVar

import numpy as np

from ... import config, ops
from ..._resuming import pending
from ...context import PSContext
from ...errors import InvalidArgumentError
from ...scheduler._clock_rule import BSP, as_sync
from ...train import train
from .._core import EpochEstimator, Prepared, PSEstimator, as_dataset, diverged
from .._core._epochs import row_width
from ._kernels import KINDS
from ._lbfgs import QNTask, qn_arrays
from ._params import SOLVERS, adaptive_on, check_params, make_plan
from ._solvers import SGDTask
from ._task import Plan

__all__ = ["SOLVERS", "LinearModel"]


class LinearModel(EpochEstimator):
    """Base of the linear models (see the module docstring); not used directly."""

    _loss: str = "logistic"
    _fitted: ClassVar[tuple[str, ...]] = (*PSEstimator._fitted, "classes_")
    _saved: ClassVar[tuple[str, ...]] = (*PSEstimator._saved, "classes_")
    # fitted state (instance attributes; declared here for the type checker only)
    _arrays: Any  # see "State shapes" above, or None
    _w: np.ndarray | None
    n_features_in_: int
    classes_: np.ndarray
    _task: str = "classifier"  # or "regressor"
    _logloss: bool = False

    # -- parameters -----------------------------------------------------------------

    def _check_params(self) -> None:
        check_params(self)

    # -- the PS side ------------------------------------------------------------------

    @property
    def ps_array(self) -> Any:
        """The :class:`~daskangel.PSArray` holding the weights (intercept last)."""
        if not getattr(self, "_arrays", None):
            raise AttributeError(f"{type(self).__name__} has no weights on a PS (not fitted here)")
        return self._ps.get_array(self._arrays["weights"])

    def _make_arrays(self, ps: PSContext, n_features: int, K: int) -> bool:
        """Make the weights (and an optimiser's state); True if the weights are zeros."""
        name = f"{type(self).__name__.lower()}-{uuid.uuid4().hex[:8]}"
        shape = (n_features + 1,) if K == 1 else (n_features + 1, K)
        dtype = self.dtype or "float64"  # sums in arrival order: rounding at 1e-16, not 1e-7
        init = getattr(self, "_w", None)
        zeros = init is None or init.shape != (n_features + 1, K)
        if init is not None and not zeros:
            w = ps.from_array(f"{name}.w", init[:, 0] if K == 1 else init, dtype=dtype)
        else:
            w = ps.zeros(f"{name}.w", shape, dtype, block_shape=_minibatch_blocks(self, ps, shape))
        state: dict[str, str] = {}
        opt = self._rule()
        if opt is not None:
            bound = opt.attach(ps, w, name=f"{name}.opt")
            state = {s: a.name for s, a in bound.state.items()}
        self._arrays = {
            "weights": w.name,
            "state": state,
            "rule": type(opt).__name__ if opt else None,
        }
        return zeros

    def _make_accum(self, ps: PSContext) -> bool:
        """The squared-gradient sums of ``adaptive=True`` (zeros, shaped as the weights),
        made by the first adaptive fit and kept with the weights (saved, continued);
        True if made now."""
        if self._arrays.get("accum"):
            return False
        w = ps.get_array(self._arrays["weights"])
        g = ps.zeros(f"{w.name[: -len('.w')]}.g", w.shape, "float64")
        self._arrays = {**self._arrays, "accum": g.name}
        return True

    def _rule(self) -> Any:
        if self.solver == "ftrl":
            return ops.FTRL(alpha=self.learning_rate, beta=1.0, l1=self.l1, l2=self.alpha)
        if self.solver != "sgd":
            return None
        lr = self.learning_rate
        return {
            "sgd": lambda: ops.SGD(lr=lr, l1=self.l1, l2=self.alpha),
            "momentum": lambda: ops.Momentum(lr=lr, l2=self.alpha),
            "adagrad": lambda: ops.AdaGrad(lr=lr, l2=self.alpha),
            "adam": lambda: ops.Adam(lr=lr, l2=self.alpha),
        }[self.optimizer]()

    def _bound(self) -> Any:
        rule = self._rule()
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
        v = np.asarray(self.ps_array.get(), np.float64)
        self._w = v.reshape(v.shape[0], -1)
        return self._w

    # -- fitting ----------------------------------------------------------------------

    def _n_outputs(self, classes: np.ndarray | None) -> int:
        if self._task == "regressor":
            return 1
        assert classes is not None
        return 1 if len(classes) <= 2 else len(classes)

    def _kind(self, K: int) -> int:
        if self._loss == "logistic" and K > 1:
            return KINDS["softmax"]
        return KINDS[self._loss]

    def _reset(self) -> None:
        self._w = None

    def _fit(self, X: Any, y: Any, epochs: int, classes: Any) -> LinearModel:
        client = self._client()
        n_tasks = self._n_tasks(client)
        classifier = self._task == "classifier"
        known = getattr(self, "classes_", None) if classes is None else classes
        data = as_dataset(self, X, y, client, n_tasks, classifier=classifier, classes=known)
        try:
            return self._fit_dataset(client, data, epochs)
        finally:
            data.release()

    def _fit_dataset(self, client: Any, data: Prepared, epochs: int) -> LinearModel:
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
            classes = data.classes if not hasattr(self, "classes_") else self.classes_
            if classes is None or len(classes) < 2:
                raise InvalidArgumentError(
                    f"y: {type(self).__name__} needs samples of at least 2 classes, got "
                    f"{0 if classes is None else len(classes)} class"
                )
            self.classes_ = np.asarray(classes)
        K = self._n_outputs(getattr(self, "classes_", None))
        ps = self._context(client)
        self.n_features_in_ = n_features
        zeros = False  # every array this fit trains was made now as zeros
        if not getattr(self, "_arrays", None):
            zeros = self._make_arrays(ps, n_features, K)
        if self.solver == "ma-sgd" and adaptive_on(self):
            zeros = self._make_accum(ps) and zeros
        self._w = None
        plan = self._plan(data, n_features, K, epochs, len(ds.partitions))
        if zeros and not pending():  # (a resumed fit loads a snapshot into them)
            plan = dataclasses.replace(plan, zero_start=True)
        met = ps.zeros(plan.metrics, (max(plan.epochs, 1), row_width(plan.nbins)), "float64")
        extra: list[str] = []
        try:
            with diverged(self):  # a NaN model is no model: back to unfitted
                if self.solver in ("lbfgs", "owlqn"):
                    w = ps.get_array(plan.weights)
                    extra = qn_arrays(plan.weights, plan.memory)
                    for n in extra:
                        ps.zeros_like(w, name=n)
                    n_parts = len(ds.partitions)
                    res = train(
                        ps, QNTask(plan), ds, groups=1, group_size=n_parts, epochs=plan.epochs,
                        array_sync={plan.weights: BSP()}, progress=self.progress, unit="epoch",
                    )  # fmt: skip
                else:
                    per = plan.rounds * plan.clocks_per_round
                    res = train(
                        ps, SGDTask(plan), ds, sync=as_sync(self.sync), epochs=plan.epochs * per,
                        progress=self.progress, unit="epoch", clocks_per_unit=per,
                    )  # fmt: skip
                done = min(int(r["epochs"]) for r in res.results) if res.results else 0
                if plan.rounds > 1 or self.solver in ("lbfgs", "owlqn"):
                    done = min(done, plan.epochs)
                rows = np.asarray(met.get()) if done else np.zeros((0, 1))
        finally:
            for n in [met.name, *extra]:
                with contextlib.suppress(Exception):
                    ps.drop(n)
        self._record_epochs(rows[: max(done, 0)], plan, res.job)
        self.t_ = int(getattr(self, "t_", 0)) + done
        self.n_iter_ = done
        self.train_result_ = res
        self._pull()  # predicting reads this copy and changes nothing (scikit-learn's contract)
        return self

    def _plan(self, data: Prepared, n_features: int, K: int, epochs: int, n_parts: int) -> Plan:
        return make_plan(self, data, n_features, K, epochs)

    # -- predicting ---------------------------------------------------------------------

    def _weights(self) -> np.ndarray:
        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(self, "n_features_in_")
        w = self._pull()
        if w is None:
            raise InvalidArgumentError(
                f"{type(self).__name__}: the weights are gone (closed context)"
            )
        return w

    @property
    def coef_(self) -> np.ndarray:
        w = self._weights()[:-1]
        if self._task == "regressor":
            return w[:, 0].copy()
        return w.T.copy()

    @property
    def intercept_(self) -> Any:
        b = self._weights()[-1]
        if self._task == "regressor":
            return float(b[0])
        return b.copy()

    def _margins(self, X: Any) -> Any:
        from ._predict import margins_of

        return margins_of(self, X, self._weights())

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags


def _minibatch_blocks(est: Any, ps: PSContext, shape: tuple[int, ...]) -> tuple[int, ...] | None:
    """Solvers ``'sgd'`` / ``'ftrl'``: the weights in one block per server (``None``: the
    default layout, ``daskangel.partition.blocks-per-server`` blocks a server).

    Each minibatch's step-pull is served block by block (views, reads and staged
    writes of the weights and every state array): with two blocks a server the
    workers spent ~10 % more CPU a fit (1.07-1.17 vs 0.95-1.04 s, 3 paired fits,
    2026-11-26T22:03Z).  Not past ``daskangel.partition.max-block-bytes``.
    """
    if est.solver not in ("sgd", "ftrl"):
        return None
    n = max(1, len(ps.servers))
    rows = -(-shape[0] // n)
    width = 1 if len(shape) == 1 else shape[1]
    if rows * width * 8 > config.get_bytes("daskangel.partition.max-block-bytes"):
        return None
    return (rows,) if len(shape) == 1 else (rows, shape[1])
