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
from typing import Any

import numpy as np

from ... import config, ops
from ...errors import InvalidArgumentError
from ...scheduler._clock_rule import as_sync
from .._core._input import Prepared
from .._core._params import (
    check_fraction,
    check_int,
    check_number,
    early_stopping_on,
    epoch_fields,
    train_rows,
)
from ._kernels import LOGISTIC, SQUARED
from ._solvers import per_round
from ._task import Plan

__all__ = ["SOLVERS", "check_params", "make_plan", "rule_of"]

SOLVERS = ("adam", "adagrad", "ftrl", "sgd", "ma-sgd")


def check_params(self: Any) -> None:
    """Refuse a bad hyper-parameter (named, with what was expected) before anything is made."""
    if self.solver not in SOLVERS:
        raise InvalidArgumentError(f"solver: expected one of {SOLVERS}, got {self.solver!r}")
    for name in ("n_factors", "max_iter", "n_iter_no_change"):
        check_int(self, name)
    for name in ("batch_size", "local_steps", "n_tasks"):
        check_int(self, name, none=True)
    check_number(self, "learning_rate", positive=True)
    for name in ("init_std", "reg_linear", "reg_factors", "power_t"):
        check_number(self, name, positive=False)
    check_fraction(self, "validation_fraction")
    if self.tol is not None:
        check_number(self, "tol", positive=False)
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
    rows = train_rows(ds, vf)
    solver = self.solver
    batch = self.batch_size or (1 if solver == "ma-sgd" else 256)
    early = early_stopping_on(self)
    bsp = as_sync(self.sync).staleness == 0
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
        power_t=float(self.power_t),
        reg_linear=float(self.reg_linear),
        reg_factors=float(self.reg_factors),
        **epoch_fields(self, batch, epochs, vf, rows),
        tol=float(self.tol) if (self.tol is not None and early) else None,
        patience=int(self.n_iter_no_change),
        monitor="val_loss" if vf > 0 else "train_loss",
        nbins=int(config.get("daskangel.models.auc-bins")),
        hot=0,
        optimizer=optimizer,
        read_barrier=bsp,
        acc=f"{self._arrays['weights']}.acc{uuid.uuid4().hex[:6]}"
        if bsp and solver != "ma-sgd"
        else "",
    )
    if rows:
        rounds = max(1, -(-max(rows) // per_round(plan)))
        plan = dataclasses.replace(plan, rounds=rounds)
    return plan
