"""One fit of a factorisation model: the plan, the training job, the metrics it leaves.

:func:`run_fit` builds the frozen :class:`~._plan.Plan` from the estimator,
creates the fit's metrics array, runs the solver's tasks with ``angel.train``
(data-parallel SGD, DSGD strata, or ALS) on the ingested parts, and returns the
job's result and the metrics rows of the epochs every task finished.

Example
-------
>>> res, rows = run_fit(est, ps, ingested, epochs=10)             # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import dataclasses
import numbers
import uuid
from typing import Any

import numpy as np

from ... import config
from ...context import PSContext
from ...scheduler._clock_rule import as_sync
from ...train import TrainResult, train
from ._ingest import Ingested
from ._parts import user_bounds
from ._plan import METRICS_WIDTH, Plan
from ._sgd import SGDTask

__all__ = ["make_plan", "run_fit"]


def make_plan(est: Any, ing: Ingested, epochs: int, metrics: str) -> Plan:
    """The frozen plan of a fit of ``est`` on ``ing`` (see :mod:`._plan`)."""
    a = est._arrays
    lr = est.learning_rate_
    reg = est.reg_
    lo, hi = est.rating_range_
    return Plan(
        users=a["users"],
        items=a["items"],
        metrics=metrics,
        n_factors=int(est.n_factors),
        mu=float(est.global_mean_),
        lo=float(lo) if est.clip else -np.inf,
        hi=float(hi) if est.clip else np.inf,
        epochs=int(epochs),
        epoch0=int(getattr(est, "t_", 0)),
        seed=int(est.random_state or 0),
        val_fraction=float(est.validation_fraction),
        optimizer=est.optimizer,
        lr=lr,
        reg=reg,
        lr_bias=lr if est.biases and est.feedback == "explicit" else 0.0,
        reg_bias=reg,
        rounds=int(est.clocks_per_epoch),
        snap_every=_snap_clocks(est.snapshot_every),  # (run_fit: the context's, if any)
        batch=int(est.batch_size or config.get("daskangel.models.mf.batch-size")),
        pull_rows=int(config.get("daskangel.models.mf.pull-rows")),
        group_ratings=int(config.get("daskangel.models.mf.group-ratings")),
        user_runs=bool(config.get("daskangel.models.mf.user-runs")),
        band_bounds=_bands(est, ing),
        user_state=a["user_state"],
        opt=est._bound(),
        alpha=float(est.alpha),
        implicit=est.feedback == "implicit",
        cg_steps=int(est.cg_steps),
        biases=bool(est.biases) and est.feedback == "explicit",
        n_users=len(ing.umap),
        n_items=len(ing.imap),
    )


def _bands(est: Any, ing: Ingested) -> tuple[int, ...]:
    """Item rows where the bands of data-parallel SGD start (and the end): one band per
    clock of an epoch, about the same ratings each (``daskangel.models.mf.item-bands``)."""
    nb = int(est.clocks_per_epoch)
    on = config.get("daskangel.models.mf.item-bands")
    if not on or nb < 2 or est.solver != "sgd" or est.parallelism != "data":
        return ()
    return tuple(int(b) for b in user_bounds(np.asarray(ing.item_counts, np.int64), nb))


def _snap_clocks(every: Any) -> int:
    """Clocks between two snapshots (0: none, or on a timer)."""
    if isinstance(every, numbers.Integral) and not isinstance(every, bool):
        return max(0, int(every))
    return 0


def run_fit(est: Any, ps: PSContext, ing: Ingested, epochs: int) -> tuple[TrainResult, np.ndarray]:
    """Train ``est`` for ``epochs`` on ``ing``; the job's result and its metrics rows."""
    name = f"{est._arrays['items']}.m{uuid.uuid4().hex[:6]}"
    plan = make_plan(est, ing, epochs, name)
    every = int(getattr(ps, "snapshot_every_clocks", None) or 0)
    if every:  # a context given with ps= snapshots on its own schedule
        plan = dataclasses.replace(plan, snap_every=every)
    met = ps.zeros(name, (max(epochs, 1), METRICS_WIDTH), "float64")
    sync = as_sync(est.sync)
    try:
        if est.solver == "als":
            from ._als import run_als

            res = run_als(ps, plan, ing, sync, est.progress)
        elif est.parallelism == "data":
            res = train(
                ps,
                SGDTask(plan),
                ing.parts,
                sync=sync,
                epochs=epochs * plan.rounds,
                progress=est.progress,
                unit="epoch",
                clocks_per_unit=plan.rounds,
            )
        else:
            from ._dsgd import run_dsgd

            res = run_dsgd(ps, plan, ing, est, sync)
        rows = np.asarray(met.get()) if epochs else np.zeros((0, METRICS_WIDTH))
    finally:
        with contextlib.suppress(Exception):
            ps.drop(name)
    return res, rows[:epochs]
