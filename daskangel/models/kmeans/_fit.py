"""A KMeans fit from the driver: statistics, starting centres, PS arrays, the Lloyd job.

:func:`fit_lloyd` runs one initialisation and Lloyd's iterations on a persisted
Dataset: the data's statistics and the starting centres are taken on the
workers (:mod:`._init`) and go to the first of three rotating accumulator
arrays (:mod:`._psfs`), and ``angel.train`` runs one :class:`~._lloyd.LloydTask`
per partition under BSP.  When the job ends, the final centres are computed
once more by the servers into the model's ``(k, d + 1)`` array (one column
slice per server, column ``d``: the cluster sizes) and the accumulators are
dropped.

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
from ._lloyd import LloydTask, Plan
from ._minibatch import MiniBatchTask
from ._minibatch import Plan as MBPlan
from ._predict import partition_assign
from ._psfs import Centres, Geometry

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


def make_centres(ps: Any, name: str, centres: np.ndarray, counts: Any = None) -> Any:
    """The ``(k, d + 1)`` centres array, one column slice per server, set to ``centres``
    (column ``d``: ``counts``, zeros by default)."""
    k, d = centres.shape
    n_servers = max(1, len(workers_info(ps.client)))
    width = max(1, math.ceil((d + 1) / n_servers))
    C = ps.zeros(name, (k, d + 1), "float64", block_shape=(k, width))
    last = np.zeros((k, 1)) if counts is None else np.asarray(counts, np.float64).reshape(k, 1)
    C.set(np.hstack([centres, last]))
    return C


def fit_lloyd(est: Any, ps: Any, ds: Any, tol: float, centres: np.ndarray, progress: bool) -> Run:
    """Lloyd's iterations from ``centres`` on the persisted Dataset ``ds``."""
    k, d = centres.shape
    name = f"kmeans-{uuid.uuid4().hex[:8]}"
    n_cand = max(1, min(k, int(config.get("daskangel.kmeans.reseed-candidates"))))
    g = Geometry.for_data(d, len(ds.partitions), k, n_cand)
    dtype = g.dtype(max((int(i.n_rows) for i in ds.info), default=0))
    first = ps.zeros(f"{name}.s0", (g.n_rows, g.n_phys), dtype, block_shape=g.block_shape)
    bufs = [first] + [ps.zeros_like(first, f"{name}.s{i}") for i in (1, 2)]
    init = np.zeros((k, g.n_phys), dtype)
    init[:, g.phys(np.arange(d))] = centres
    init[:, g.count_cols()] = 1.0
    geometry = (g.n_features, g.width, g.n_tasks, g.n_clusters, g.n_cand)
    plan = Plan(tuple(b.name for b in bufs), geometry, int(est.max_iter), float(tol), dtype)  # type: ignore[arg-type]
    try:
        bufs[2].set(init, rows=np.arange(k))  # S_{-1}: the initial centres
        res = train(ps, LloydTask(plan), ds, sync=as_sync("bsp"), epochs=plan.max_iter,
                    progress=progress, unit="iteration")  # fmt: skip
        outs = sorted(res.results, key=lambda r: r["index"])
        n_iter = int(outs[0]["n_iter"]) if outs else 0
        cur, prev = bufs[(n_iter - 1) % 3], bufs[(n_iter - 2) % 3 if n_iter >= 2 else 2]
        got = cur.psf(Centres(geometry, dtype="float64"), prev)
        final = got["centres_t"].T
        final = np.where(np.isnan(final), centres, final)
        C = make_centres(ps, f"{name}.centers", final, got["counts"])
    finally:
        for a in bufs:
            with contextlib.suppress(Exception):
                ps.drop(a.name)
    hist: list[dict[str, float]] = next((o["history"] for o in outs if o["history"]), [])
    inertia = float(sum(o["inertia"] for o in outs))
    return Run(C.name, inertia, n_iter, [o["labels"] for o in outs], hist, res)


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
        barrier=sync.staleness == 0,
    )  # fmt: skip
    try:
        t0 = time.perf_counter()
        per = steps * plan.clocks_per_step
        res = train(ps, MiniBatchTask(plan), ds, sync=sync, epochs=epochs * per,
                    progress=progress, unit="epoch", clocks_per_unit=per)  # fmt: skip
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
