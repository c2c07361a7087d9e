"""Per-epoch metrics of a training task: sums into the metrics array, finished rows out.

:class:`Monitor` is what an epoch-based training task (linear models,
factorization machines) uses to report: the training loss it saw and the
validation sums of the model it evaluates go into the epoch's row of the fit's
metrics array (:mod:`._epochs`); rows that every task has finished (known from
the clock rule, so all tasks read the same figures) feed ``ctx.report`` and
early stopping.  The fit's plan gives the fields of :class:`EpochPlan`.
:meth:`Monitor.end_round` closes a round (the epoch's training loss, the
clock) and :meth:`Monitor.finish` evaluates the last epoch and makes the task's
result, the same for every family.  A family whose rows hold other sums (LDA's
held-out log-likelihood and tokens per sweep) passes ``finish_row`` (a summed
row to its metrics) and the name of its x axis (``x="sweep"``).

Example
-------
>>> mon = Monitor(ctx, plan, lambda W: data.evaluate(W, plan))     # doctest: +SKIP
>>> mon.add_train(epoch, loss_sum, n_rows); mon.evaluate(epoch, W)  # doctest: +SKIP
>>> if mon.stop(ctx.iteration): ...                                # doctest: +SKIP
>>> c = mon.end_round(epoch, rnd == plan.rounds - 1, loss_sum, n_rows, timings)  # doctest: +SKIP
>>> result = mon.finish(c, plan.epochs, stopped, latest_rows, timings)      # doctest: +SKIP
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from ._epochs import OFFSET, finish, row_width
from ._metrics import should_stop

__all__ = ["EpochPlan", "Monitor", "RowsPlan"]

# (stats[N_STATS], hist (2, nbins)) of a model on a task's validation rows, or None
Evaluate = Callable[[np.ndarray], "tuple[np.ndarray, np.ndarray] | None"]


class EpochPlan(Protocol):
    """The fields of a fit's plan the monitor reads."""

    @property
    def metrics(self) -> str: ...  # PS array: one float64 row of sums per epoch
    @property
    def nbins(self) -> int: ...
    @property
    def rounds(self) -> int: ...  # clocks per epoch
    @property
    def epoch0(self) -> int: ...
    @property
    def task(self) -> str: ...
    @property
    def binary(self) -> bool: ...
    @property
    def logloss(self) -> bool: ...
    @property
    def tol(self) -> float | None: ...
    @property
    def monitor(self) -> str: ...
    @property
    def patience(self) -> int: ...


@dataclass(frozen=True, slots=True)
class RowsPlan:
    """An :class:`EpochPlan` for a family whose metrics rows hold its own sums (it
    passes ``finish_row`` to :class:`Monitor`) and that does not stop early: only
    the array, the first epoch's number and the clocks per epoch vary.

    Example
    -------
    >>> RowsPlan("mf-metrics", epoch0=0, rounds=4, task="mf").tol is None
    True
    """

    metrics: str
    epoch0: int
    rounds: int = 1  # clocks per epoch (or sweep)
    nbins: int = 0
    task: str = ""
    binary: bool = False
    logloss: bool = False
    tol: float | None = None
    monitor: str = ""
    patience: int = 0


class Monitor:
    """Validation sums into the metrics array; finished epochs into reports and stops."""

    def __init__(
        self,
        ctx: Any,
        plan: EpochPlan,
        evaluate: Evaluate,
        finish_row: Callable[[np.ndarray], dict[str, float]] | None = None,
        x: str = "epoch",
    ) -> None:
        self.ctx = ctx
        self.plan = plan
        self._evaluate = evaluate
        self._finish_row = finish_row
        self._x = x
        self.met = ctx.array(plan.metrics)
        self.history: list[dict[str, float]] = []  # finished epochs, from the metrics array
        s = ctx.staleness(plan.metrics)
        self.staleness = s
        self.width = row_width(plan.nbins)

    def add_train(self, epoch: int, loss: float, n: int) -> None:
        if n:
            row = np.zeros(2)
            row[:] = (n, loss)
            self.met.increment(row, rows=epoch, cols=np.arange(2))

    def evaluate(self, epoch: int, W: np.ndarray) -> None:
        """Add this task's validation sums for the model after ``epoch`` to its row."""
        res = self._evaluate(W)
        if res is None:
            return
        st, hist = res
        row = np.concatenate([st, hist.ravel()])
        cols = np.arange(OFFSET, self.width)
        self.met.increment(row, rows=epoch, cols=cols)

    def stop(self, clock: int) -> bool:
        """Read the epochs every task has finished by ``clock``; True to stop early.

        ``clock`` counts rounds: an epoch's validation sums, added at the start
        of the next epoch, are complete once every task has clocked after adding
        them.  A task that clocks a barrier after its evaluation and before
        training (linear ``'ma-sgd'`` under BSP) passes its round + 1 there, so
        it stops before training an epoch it does not need.  The plan's
        ``relative_tol`` (if it has one) makes ``tol`` relative
        (:func:`._metrics.should_stop`).
        """
        p = self.plan
        if self.staleness is None:  # ASP: no clock tells which rows are complete
            return False
        last = (clock - self.staleness - 1) // p.rounds - 1  # newest complete row
        first = len(self.history)
        if last < first:
            return False
        rows = np.asarray(self.met.get(rows=np.arange(first, last + 1)))
        for r in rows:
            if self._finish_row is not None:
                m = self._finish_row(r)
            else:
                m = finish(r, p.task, binary=p.binary, logloss=p.logloss, nbins=p.nbins)
            self.history.append(m)
        self.ctx.report(**{self._x: p.epoch0 + last + 1}, **self.history[-1])
        if p.tol is None:
            return False
        relative = bool(getattr(p, "relative_tol", False))
        return should_stop(self.history, p.monitor, p.tol, p.patience, relative)

    def end_round(self, epoch: int, last: bool, loss: float, n: int, tm: dict[str, float]) -> int:
        """Close a round: on the epoch's ``last`` round its training loss (``loss``
        summed over ``n`` rows) into the metrics row, then the clock (its wait
        timed into ``tm["clock"]``).  Returns the task's clock after it."""
        if last:
            self.add_train(epoch, loss, n)
        t_0 = time.perf_counter()
        self.ctx.clock()
        tm["clock"] = tm.get("clock", 0.0) + time.perf_counter() - t_0
        return int(self.ctx.iteration)

    def finish(
        self,
        clock: int,
        epochs: int,
        stopped: bool,
        latest: Callable[[], np.ndarray],
        tm: dict[str, float],
    ) -> dict[str, Any]:
        """The task's result once its loop ends at ``clock``: unless it stopped early,
        the last of ``epochs`` is evaluated on ``latest()`` (the servers' newest rows;
        timed into ``tm["eval"]``).  ``{"epochs", "stopped", "timings"}``."""
        rounds = self.plan.rounds
        total = epochs * rounds
        if not stopped and clock >= total and total:
            t_0 = time.perf_counter()
            self.evaluate(epochs - 1, latest())
            tm["eval"] = tm.get("eval", 0.0) + time.perf_counter() - t_0
        return {"epochs": clock // rounds if rounds else 0, "stopped": stopped, "timings": tm}
