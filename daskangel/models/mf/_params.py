"""Hyper-parameters of :class:`~._estimator.MatrixFactorization`: checks and defaults.

Defaults that depend on the solver (``None`` in the signature):

| parameter | sgd (optimizer sgd) | sgd (adagrad / adarevision) | als | als, implicit |
| --- | --- | --- | --- | --- |
| ``reg`` | 0.05 | 0.05 | 0.12 (x ratings of the row) | 0.01 |
| ``learning_rate`` | 0.01 | 0.05 | - | - |

Example
-------
>>> resolved_reg("als", "explicit", None), resolved_lr("sgd", "adagrad", None)
(0.12, 0.05)
"""

from __future__ import annotations

import numbers
from typing import Any

from ...errors import InvalidArgumentError
from ...scheduler._clock_rule import as_sync

__all__ = ["check_params", "resolved_lr", "resolved_reg"]

SOLVERS = ("sgd", "als")
FEEDBACK = ("explicit", "implicit")
OPTIMIZERS = ("sgd", "adagrad", "adarevision")
PARALLELISM = ("data", "model", "hybrid")


def resolved_reg(solver: str, feedback: str, reg: float | None) -> float:
    if reg is not None:
        return float(reg)
    if solver == "als":
        return 0.01 if feedback == "implicit" else 0.12
    return 0.05


def resolved_lr(solver: str, optimizer: str, lr: float | None) -> float:
    if lr is not None:
        return float(lr)
    return 0.01 if optimizer == "sgd" else 0.05


def _int(name: str, v: Any, lo: int, none: bool = False) -> None:
    if none and v is None:
        return
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < lo:
        extra = "None or " if none else ""
        raise InvalidArgumentError(f"{name}: expected {extra}an int >= {lo}, got {v!r}")


def _float(name: str, v: Any, lo: float, none: bool = False, strict: bool = False) -> None:
    if none and v is None:
        return
    ok = isinstance(v, numbers.Real) and not isinstance(v, bool) and v == v
    if ok:
        ok = v > lo if strict else v >= lo
    if not ok:
        rel = ">" if strict else ">="
        extra = "None or " if none else ""
        raise InvalidArgumentError(f"{name}: expected {extra}a number {rel} {lo}, got {v!r}")


def check_params(est: Any) -> None:
    """Raise :class:`InvalidArgumentError` naming the first bad hyper-parameter."""
    for name, allowed in (
        ("solver", SOLVERS),
        ("feedback", FEEDBACK),
        ("optimizer", OPTIMIZERS),
        ("parallelism", PARALLELISM),
    ):
        v = getattr(est, name)
        if v not in allowed:
            raise InvalidArgumentError(f"{name}: expected one of {allowed}, got {v!r}")
    _int("n_factors", est.n_factors, 1)
    _int("max_iter", est.max_iter, 0)
    _int("clocks_per_epoch", est.clocks_per_epoch, 1)
    _int("batch_size", est.batch_size, 1, none=True)
    _int("n_tasks", est.n_tasks, 1, none=True)
    _int("groups", est.groups, 1, none=True)
    _int("cg_steps", est.cg_steps, 1)
    _float("reg", est.reg, 0.0, none=True)
    _float("learning_rate", est.learning_rate, 0.0, none=True, strict=True)
    _float("init_std", est.init_std, 0.0)
    _float("alpha", est.alpha, 0.0)
    _float("validation_fraction", est.validation_fraction, 0.0)
    if est.validation_fraction >= 1:
        raise InvalidArgumentError(
            f"validation_fraction: expected a number in [0, 1), got {est.validation_fraction!r}"
        )
    for name in ("user_col", "item_col", "rating_col"):
        if not isinstance(getattr(est, name), str):
            raise InvalidArgumentError(
                f"{name}: expected a column name (str), got {getattr(est, name)!r}"
            )
    as_sync(est.sync)
    if est.solver == "als" and est.parallelism != "data":
        raise InvalidArgumentError(
            f"parallelism: solver='als' solves rows independently (data parallel); "
            f"got parallelism={est.parallelism!r}"
        )
    if est.solver == "als" and as_sync(est.sync).staleness != 0:
        raise InvalidArgumentError(
            f"sync: solver='als' alternates two phases that each read the other's result "
            f"(BSP); got sync={est.sync!r}"
        )
    if est.solver == "sgd" and est.feedback == "implicit":
        raise InvalidArgumentError(
            "feedback: implicit feedback is solved with solver='als' (Hu, Koren and "
            "Volinsky's weighted ALS); got solver='sgd'"
        )
    if est.parallelism != "data" and est.optimizer != "sgd":
        raise InvalidArgumentError(
            f"optimizer: model and hybrid parallelism update item blocks in place "
            f"(optimizer='sgd'); got optimizer={est.optimizer!r}"
        )
