"""The estimator machinery shared by every linear model: fit on the PS, predict anywhere.

A :class:`LinearModel` keeps its weights on the parameter server: a vector of
``n_features + 1`` entries (the intercept last) or, with ``K > 1`` outputs, a
``(n_features + 1, K)`` matrix, in a :class:`~daskangel.PSContext` it opens on
the client (or the ``ps=`` it is given).  ``fit`` turns the input into a
persisted Dataset (``_input``), runs the solver's tasks with ``angel.train``
(``_solvers``, ``_lbfgs``), reads the per-epoch metrics row by row into
``history_``, and leaves the weights on the servers; ``coef_`` /
``intercept_`` pull them on demand (cached until the next fit).

State shapes: ``_arrays = {"weights": name, "state": {slot: name}}``; ``_w`` is
the pulled ``(n_features + 1, K)`` float64 copy or ``None``.

A pickled model carries its pulled weights and no PS: it predicts locally, and
fitting it again uploads them to a new context.

Example
-------
>>> from daskangel.models import LogisticRegression               # doctest: +SKIP
>>> clf = LogisticRegression(solver="ma-sgd", max_iter=5).fit(X, y)
>>> clf.history_[["epoch", "train_loss", "val_auc"]]
"""

from __future__ import annotations

import contextlib
import threading
import uuid
import warnings
import weakref
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator

from .. import config, ops
from ..context import PSContext
from ..errors import InvalidArgumentError
from ..scheduler._clock_rule import BSP, as_sync
from ..train import train
from ._inplace import in_place_order
from ._input import Prepared, as_dataset
from ._kernels import KINDS
from ._lbfgs import QNTask, qn_arrays
from ._metrics import finish, row_width
from ._solvers import SGDTask, _per_round
from ._task import Plan

__all__ = ["SOLVERS", "LinearModel"]

SOLVERS = ("sgd", "ma-sgd", "ftrl", "lbfgs", "owlqn")
SERVER_OPTIMIZERS = ("sgd", "momentum", "adagrad", "adam")


def _close(ps: PSContext) -> None:
    """Free a garbage-collected model's context (from a thread: GC may run on the loop)."""
    if ps.closed or getattr(ps.client, "status", None) != "running":
        return

    def run() -> None:
        with contextlib.suppress(Exception):
            ps.close()

    threading.Thread(target=run, name="daskangel-model-close", daemon=True).start()


