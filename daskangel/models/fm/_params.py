"""A factorization machine's hyper-parameters: checked before a fit, frozen into its :class:`Plan`.

Example
-------
>>> from daskangel.models import FMClassifier
>>> check_params(FMClassifier(n_factors=0))
Traceback (most recent call last):
...
daskangel.errors.InvalidArgumentError: n_factors: expected an int >= 1, got 0
"""

from __future__ import annotations

import dataclasses
import hashlib
import uuid
import warnings
from typing import Any

import numpy as np

from ... import config, ops
from ...errors import InvalidArgumentError
from ...scheduler._clock_rule import as_sync
from .._core._input import Prepared
from ._kernels import LOGISTIC, SQUARED
from ._solvers import per_round
from ._task import Plan

__all__ = ["SOLVERS", "check_params", "make_plan", "rule_of"]

SOLVERS = ("adam", "adagrad", "ftrl", "sgd", "ma-sgd")


def _int(self: Any, name: str, none: bool = False) -> None:
    v = getattr(self, name)
    if none and v is None:
        return
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
        raise InvalidArgumentError(
            f"{name}: expected {'None or ' if none else ''}an int >= 1, got {v!r}"
        )


def _number(self: Any, name: str, positive: bool) -> None:
    v = getattr(self, name)
    ok = isinstance(v, (int, float, np.number)) and not isinstance(v, bool) and np.isfinite(v)
    if not ok or (v <= 0 if positive else v < 0):
        what = "a positive number" if positive else "a finite number >= 0"
        raise InvalidArgumentError(f"{name}: expected {what}, got {v!r}")


def check_params(self: Any) -> None:
    """Refuse a bad hyper-parameter (named, with what was expected) before anything is made."""
    if self.solver not in SOLVERS:
        raise InvalidArgumentError(f"solver: expected one of {SOLVERS}, got {self.solver!r}")
    for name in ("n_factors", "max_iter", "n_iter_no_change"):
        _int(self, name)
    for name in ("batch_size", "local_steps", "n_tasks"):
        _int(self, name, none=True)
    _number(self, "learning_rate", True)
    _number(self, "init_std", False)
    for name in ("reg_linear", "reg_factors"):
        _number(self, name, False)
    vf = self.validation_fraction
    if not isinstance(vf, (int, float, np.number)) or not 0 <= vf < 1:
        raise InvalidArgumentError(f"validation_fraction: expected a number in [0, 1), got {vf!r}")
    if self.tol is not None:
        _number(self, "tol", False)
    as_sync(self.sync)


def rule_of(self: Any) -> Any:
    """The server-side optimiser rule of the solver (None for ``'ma-sgd'``).

    L2 is added to the gradient by the task (``reg_linear`` and ``reg_factors``
    differ), so the rules carry none.
    """
    lr = float(self.learning_rate)
    return {
        "adam": lambda: ops.Adam(lr=lr),
        "adagrad": lambda: ops.AdaGrad(lr=lr),
        "ftrl": lambda: ops.FTRL(alpha=lr, beta=1.0),
        "sgd": lambda: ops.SGD(lr=lr),
        "ma-sgd": lambda: None,
    }[self.solver]()


def fields_tag(fields: np.ndarray | None) -> str:
    if fields is None:
        return ""
    return hashlib.blake2b(np.ascontiguousarray(fields).tobytes(), digest_size=8).hexdigest()


def make_plan(
    self: Any,
    data: Prepared,
    n_features: int,
    epochs: int,
    fields: np.ndarray | None,
    n_fields: int,
    optimizer: Any,
) -> Plan:
    """The frozen :class:`Plan` of a fit of estimator ``self`` on ``data``."""
    ds = data.ds
    vf = float(self.validation_fraction)
    train_rows = tuple(int(i.n_rows - round(i.n_rows * vf)) for i in ds.info)
    solver = self.solver
    batch = self.batch_size or (1 if solver == "ma-sgd" else 256)
    staleness = as_sync(self.sync).staleness
    early = bool(self.early_stopping) and staleness is not None
    if self.early_stopping and staleness is None:
        warnings.warn(
            "early_stopping needs BSP or SSP; ASP trains every epoch", UserWarning, stacklevel=5
        )
    plan = Plan(
        weights=self._arrays["weights"],
        metrics=f"{self._arrays['weights']}.m{uuid.uuid4().hex[:6]}",
        n_features=n_features,
        n_factors=int(self.n_factors),
        n_fields=n_fields,
        fields=fields,
        fields_tag=fields_tag(fields),
        kind=SQUARED if self._task == "regressor" else LOGISTIC,
        task=self._task,
        classes=None
        if self._task == "regressor" or data.encoded
        else tuple(float(c) for c in self.classes_),
        solver=solver,
        eta0=float(self.learning_rate),
        reg_linear=float(self.reg_linear),
        reg_factors=float(self.reg_factors),
        batch=int(batch),
        local_steps=self.local_steps,
        epochs=int(epochs),
        epoch0=int(getattr(self, "t_", 0)),
        val_fraction=vf,
        seed=int(self.random_state or 0),
        train_rows=train_rows,
        rounds=1,
        tol=float(self.tol) if (self.tol is not None and early) else None,
        patience=int(self.n_iter_no_change),
        monitor="val_loss" if vf > 0 else "train_loss",
        nbins=int(config.get("daskangel.models.auc-bins")),
        hot=0,
        optimizer=optimizer,
    )
    if train_rows:
        rounds = max(1, -(-max(train_rows) // per_round(plan)))
        plan = dataclasses.replace(plan, rounds=rounds)
    return plan
