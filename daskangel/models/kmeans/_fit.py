"""A KMeans fit from the driver: statistics, starting centres, PS arrays, the Lloyd job.

:func:`fit_lloyd` runs one initialisation and Lloyd's iterations on a persisted
Dataset: the data's statistics and the starting centres are taken on the
workers (:mod:`._init`), the centres go to a ``(k, d + 1)`` PS array cut into
one column slice per server (column ``d`` holds the cluster sizes), and
``angel.train`` runs one :class:`~._lloyd.LloydTask` per partition under BSP.
The accumulator, candidates and metrics arrays are dropped when the job ends;
the centres array stays as the model.

Example
-------
>>> run = fit_lloyd(est, ps, ds, stats, centres, seed=0)          # doctest: +SKIP
>>> run.inertia, run.n_iter                                       # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import math
import time
import uuid
from dataclasses import dataclass
from typing import Any

import numpy as np

from ... import config
from ..._compat import workers_info
from ...scheduler._clock_rule import as_sync
from ...train import train
from ._lloyd import N_HEAD, LloydTask, Plan
from ._minibatch import MiniBatchTask
from ._minibatch import Plan as MBPlan
from ._predict import partition_assign

__all__ = ["Run", "fit_lloyd", "fit_minibatch", "make_centres"]


@dataclass(frozen=True, eq=False)
class Run:
    """What one initialisation + Lloyd run leaves."""

    centers: str  # PS array name (k, d + 1)
    inertia: float
    n_iter: int
    labels: list[Any]  # per partition, in partition order (arrays, or futures of them)
    history: list[dict[str, float]]
    result: Any  # the TrainResult


def make_centres(ps: Any, name: str, centres: np.ndarray) -> Any:
    """The ``(k, d + 1)`` centres array, one column slice per server, set to ``centres``."""
    k, d = centres.shape
    n_servers = max(1, len(workers_info(ps.client)))
    width = max(1, math.ceil((d + 1) / n_servers))
    C = ps.zeros(name, (k, d + 1), "float64", block_shape=(k, width))
    C.set(np.hstack([centres, np.zeros((k, 1))]))
    return C


def fit_lloyd(est: Any, ps: Any, ds: Any, tol: float, centres: np.ndarray, progress: bool) -> Run:
    """Lloyd's iterations from ``centres`` on the persisted Dataset ``ds``."""
    k, d = centres.shape
    name = f"kmeans-{uuid.uuid4().hex[:8]}"
    n_tasks = len(ds.partitions)
    n_cand = max(1, min(k, int(config.get("daskangel.kmeans.reseed-candidates"))))
    max_iter = int(est.max_iter)
    C = make_centres(ps, f"{name}.centers", centres)
    made = [
        ps.zeros_like(C, f"{name}.sums"),
        ps.zeros(f"{name}.metrics", (max_iter + 1, N_HEAD + k), "float64"),
        ps.zeros(f"{name}.far", (n_tasks * n_cand, d + 1), "float64"),
    ]
    plan = Plan(
        centers=C.name, sums=made[0].name, metrics=made[1].name, far=made[2].name,
        n_clusters=k, n_features=d, max_iter=max_iter, tol=float(tol), n_cand=n_cand,
    )  # fmt: skip
    try:
        res = train(ps, LloydTask(plan), ds, sync=as_sync("bsp"), epochs=max_iter,
                    progress=progress)  # fmt: skip
        rows = np.asarray(made[1].get())
    except BaseException:
        with contextlib.suppress(Exception):
            ps.drop(C.name)
        raise
    finally:
        for a in made:
            with contextlib.suppress(Exception):
                ps.drop(a.name)
    outs = sorted(res.results, key=lambda r: r["index"])
    n_iter = int(outs[0]["n_iter"]) if outs else 0
    hist = [
        {"iteration": i + 1, "inertia": float(rows[i, 0]), "center_shift": float(rows[i, 2]),
         "reseeded": int(rows[i, 3]), "time": float(rows[i, 4])}
        for i in range(n_iter)
    ]  # fmt: skip
    return Run(C.name, float(rows[n_iter, 0]), n_iter, [o["labels"] for o in outs], hist, res)


def fit_minibatch(
    est: Any, ps: Any, ds: Any, centres: np.ndarray, progress: bool, sync: Any, seed: int
) -> Run:
    """Mini-batch k-means from ``centres``, then one assignment pass for labels and inertia."""
    k, d = centres.shape
    name = f"kmeans-{uuid.uuid4().hex[:8]}"
    n_tasks = len(ds.partitions)
    epochs = int(est.max_iter)
    batch = max(1, math.ceil(int(est.batch_size) / max(n_tasks, 1)))
    most = max((int(i.n_rows) for i in ds.info), default=0)
    steps = max(1, math.ceil(most / batch))
    C = make_centres(ps, f"{name}.centers", centres)
    met = ps.zeros(f"{name}.metrics", (epochs, 2), "float64")
    plan = MBPlan(
        centers=C.name, metrics=met.name, n_clusters=k, n_features=d, epochs=epochs,
        steps=steps, batch=batch, n_tasks=n_tasks, seed=int(seed),
    )  # fmt: skip
    try:
        t0 = time.perf_counter()
        res = train(ps, MiniBatchTask(plan), ds, sync=sync, epochs=epochs * steps,
                    progress=progress)  # fmt: skip
        seconds = time.perf_counter() - t0
        rows = np.asarray(met.get())
        final = np.asarray(C.get(), np.float64)[:, :d]
        [cf] = ds.client.scatter([final], broadcast=True)
        outs = ds.map_partitions(partition_assign, cf)
        inertia = float(sum(ds.client.gather([ds.client.submit(_second, f) for f in outs])))
        labels = [ds.client.submit(_first, f) for f in outs]
    except BaseException:
        with contextlib.suppress(Exception):
            ps.drop(C.name)
        raise
    finally:
        with contextlib.suppress(Exception):
            ps.drop(met.name)
    hist = [
        {"iteration": e + 1, "inertia": float(rows[e, 0] / rows[e, 1]) if rows[e, 1] else float("nan"),
         "time": seconds * (e + 1) / epochs}
        for e in range(epochs)
    ]  # fmt: skip
    return Run(C.name, inertia, epochs, labels, hist, res)


def _first(t: Any) -> Any:
    return t[0]


def _second(t: Any) -> Any:
    return t[1]
