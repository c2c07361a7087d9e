"""Lloyd's algorithm as a training task: one pull, one push and one clock per iteration.

One task per partition runs :class:`LloydTask` under ``angel.train`` (BSP).
Iteration ``t`` of a task is:

1. **pull**: the :class:`~._psfs.Centres` psf on ``(S_{t-1}, S_{t-2})`` returns the
   centres of iteration ``t`` (only the columns the task's rows use, for sparse
   rows), computed by the servers from the sums every task set at ``t - 1``,
   together with the shift, inertia and re-seeds of update ``t - 1``;
2. if the shift is at most ``tol`` (absolute: the estimator scales the user's
   ``tol`` by the data's mean variance, as scikit-learn does) or ``max_iter``
   updates are done, stop;
3. assign every row (:mod:`._kernels`; dense rows with Hamerly's bounds,
   :mod:`._bounds`, which skip the rows whose nearest centre cannot have changed) and **push**: *set* the task's own rows of
   ``S_t`` (sums, counts, its farthest rows as re-seed candidates, its inertia);
4. ``clock()``.

The stop is the same in every task (all read the same figures).  After it, the
task assigns its rows once more with the final centres and returns its labels
and inertia, its rows (and how they are stored: dense, or CSR never densified),
the seconds it spent pulling, assigning, pushing and
waiting at the clock (the balance of the tasks); task 0 also returns the
per-iteration history it read.  The
initial centres are ``S_{-1}``: task 0's cluster rows of the third array
(counts 1), which task 0 overwrites in full at ``t = 2``.

A task resubmitted after a failure resumes at its clock: every figure it needs
is on the PS, and the rows it writes again replace the ones it wrote before.

Example
-------
>>> angel.train(ps, LloydTask(plan), dataset, sync=angel.BSP())   # doctest: +SKIP
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from ... import config
from .._core import ExitHook
from ._bounds import Bounded, BoundedOut
from ._psfs import Centres, Geometry, farthest
from ._rows import TaskRows, rows_of

__all__ = ["LloydTask", "Plan", "task_values"]


@dataclass(frozen=True)
class Plan:
    """What every task of one Lloyd fit needs (plain values)."""

    buffers: tuple[str, str, str]  # S_t lives in buffers[t % 3]; S_{-1} in buffers[2]
    geometry: tuple[int, int, int, int, int]  # the Geometry's fields
    max_iter: int
    tol: float  # absolute, on the summed squared centre shift
    dtype: str = "float64"  # of the accumulators (and of the pulled centres)


def task_values(
    g: Geometry, rows: TaskRows, out: Any, cols: np.ndarray, dtype: str = "float64"
) -> np.ndarray:
    """The values of a task's own rows of ``S_t`` on the physical columns ``cols``
    (``out``: an :class:`~._kernels.Assigned`, or a :class:`~._bounds.BoundedOut`
    carrying its re-seed candidates ``far`` / ``far_dist``), in the accumulators'
    ``dtype``."""
    k, m = g.n_clusters, g.n_cand
    at_feat = np.searchsorted(cols, g.phys(rows.keys))
    at_count = np.searchsorted(cols, g.count_cols())
    V = np.zeros((k + m + 1, cols.shape[0]), dtype)
    V[:k, at_feat] = out.sums
    V[:k, at_count] = out.counts[:, None]
    if isinstance(out, BoundedOut):
        far, far_dist = out.far, out.far_dist
    else:
        far = farthest(out.dist, m)
        far = far[out.dist[far] > 0]
        far_dist = out.dist[far]
    if far.size:
        if rows.dense is not None:
            cand = rows.dense[far].astype(np.float64)
        else:
            cand = np.stack([rows.row(int(i)) for i in far])  # at most n_cand rows
        V[k + np.arange(far.size)[:, None], at_feat[None, :]] = cand
        V[k + np.arange(far.size)[:, None], at_count[None, :]] = far_dist[:, None]
    V[k + m, np.searchsorted(cols, 0)] = out.inertia
    V[k + m, np.searchsorted(cols, 1)] = float(rows.n)
    return V


class LloydTask:
    """``fn(ctx, partition)`` of Lloyd's algorithm (see the module docstring)."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan

    def __call__(self, ctx: Any, part: Any) -> dict[str, Any]:
        p = self.plan
        g = Geometry(*p.geometry)
        rows = rows_of(part, g.n_features)
        S = [ctx.array(n).plain for n in p.buffers]
        me = int(ctx.task_id)
        pull = Centres(p.geometry, None if rows.all_columns else rows.keys, p.dtype)
        cols = np.unique(np.concatenate([g.phys(rows.keys), g.count_cols(), [0, 1]]))
        own = np.concatenate([g.cluster_rows(me), g.cand_rows(me), [g.metrics_row(me)]])
        t = int(ctx.iteration)  # a resubmitted task resumes here
        bounded = None
        if rows.dense is not None and bool(config.get("daskangel.kmeans.bounds")):
            bounded = Bounded(rows.dense, rows.xnorm)
        last: np.ndarray | None = None  # the previous centres, transposed
        last_norms = np.zeros(g.n_clusters)
        history: list[dict[str, float]] = []
        t0 = time.perf_counter()
        hook = ExitHook.from_config("kmeans", "exit-at-iteration")
        spent = dict.fromkeys(("pull", "assign", "push", "clock"), 0.0)
        while True:
            ta = time.perf_counter()
            got = S[(t - 1) % 3 if t >= 1 else 2].psf(pull, S[(t - 2) % 3 if t >= 2 else 2])
            CT, cn = got["centres_t"], got["norms"]
            tb = time.perf_counter()
            spent["pull"] += tb - ta
            empty = np.isnan(cn)  # an empty cluster nothing re-seeded keeps its centre
            if empty.any():
                CT[:, empty] = 0.0 if last is None else last[:, empty]
                cn[empty] = last_norms[empty]
            C = CT.T  # (k, n) view; the CSR kernel reads CT as it is
            whole = None if rows.all_columns else cn  # CSR rows: C is only their columns
            if t >= 1:
                fig = {"inertia": got["inertia"], "center_shift": got["shift"]}
                ctx.report(iteration=t, **fig)
                if me == 0:
                    history.append({"iteration": t, **fig, "reseeded": got["reseeded"],
                                    "time": time.perf_counter() - t0})  # fmt: skip
            if t >= p.max_iter or (t >= 1 and got["shift"] <= p.tol):
                break
            out = bounded.step(C, g.n_cand) if bounded is not None else rows.assign(C, True, whole)
            tc = time.perf_counter()
            full = me == 0 and t == 2  # erase the initial centres in S_{-1}'s array
            at = np.arange(g.n_phys) if full else cols
            S[t % 3].set(task_values(g, rows, out, at, p.dtype), rows=own, cols=at)
            hook.at(ctx, t)  # the test hook: die after this iteration's push
            td = time.perf_counter()
            ctx.clock()
            te = time.perf_counter()
            spent["assign"] += tc - tb
            spent["push"] += td - tc
            spent["clock"] += te - td
            last, last_norms = CT, cn
            del out
            t += 1
        out = rows.assign(C, False, whole)
        stored = (f"dense {rows.dense.dtype}" if rows.dense is not None else
                  f"CSR, nnz {rows.data.size}, {rows.keys.size} columns")  # fmt: skip
        return {"index": int(part.index), "labels": out.labels, "n_iter": t,
                "inertia": out.inertia, "history": history, "rows": rows.n,
                "seconds": spent, "stored": stored}  # fmt: skip
