"""Checks of a GBDT estimator's parameters: a clear error naming the bad one.

Example
-------
>>> class E:
...     _losses = ("log_loss",)
...     loss, learning_rate, n_estimators, max_depth, max_leaf_nodes = "log_loss", 0.1, 10, 0, None
>>> check_params(E())
Traceback (most recent call last):
...
daskangel.errors.InvalidArgumentError: max_depth: expected an integer >= 1, got 0
"""

from __future__ import annotations

import numbers
from typing import Any

from ...errors import InvalidArgumentError

__all__ = ["check_params"]


def _int(name: str, v: Any, lo: int, hi: int | None = None, none: bool = False) -> None:
    if v is None and none:
        return
    ok = isinstance(v, numbers.Integral) and not isinstance(v, bool)
    if ok:
        ok = int(v) >= lo and (hi is None or int(v) <= hi)
    if not ok:
        rng = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
        extra = " or None" if none else ""
        raise InvalidArgumentError(f"{name}: expected an integer {rng}{extra}, got {v!r}")


def _real(name: str, v: Any, lo: float, hi: float | None = None, lo_open: bool = False) -> None:
    ok = isinstance(v, numbers.Real) and not isinstance(v, bool) and v == v
    if ok:
        ok = (v > lo if lo_open else v >= lo) and (hi is None or v <= hi)
    if not ok:
        left = "(" if lo_open else "["
        right = f"{hi}]" if hi is not None else "inf)"
        raise InvalidArgumentError(f"{name}: expected a number in {left}{lo}, {right}, got {v!r}")


def check_params(est: Any) -> None:
    """Raise :class:`InvalidArgumentError` for the first bad parameter of ``est``."""
    if est.loss not in est._losses:
        raise InvalidArgumentError(f"loss: expected one of {list(est._losses)}, got {est.loss!r}")
    _real("learning_rate", est.learning_rate, 0.0, lo_open=True)
    _int("n_estimators", est.n_estimators, 1)
    _int("max_depth", est.max_depth, 1)
    _int("max_leaf_nodes", est.max_leaf_nodes, 2, none=True)
    if not hasattr(est, "max_bins"):
        return
    _int("max_bins", est.max_bins, 2, 65535)
    _real("min_child_weight", est.min_child_weight, 0.0)
    _int("min_samples_leaf", est.min_samples_leaf, 1)
    _real("reg_lambda", est.reg_lambda, 0.0)
    _real("subsample", est.subsample, 0.0, 1.0, lo_open=True)
    _real("colsample_bytree", est.colsample_bytree, 0.0, 1.0, lo_open=True)
    if est.early_stopping not in ("auto", True, False):
        raise InvalidArgumentError(
            f"early_stopping: expected 'auto', True or False, got {est.early_stopping!r}"
        )
    _real("validation_fraction", est.validation_fraction, 0.0, 1.0, lo_open=True)
    if est.validation_fraction >= 1.0:
        raise InvalidArgumentError(
            f"validation_fraction: expected a number in (0, 1), got {est.validation_fraction!r}"
        )
    _int("n_iter_no_change", est.n_iter_no_change, 1)
    _real("tol", est.tol, 0.0)
    if hasattr(est, "huber_delta"):
        _real("huber_delta", est.huber_delta, 0.0, lo_open=True)
    _int("n_tasks", est.n_tasks, 1, none=True)
    _int("snapshot_every", getattr(est, "snapshot_every", None), 1, none=True)
    snap = getattr(est, "snapshot", None)
    if snap is not None and not (isinstance(snap, str) and snap):
        raise InvalidArgumentError(f"snapshot: expected a URL (a str) or None, got {snap!r}")
