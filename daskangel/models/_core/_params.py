"""Hyper-parameter checks and plan values every epoch-trained family shares.

The sparse-feature families (linear models, factorization machines) check the
same kinds of values before a fit (named, with what was expected and what
came, before any array is made) and derive the same plan values from them:

* :func:`check_int`, :func:`check_number`, :func:`check_fraction`: one
  parameter each;
* :func:`early_stopping_on`: whether early stopping can run under the
  estimator's ``sync`` (it needs BSP or SSP: ASP has no complete epoch rows),
  with a warning when it was asked for and cannot;
* :func:`train_rows`: the training rows of every partition once the seeded
  validation share is held out (:func:`._order.split_ids`'s ``round``);
* :func:`epoch_fields`: the plan values of the minibatch and epoch schedule.

Example
-------
>>> class Est:
...     max_iter, validation_fraction, tol = 0, 0.1, None
>>> check_int(Est(), "max_iter")
Traceback (most recent call last):
...
daskangel.errors.InvalidArgumentError: max_iter: expected an int >= 1, got 0
>>> check_fraction(Est(), "validation_fraction")
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from ...errors import InvalidArgumentError
from ...scheduler._clock_rule import as_sync

__all__ = [
    "check_fraction", "check_int", "check_number", "early_stopping_on", "epoch_fields",
    "train_rows",
]  # fmt: skip


def check_int(est: Any, name: str, *, none: bool = False, minimum: int = 1) -> None:
    """Refuse ``est.<name>`` unless it is an int ``>= minimum`` (or None with ``none``)."""
    v = getattr(est, name)
    if none and v is None:
        return
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < minimum:
        raise InvalidArgumentError(
            f"{name}: expected {'None or ' if none else ''}an int >= {minimum}, got {v!r}"
        )


def check_number(est: Any, name: str, *, positive: bool) -> None:
    """Refuse ``est.<name>`` unless it is a finite number, ``> 0`` (``positive``) or ``>= 0``."""
    v = getattr(est, name)
    ok = isinstance(v, (int, float, np.number)) and not isinstance(v, bool) and np.isfinite(v)
    if not ok or (v <= 0 if positive else v < 0):
        what = "a positive number" if positive else "a finite number >= 0"
        raise InvalidArgumentError(f"{name}: expected {what}, got {v!r}")


def check_fraction(est: Any, name: str) -> None:
    """Refuse ``est.<name>`` unless it is a number in ``[0, 1)``."""
    v = getattr(est, name)
    if isinstance(v, bool) or not isinstance(v, (int, float, np.number)) or not 0 <= v < 1:
        raise InvalidArgumentError(f"{name}: expected a number in [0, 1), got {v!r}")


def early_stopping_on(est: Any, stacklevel: int = 6) -> bool:
    """``est.early_stopping`` under a sync that allows it (BSP / SSP); warns under ASP."""
    staleness = as_sync(est.sync).staleness
    if est.early_stopping and staleness is None:
        warnings.warn(
            "early_stopping needs BSP or SSP; ASP trains every epoch",
            UserWarning,
            stacklevel=stacklevel,
        )
    return bool(est.early_stopping) and staleness is not None


def train_rows(ds: Any, fraction: float) -> tuple[int, ...]:
    """Training rows of each partition of the persisted Dataset ``ds`` once a
    ``fraction`` of its rows is held out for validation."""
    return tuple(int(i.n_rows - round(i.n_rows * fraction)) for i in ds.info)


def epoch_fields(
    est: Any, batch: int, epochs: int, val_fraction: float, rows: tuple[int, ...]
) -> dict[str, Any]:
    """The plan values every sparse-feature family derives alike from ``est``: the
    minibatch, local steps, epochs (from the fitted ``t_`` on), validation share,
    seed and training rows, in one round.

    >>> class Est:
    ...     local_steps, random_state, t_ = 1, 7, 2
    >>> epoch_fields(Est(), 256, 3, 0.1, (90, 90))["epoch0"]
    2
    """
    return {
        "batch": int(batch),
        "local_steps": est.local_steps,
        "epochs": int(epochs),
        "epoch0": int(getattr(est, "t_", 0)),
        "val_fraction": val_fraction,
        "seed": int(est.random_state or 0),
        "train_rows": rows,
        "rounds": 1,
    }
