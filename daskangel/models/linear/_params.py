"""An estimator's hyper-parameters: checked before a fit, frozen into its :class:`Plan`.

:func:`check_params` refuses a bad value (naming it, with what was expected and
what came) before any array is made; :func:`make_plan` turns the estimator, the
prepared data and the driver's ``daskangel.models.*`` config into the plain
values every training task receives.

Example
-------
>>> from daskangel.models import LogisticRegression
>>> check_params(LogisticRegression(max_iter=0))
Traceback (most recent call last):
...
daskangel.errors.InvalidArgumentError: max_iter: expected an int >= 1, got 0
"""

from __future__ import annotations

import dataclasses
import uuid
import warnings
from typing import Any

import numpy as np

from ... import config
from ...errors import InvalidArgumentError
from ...scheduler._clock_rule import as_sync
from .._core._input import Prepared
from .._core._params import (
    check_fraction,
    check_int,
    check_number,
    early_stopping_on,
    epoch_fields,
)
from .._core._params import train_rows as _train_rows
from ._exchange import dense_fraction
from ._inplace import in_place_order
from ._minibatch import sgd_fuse, sgd_group, sgd_prefetch, sgd_pull_group
from ._solvers import _per_round
from ._task import Plan

__all__ = ["SERVER_OPTIMIZERS", "SOLVERS", "adaptive_on", "check_params", "make_plan"]

SOLVERS = ("sgd", "ma-sgd", "ftrl", "lbfgs", "owlqn")
SERVER_OPTIMIZERS = ("sgd", "momentum", "adagrad", "adam")


def check_params(self: Any) -> None:
    """Refuse a bad hyper-parameter or config value (named) before anything is made."""
    if self.solver not in SOLVERS:
        raise InvalidArgumentError(f"solver: expected one of {SOLVERS}, got {self.solver!r}")
    _hot_keys()  # a bad config value is refused before any array is made
    in_place_order(0)  # (likewise)
    dense_fraction()
    for name in ("max_iter", "n_iter_no_change", "memory"):
        if hasattr(self, name):
            check_int(self, name)
    for name in ("alpha", "l1"):
        if hasattr(self, name):
            check_number(self, name, positive=False)
    check_number(self, "learning_rate", positive=True)
    check_fraction(self, "validation_fraction")
    for name in ("batch_size", "local_steps", "n_tasks"):
        check_int(self, name, none=True)
    if self.optimizer not in SERVER_OPTIMIZERS:
        raise InvalidArgumentError(
            f"optimizer: expected one of {SERVER_OPTIMIZERS}, got {self.optimizer!r}"
        )
    as_sync(self.sync)
    tol = self.tol
    ok = isinstance(tol, (int, float, np.number)) and not isinstance(tol, bool)
    if tol is not None and not _is_auto(tol) and not (ok and np.isfinite(tol) and tol >= 0):
        raise InvalidArgumentError(
            f"tol: expected None, 'auto' or a finite number >= 0, got {tol!r}"
        )
    if _is_auto(tol):
        _tol(self)  # (a bad daskangel.models.auto-tol value: refused before any array)
    adaptive = getattr(self, "adaptive", False)
    if not isinstance(adaptive, (bool, np.bool_)) and not _is_auto(adaptive):
        raise InvalidArgumentError(f"adaptive: expected True, False or 'auto', got {adaptive!r}")
    if adaptive_on(self) and self.solver != "ma-sgd":
        raise InvalidArgumentError(
            f"adaptive: per-feature adaptive steps are an option of solver='ma-sgd', got "
            f"solver={self.solver!r} (solver='sgd' steps on the servers: optimizer='adagrad')"
        )
    if self.solver == "owlqn" and not self.l1:
        warnings.warn("solver='owlqn' with l1=0 is plain L-BFGS", UserWarning, stacklevel=4)
    if self.l1 and self.solver == "lbfgs":
        raise InvalidArgumentError(
            "l1: solver='lbfgs' cannot handle an L1 penalty; use solver='owlqn'"
        )


QN = ("lbfgs", "owlqn")


