"""Rounds of clocks of an epoch-trained task: the BSP read barrier, and divergence.

A training task of the epoch-based families (linear models, factorization
machines) runs an epoch as ``rounds`` rounds, the same number for every task.
A round is one clock, or under BSP two (:class:`Rounds` with ``per=2``): the
task pulls what it needs, then a *read barrier* (a clock), then it computes
and pushes, then the round's clock.  With one clock a task still pulling could
read a faster task's push of the same round (BSP only orders reads against the
previous clock), so two fits with one ``random_state`` differed by whole
percents; with the barrier every task of a round reads the same model, and what
is left of the arrival order is the rounding of the servers' float64 sums.

:func:`check_finite_step` refuses to push a non-finite loss or model
(:class:`~daskangel.errors.DivergedError`, naming ``learning_rate``) and
:func:`diverged` turns that failure of a training task back into a
``DivergedError`` of the fit, the model left unfitted.

Example
-------
>>> r = Rounds(rounds=3, per=2)
>>> r.total(epochs=2), r.at(7)          # clock 7: round 3, epoch 1, its round 0, phase 1
(12, (3, 1, 0, 1))
>>> check_finite_step(float("nan"), None, epoch=0, eta=0.5)
Traceback (most recent call last):
...
daskangel.errors.DivergedError: learning_rate: training diverged in epoch 1 (the loss or the weights became infinite or NaN at step size 0.5); lower learning_rate, or scale the features (e.g. sklearn.preprocessing.StandardScaler)
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...errors import DivergedError, TaskFailedError

__all__ = ["Rounds", "barrier", "check_finite_step", "diverged"]


@dataclass(frozen=True, slots=True)
class Rounds:
    """``rounds`` rounds an epoch, ``per`` clocks a round (2: with the read barrier)."""

    rounds: int
    per: int = 1

    @classmethod
    def of(cls, rounds: int, staleness: int | None) -> Rounds:
        """The read barrier under BSP (``staleness == 0``), one clock a round otherwise."""
        return cls(int(rounds), 2 if staleness == 0 else 1)

    def total(self, epochs: int) -> int:
        """Clocks of ``epochs`` epochs."""
        return int(epochs) * self.rounds * self.per

    @property
    def clocks_per_epoch(self) -> int:
        return self.rounds * self.per

    def at(self, clock: int) -> tuple[int, int, int, int]:
        """``(round count, epoch, round of the epoch, phase)`` of a task at ``clock``;
        phase 1: past the round's read barrier (a task resumed there)."""
        rc, phase = divmod(int(clock), self.per)
        epoch, rnd = divmod(rc, self.rounds)
        return rc, epoch, rnd, phase


def barrier(ctx: Any, tm: dict[str, float]) -> None:
    """The read barrier: a clock (its wait timed into ``tm["clock"]``)."""
    t_0 = time.perf_counter()
    ctx.clock()
    tm["clock"] = tm.get("clock", 0.0) + time.perf_counter() - t_0


def check_finite_step(loss: float, W: np.ndarray | None, epoch: int, eta: float) -> None:
    """Raise :class:`~daskangel.errors.DivergedError` when a step left a non-finite
    loss or weights (instead of pushing NaN to the servers)."""
    if np.isfinite(loss) and (W is None or bool(np.isfinite(W).all())):
        return
    raise DivergedError(
        f"learning_rate: training diverged in epoch {epoch + 1} (the loss or the weights "
        f"became infinite or NaN at step size {eta:.3g}); lower learning_rate, or scale "
        "the features (e.g. sklearn.preprocessing.StandardScaler)"
    )


@contextlib.contextmanager
def diverged(est: Any) -> Iterator[None]:
    """Around a fit's ``train``: a task's :class:`~daskangel.errors.DivergedError`
    leaves ``est`` unfitted (a NaN model is no model) and is raised as itself."""
    try:
        yield
    except TaskFailedError as e:
        if not isinstance(e.__cause__, DivergedError):
            raise
        est._forget()
        raise DivergedError(str(e.__cause__)) from e