class LinearModel(BaseEstimator):
    """Base of the linear models (see the module docstring); not used directly."""

    _loss: str = "logistic"
    # fitted state (instance attributes; declared here for the type checker only)
    _arrays: Any  # see "State shapes" above, or None
    _w: np.ndarray | None
    n_features_in_: int
    classes_: np.ndarray
    _task: str = "classifier"  # or "regressor"
    _logloss: bool = False

    # -- parameters -----------------------------------------------------------------

    def _check_params(self) -> None:
        if self.solver not in SOLVERS:
            raise InvalidArgumentError(f"solver: expected one of {SOLVERS}, got {self.solver!r}")
        _hot_keys()  # a bad config value is refused before any array is made
        in_place_order(0)  # (likewise)
        for name in ("max_iter", "n_iter_no_change", "memory"):
            v = getattr(self, name, 1)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise InvalidArgumentError(f"{name}: expected an int >= 1, got {v!r}")
        for name in ("alpha", "l1"):
            v = getattr(self, name, 0.0)
            if not isinstance(v, (int, float, np.number)) or not np.isfinite(v) or v < 0:
                raise InvalidArgumentError(f"{name}: expected a finite number >= 0, got {v!r}")
        lr = self.learning_rate
        if not isinstance(lr, (int, float, np.number)) or not lr > 0 or not np.isfinite(lr):
            raise InvalidArgumentError(f"learning_rate: expected a positive number, got {lr!r}")
        vf = self.validation_fraction
        if not isinstance(vf, (int, float, np.number)) or not 0 <= vf < 1:
            raise InvalidArgumentError(
                f"validation_fraction: expected a number in [0, 1), got {vf!r}"
            )
        for name in ("batch_size", "local_steps", "n_tasks"):
            v = getattr(self, name)
            if v is not None and (
                isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1
            ):
                raise InvalidArgumentError(f"{name}: expected None or an int >= 1, got {v!r}")
        if self.optimizer not in SERVER_OPTIMIZERS:
            raise InvalidArgumentError(
                f"optimizer: expected one of {SERVER_OPTIMIZERS}, got {self.optimizer!r}"
            )
        as_sync(self.sync)
        if self.solver == "owlqn" and not self.l1:
            warnings.warn("solver='owlqn' with l1=0 is plain L-BFGS", UserWarning, stacklevel=3)
        if self.l1 and self.solver == "lbfgs":
            raise InvalidArgumentError(
                "l1: solver='lbfgs' cannot handle an L1 penalty; use solver='owlqn'"
            )

    # -- the PS side ------------------------------------------------------------------

    def _client(self) -> Any:
        if self.client is not None:
            return self.client
        if self.ps is not None:
            return self.ps.client
        from distributed import default_client

        return default_client()

    def _context(self, client: Any) -> PSContext:
        ps = getattr(self, "_ps", None)
        if ps is not None and not ps.closed:
            return ps
        if self.ps is not None:
            self._ps = self.ps
        else:
            self._ps = PSContext(client)
            self._ps_finalizer = weakref.finalize(self, _close, self._ps)
        self._arrays = None
        return self._ps

    def close(self) -> None:
        """Pull the weights (so the model still predicts) and free its PS arrays."""
        self._pull()
        ps = getattr(self, "_ps", None)
        if ps is not None and self.ps is None:
            ps.close()
        elif ps is not None and self._arrays:
            for n in [self._arrays["weights"], *self._arrays["state"].values()]:
                with contextlib.suppress(Exception):
                    ps.drop(n)
        self._ps = None
        self._arrays = None

    @property
    def ps_array(self) -> Any:
        """The :class:`~daskangel.PSArray` holding the weights (intercept last)."""
        if not getattr(self, "_arrays", None):
            raise AttributeError(f"{type(self).__name__} has no weights on a PS (not fitted here)")
        return self._ps.get_array(self._arrays["weights"])

    def _make_arrays(self, ps: PSContext, n_features: int, K: int) -> None:
        name = f"{type(self).__name__.lower()}-{uuid.uuid4().hex[:8]}"
        shape = (n_features + 1,) if K == 1 else (n_features + 1, K)
        dtype = self.dtype or ("float64" if self.solver in ("lbfgs", "owlqn") else "float32")
        init = getattr(self, "_w", None)
        if init is not None and init.shape == (n_features + 1, K):
            w = ps.from_array(f"{name}.w", init[:, 0] if K == 1 else init, dtype=dtype)
        else:
            w = ps.zeros(f"{name}.w", shape, dtype)
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
        if not getattr(self, "_arrays", None) or getattr(self, "_ps", None) is None:
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

    def fit(self, X: Any, y: Any = None) -> LinearModel:
        """Train from scratch (or from the current weights with ``warm_start=True``).

        ``X``: numpy, ``scipy.sparse``, pandas, dask array / dataframe, or a
        daskangel Dataset (then ``y=None``: it carries its labels).
        """
        self._check_params()
        if not self.warm_start or not hasattr(self, "n_features_in_"):
            self._forget()
        return self._fit(X, y, self.max_iter, None)

    def partial_fit(self, X: Any, y: Any = None, classes: Any = None) -> LinearModel:
        """One more epoch over ``X, y``, continuing from the current weights and clock."""
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
        return self._fit(X, y, 1, None if classes is None else np.asarray(classes))

    def _forget(self) -> None:
        if getattr(self, "_arrays", None) and getattr(self, "_ps", None) is not None:
            for n in [self._arrays["weights"], *self._arrays["state"].values()]:
                with contextlib.suppress(Exception):
                    self._ps.drop(n)
        self._arrays = None
        self._w = None
        for a in ("classes_", "n_features_in_", "t_", "n_iter_", "history_"):
            if hasattr(self, a):
                delattr(self, a)

    def _fit(self, X: Any, y: Any, epochs: int, classes: Any) -> LinearModel:
        client = self._client()
        n_tasks = self.n_tasks or sum(
            w["nthreads"] for w in client.scheduler_info(n_workers=-1)["workers"].values()
        )
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
        if not getattr(self, "_arrays", None):
            self._make_arrays(ps, n_features, K)
        self._w = None
        plan = self._plan(data, n_features, K, epochs, len(ds.partitions))
        met = ps.zeros(plan.metrics, (max(plan.epochs, 1), row_width(plan.nbins)), "float64")
        extra: list[str] = []
        try:
            if self.solver in ("lbfgs", "owlqn"):
                w = ps.get_array(plan.weights)
                extra = qn_arrays(plan.weights, plan.memory)
                for n in extra:
                    ps.zeros_like(w, name=n)
                n_parts = len(ds.partitions)
                res = train(
                    ps, QNTask(plan), ds, groups=1, group_size=n_parts, epochs=plan.epochs,
                    array_sync={plan.weights: BSP()}, progress=self.progress,
                )  # fmt: skip
            else:
                res = train(
                    ps, SGDTask(plan), ds, sync=as_sync(self.sync),
                    epochs=plan.epochs * plan.rounds, progress=self.progress,
                )  # fmt: skip
            done = min(int(r["epochs"]) for r in res.results) if res.results else 0
            if plan.rounds > 1 or self.solver in ("lbfgs", "owlqn"):
                done = min(done, plan.epochs)
            rows = np.asarray(met.get()) if done else np.zeros((0, 1))
        finally:
            for n in [met.name, *extra]:
                with contextlib.suppress(Exception):
                    ps.drop(n)
        self._record(rows[: max(done, 0)], plan)
        self.t_ = int(getattr(self, "t_", 0)) + done
        self.n_iter_ = done
        self.train_result_ = res
        return self

    def _plan(self, data: Prepared, n_features: int, K: int, epochs: int, n_parts: int) -> Plan:
        ds = data.ds
        vf = float(self.validation_fraction)
        train_rows = tuple(int(i.n_rows - round(i.n_rows * vf)) for i in ds.info)
        solver = self.solver
        batch = self.batch_size or (1 if solver == "ma-sgd" else 64)
        if solver in ("lbfgs", "owlqn"):
            batch = max(train_rows) if train_rows else 1
        classes = None
        if self._task == "classifier":
            classes = (
                tuple(float(i) for i in range(len(self.classes_)))
                if data.encoded
                else tuple(float(c) for c in self.classes_)
            )
        staleness = as_sync(self.sync).staleness
        early = bool(self.early_stopping) and staleness is not None
        if self.early_stopping and staleness is None:
            warnings.warn(
                "early_stopping needs BSP or SSP; ASP trains every epoch", UserWarning, stacklevel=4
            )
        monitor = "val_loss" if vf > 0 else "train_loss"
        plan = Plan(
            weights=self._arrays["weights"],
            metrics=f"{self._arrays['weights']}.m{uuid.uuid4().hex[:6]}",
            n_features=n_features,
            n_outputs=K,
            kind=self._kind(K),
            eps=float(getattr(self, "epsilon", 1.35)),
            has_bias=bool(self.fit_intercept),
            task=self._task,
            classes=classes,
            logloss=self._loss == "logistic",
            solver=solver,
            eta0=float(self.learning_rate),
            power_t=float(self.power_t),
            alpha=float(self.alpha),
            l1=float(self.l1),
            batch=int(batch),
            local_steps=self.local_steps,
            epochs=int(epochs),
            epoch0=int(getattr(self, "t_", 0)),
            val_fraction=vf,
            seed=int(self.random_state or 0),
            train_rows=train_rows,
            rounds=1,
            tol=float(self.tol)
            if (self.tol is not None and (early or solver in ("lbfgs", "owlqn")))
            else None,
            patience=int(self.n_iter_no_change),
            monitor=monitor,
            prune=bool(self.prune),
            nbins=int(config.get("daskangel.models.auc-bins")),
            hot=_hot_keys() if solver == "ma-sgd" else 0,
            optimizer=self._bound(),
            decay_grad=solver == "sgd" and self.optimizer in ("sgd", "momentum"),
            memory=int(self.memory),
            average=bool(getattr(self, "average", False)) and not self.l1,
        )
        if solver == "ma-sgd":
            block, streams = in_place_order(n_features)
            plan = _replace(plan, in_place_block=block, in_place_streams=streams)
        if solver not in ("lbfgs", "owlqn") and train_rows:
            per = _per_round(plan)
            rounds = max(1, -(-max(train_rows) // per))
            plan = _replace(plan, rounds=rounds)
        return plan

    def _record(self, rows: np.ndarray, plan: Plan) -> None:
        import pandas as pd

        recs = []
        for e, r in enumerate(rows):
            m = finish(r, plan.task, binary=plan.binary, logloss=plan.logloss, nbins=plan.nbins)
            recs.append({"epoch": plan.epoch0 + e + 1, **m})
        new = pd.DataFrame(recs)
        old = getattr(self, "history_", None)
        self.history_ = (
            new if old is None or plan.epoch0 == 0 else pd.concat([old, new], ignore_index=True)
        )

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

    def __getstate__(self) -> dict[str, Any]:
        with contextlib.suppress(Exception):
            self._pull()
        state = dict(self.__dict__)
        for k in ("_ps", "_ps_finalizer", "_arrays", "train_result_"):
            state.pop(k, None)
        return state

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags

    def save(self, url: str) -> None:
        """Save weights (and optimiser state) with the snapshot layer, parameters as JSON."""
        from ._io import save_model

        save_model(self, url)


def _hot_keys() -> int:
    value = config.get("daskangel.models.hot-keys")
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidArgumentError(
            f"daskangel.models.hot-keys: expected an int >= 0 (0: off), got {value!r}"
        )
    return value


def _replace(plan: Plan, **kw: Any) -> Plan:
    import dataclasses

    return dataclasses.replace(plan, **kw)