def _tol(self: Any) -> float:
    """``tol`` of a fit; ``'auto'`` (LogisticRegression's default):
    ``daskangel.models.auto-tol.epochs`` for the epoch solvers' early stopping (5e-3:
    a relative gain of 0.5 % an epoch), ``daskangel.models.auto-tol.quasi-newton`` for
    quasi-Newton (1e-4, its relative decrease per iteration)."""
    if _is_auto(self.tol):
        return _auto_tol("quasi-newton" if self.solver in QN else "epochs")
    return float(self.tol)


def _auto_tol(kind: str) -> float:
    """``daskangel.models.auto-tol.<kind>``, checked: a finite number >= 0."""
    key = f"daskangel.models.auto-tol.{kind}"
    value = config.get(key)
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not (ok and np.isfinite(value) and value >= 0):
        raise InvalidArgumentError(f"{key}: expected a finite number >= 0, got {value!r}")
    return float(value)


def _is_auto(value: Any) -> bool:
    return isinstance(value, str) and value == "auto"


def adaptive_on(self: Any) -> bool:
    """Whether a fit of ``self`` takes per-feature adaptive steps: ``adaptive=True``,
    or ``'auto'`` (LogisticRegression's default) with ``solver='ma-sgd'``."""
    adaptive = getattr(self, "adaptive", False)
    if _is_auto(adaptive):
        return bool(self.solver == "ma-sgd")
    return bool(adaptive)


def make_plan(self: Any, data: Prepared, n_features: int, K: int, epochs: int) -> Plan:
    """The frozen :class:`Plan` of a fit of estimator ``self`` on ``data``."""
    ds = data.ds
    vf = float(self.validation_fraction)
    train_rows = _train_rows(ds, vf)
    solver = self.solver
    batch = self.batch_size or (1 if solver == "ma-sgd" else _sgd_batch())
    if solver in ("lbfgs", "owlqn"):
        batch = max(train_rows) if train_rows else 1
    classes = None
    if self._task == "classifier":
        classes = (
            tuple(float(i) for i in range(len(self.classes_)))
            if data.encoded
            else tuple(float(c) for c in self.classes_)
        )
    early = early_stopping_on(self)
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
        **epoch_fields(self, batch, epochs, vf, train_rows),
        tol=_tol(self) if (self.tol is not None and (early or solver in QN)) else None,
        patience=int(self.n_iter_no_change),
        monitor=monitor,
        prune=bool(self.prune),
        nbins=int(config.get("daskangel.models.auc-bins")),
        hot=_hot_keys() if solver == "ma-sgd" else 0,
        optimizer=self._bound(),
        decay_grad=solver == "sgd" and self.optimizer in ("sgd", "momentum"),
        memory=int(self.memory),
        average=bool(getattr(self, "average", False)) and not self.l1,
        adaptive=adaptive_on(self),
        accum=str(self._arrays.get("accum") or ""),
    )
    if solver == "ma-sgd":
        block, streams = in_place_order(n_features)  # (16 bytes a feature, adaptive or not)
        plan = _replace(
            plan,
            in_place_block=block,
            in_place_streams=streams,
            read_barrier=as_sync(self.sync).staleness == 0,
            dense_keys=dense_fraction(),
        )
    if solver in ("sgd", "ftrl"):
        plan = _replace(
            plan,
            group=sgd_group(),
            pull_group=sgd_pull_group(),
            prefetch=sgd_prefetch(),
            fuse=sgd_fuse() if solver == "sgd" else 1,  # (FTRL's l1 / l2 change every step)
        )
    if solver not in ("lbfgs", "owlqn") and train_rows:
        per = _per_round(plan)
        rounds = max(1, -(-max(train_rows) // per))
        plan = _replace(plan, rounds=rounds)
    return plan


def _sgd_batch() -> int:
    """``daskangel.models.sgd-batch``: the default minibatch of ``'sgd'`` / ``'ftrl'``."""
    value = config.get("daskangel.models.sgd-batch")
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidArgumentError(
            f"daskangel.models.sgd-batch: expected an int >= 1, got {value!r}"
        )
    return value


def _hot_keys() -> int:
    value = config.get("daskangel.models.hot-keys")
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidArgumentError(
            f"daskangel.models.hot-keys: expected an int >= 0 (0: off), got {value!r}"
        )
    return value


def _replace(plan: Plan, **kw: Any) -> Plan:
    return dataclasses.replace(plan, **kw)
