"""Lloyd's algorithm as a training task: assignment on the workers, centres on the PS.

One task per partition runs :class:`LloydTask` under ``angel.train`` (BSP).  Each
iteration ``t`` is:

A. pull the centres (only the columns the task's rows use, for sparse rows),
   assign every row (:mod:`._kernels`), push the per-cluster sums and counts into
   the accumulator ``S`` and the iteration's inertia into the metrics row ``t``;
   ``clock()``;
B. read the ``k`` counts (pushed with the inertia).  If some clusters got no row, every task offers its
   rows farthest from their centres (at most ``daskangel.kmeans.reseed-candidates``)
   in the candidates array and clocks once more, and the first task takes the
   farthest of all offers as the new centres of the empty clusters.  The first
   task then asks the servers for the centre shift (``Shift``) and runs the
   update (``Recenter``: ``C = S / n``, ``S = 0``, next to the blocks), and
   writes the shift into the metrics row; ``clock()``.

After B every task reads the shift; when it is at most ``tol`` (absolute: the
estimator scales the user's ``tol`` by the data's mean variance, as
scikit-learn does) or ``max_iter`` updates are done, a last assignment with the
final centres gives the labels and the final inertia (metrics row ``t + 1``),
and the task returns its labels.  Metrics row layout: ``[inertia sum, rows,
shift, empty clusters, seconds, counts (k)]`` (shift, empty clusters and
seconds from the first task; seconds: its wall time from its start to the end of
the iteration's update).  Every task reads the counts from the metrics row, not
from ``S``, which the first task zeroes as soon as it has read them.

Example
-------
>>> angel.train(ps, LloydTask(plan), dataset, sync=angel.BSP())   # doctest: +SKIP
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._psfs import Recenter, Shift
from ._rows import TaskRows, rows_of

__all__ = ["N_HEAD", "LloydTask", "Plan", "farthest"]

N_HEAD = 5  # metrics columns before the k counts


@dataclass(frozen=True)
class Plan:
    """What every task of one Lloyd fit needs (plain values)."""

    centers: str  # PS array (k, d + 1) float64
    sums: str  # co-partitioned accumulator
    metrics: str  # (max_iter + 1, N_HEAD + k) float64
    far: str  # (n_tasks * n_cand, d + 1) float64: offered rows, their distance last
    n_clusters: int
    n_features: int
    max_iter: int
    tol: float  # absolute, on the summed squared centre shift
    n_cand: int


def farthest(dist: np.ndarray, m: int) -> np.ndarray:
    """Indices of the ``m`` largest distances, largest first (ties: lower index)."""
    m = min(m, dist.shape[0])
    if m <= 0:
        return np.zeros(0, np.int64)
    idx = np.argpartition(-dist, m - 1)[:m] if m < dist.shape[0] else np.arange(dist.shape[0])
    return idx[np.lexsort((idx, -dist[idx]))]


class LloydTask:
    """``fn(ctx, partition)`` of Lloyd's algorithm (see the module docstring)."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan

    def _centres(self, C: Any, rows: TaskRows) -> np.ndarray:
        return np.asarray(C.get(cols=rows.keys), np.float64)

    def __call__(self, ctx: Any, part: Any) -> dict[str, Any]:
        p = self.plan
        rows = rows_of(part, p.n_features)
        C, S, M = ctx.array(p.centers), ctx.array(p.sums), ctx.array(p.metrics)
        d, k = p.n_features, p.n_clusters
        count_col = np.array([d], np.int64)
        push_cols = np.concatenate([rows.keys, count_col])
        met_cols = np.concatenate([np.arange(2), N_HEAD + np.arange(k)])
        t = 0
        t0 = time.perf_counter()
        while True:
            out = rows.assign(self._centres(C, rows), accumulate=True)
            head = np.array([out.inertia, float(rows.n)])
            M.increment(np.concatenate([head, out.counts]), rows=t, cols=met_cols)
            S.increment(np.hstack([out.sums, out.counts[:, None]]), cols=push_cols)
            ctx.clock()
            # the counts come from the metrics row: task 0 zeroes S while others may still read
            counts = np.asarray(M.get(rows=t), np.float64).ravel()[N_HEAD:]
            reseed, new_rows = self._reseed(ctx, rows, out.dist, counts)
            if ctx.task_id == 0:
                f: dict[str, Any] = {
                    "counts": counts,
                    "n_features": d,
                    "reseed": reseed,
                    "rows": new_rows,
                }
                shift = float(C.psf(Shift(**f), S.plain))
                C.psf(Recenter(**f), S.plain, atomic=False)  # one round trip
                row = np.array([shift, float(reseed.size), time.perf_counter() - t0])
                M.increment(row, rows=t, cols=np.array([2, 3, 4]))
            ctx.report(inertia=out.inertia)
            ctx.clock()
            shift = float(np.asarray(M.get(rows=t)).ravel()[2])
            t += 1
            if shift <= p.tol or t >= p.max_iter:
                break
        out = rows.assign(self._centres(C, rows), accumulate=False)
        M.increment(np.array([out.inertia, float(rows.n)]), rows=t, cols=np.arange(2))
        ctx.flush()
        return {"index": int(part.index), "labels": out.labels, "n_iter": t}

    def _reseed(
        self, ctx: Any, rows: TaskRows, dist: np.ndarray, counts: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """Empty clusters and their new centres (the latter known to task 0 only)."""
        p = self.plan
        empty = np.flatnonzero(counts <= 0)
        if not empty.size:
            return np.zeros(0, np.int64), None
        m = min(int(empty.size), p.n_cand)
        F = ctx.array(p.far)
        mine = farthest(dist, m)
        if mine.size:
            offer = np.zeros((mine.size, p.n_features + 1))
            for j, i in enumerate(mine):
                offer[j, : p.n_features] = rows.global_row(int(i))
            offer[:, p.n_features] = dist[mine]
            F.increment(offer, rows=ctx.task_id * p.n_cand + np.arange(mine.size))
        ctx.clock()
        if ctx.task_id != 0:
            return empty[:m], None
        offers = np.asarray(F.get(), np.float64)
        F.increment(-offers)  # cleared for the next time
        best = farthest(offers[:, p.n_features], m)
        best = best[offers[best, p.n_features] > 0]
        return empty[: best.size], offers[best, : p.n_features]
