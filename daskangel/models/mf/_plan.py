"""The frozen description of one fit that travels to the tasks, and the metrics rows.

Every task adds its sums for epoch ``e`` to row ``e`` of the fit's metrics
array (float64, on the PS): ``[train_n, train_sse, val_n, val_sse, eval_n,
eval_sse, loss]``.  Sums add up across tasks on the servers, so once all tasks
are past an epoch its row holds the exact figures of the whole data, whatever
the sync protocol; :func:`finish` turns a row into RMSEs.

* ``train_rmse``: over the training ratings *during* the epoch (errors seen
  before each update, as SGD goes; ALS: after the epoch);
* ``val_rmse``: over the ratings split off with ``validation_fraction``, with
  the model at the end of the epoch;
* ``eval_rmse``: over the ratings passed as ``eval_set``, likewise;
* ``loss`` (implicit feedback): the weighted loss of the epoch per rating.

Validation and evaluation predictions are clipped to the training ratings' range.
The tasks read the rows every task has finished and report them (``ctx.report``:
the progress bar, ``ps.status()`` and the dashboard) through the shared
:class:`~daskangel.models._core.Monitor` (:func:`monitor`).

Example
-------
>>> finish(np.array([4.0, 4.0, 0.0, 0.0, 1.0, 0.25, 0.0]))
{'train_rmse': 1.0, 'eval_rmse': 0.5}
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._core import Monitor, RowsPlan

__all__ = ["METRICS_WIDTH", "Plan", "finish", "monitor"]

METRICS_WIDTH = 7


@dataclass(frozen=True)
class Plan:
    """Everything a task needs about the fit (plain values and array names)."""

    users: str  # PS array (n_users, K + 1): factors, then the bias
    items: str  # PS array (n_items, K + 1)
    metrics: str  # PS array (epochs, METRICS_WIDTH) float64
    n_factors: int
    mu: float  # global mean (0 for implicit feedback)
    lo: float  # rating range, for clipping evaluated predictions
    hi: float
    epochs: int  # epochs of this fit
    epoch0: int  # epochs done before (partial_fit): seeds and schedules continue
    seed: int
    val_fraction: float
    # --- SGD
    optimizer: str = "sgd"  # "sgd" | "adagrad" | "adarevision"
    lr: float = 0.01
    reg: float = 0.05
    lr_bias: float = 0.01
    reg_bias: float = 0.05
    rounds: int = 1  # clocks per epoch
    snap_every: int = 0  # clocks between snapshots (users' rows are written before each)
    batch: int = 0  # ratings per optimiser step (adagrad, adarevision); 0: a whole clock
    pull_rows: int = 4096  # rows per pipelined pull
    group_ratings: int = 64  # ratings per pulled row from which a clock trains ungrouped
    user_runs: bool = False  # each user's training ratings laid out together (_prep)
    # item rows where the item bands start, and the end (_prep; () or 2 entries: none);
    # data-parallel SGD trains one band a clock when there are ``rounds`` of them
    band_bounds: tuple[int, ...] = ()
    user_state: str | None = None  # PS array: users' AdaGrad accumulators
    opt: Any = None  # BoundOptimizer of the items (adagrad, adarevision)
    eps: float = 1e-8
    # --- model parallel (DSGD strata)
    n_blocks: int = 0  # item blocks rotating among a group's tasks (0: data parallel)
    item_bounds: tuple[int, ...] = ()  # item rows where the blocks start (+ the end)
    # --- ALS
    alpha: float = 40.0  # implicit confidence: 1 + alpha * r
    implicit: bool = False
    cg_steps: int = 3
    biases: bool = True  # explicit ALS solves each row's bias along its factors
    gram: str | None = None  # implicit ALS: PS array of the tasks' Gram blocks (see _als)
    n_tasks: int = 0
    n_users: int = 0
    n_items: int = 0


def monitor(ctx: Any, plan: Plan, rounds: int) -> Monitor:
    """The task's monitor: ``mon.stop(ctx.iteration)`` after a clock reports the epochs
    every task has finished (``epoch``, ``train_rmse`` ...) to the dashboard."""
    mp = RowsPlan(plan.metrics, plan.epoch0, max(1, int(rounds)), task="mf")
    return Monitor(ctx, mp, lambda _: None, finish_row=finish)


def finish(row: np.ndarray) -> dict[str, float]:
    """RMSEs (and loss) of one epoch from its summed metrics row."""
    out: dict[str, float] = {}
    for name, n, s in (("train_rmse", 0, 1), ("val_rmse", 2, 3), ("eval_rmse", 4, 5)):
        if row[n] > 0:
            out[name] = math.sqrt(float(row[s]) / float(row[n]))
    if row[6] != 0 and row[0] > 0:
        out["loss"] = float(row[6] / row[0])
    return out
