"""Mini-batch k-means (Sculley, 2010) as a training task: per-centre rates, SSP allowed.

Every task runs :class:`MiniBatchTask` on its partition: each epoch visits its
rows in a seeded random order, ``batch`` rows a clock (``batch_size`` split
over the tasks; a task with fewer rows wraps around, so every task takes the
same number of steps).  A step pulls the centres (only the columns the batch
uses, and the count column ``d``; for CSR rows also every centre's whole
``||c||^2``, :class:`~._psfs.CentreNorms`), assigns the batch, and pushes for each
centre ``j`` that got ``m_j`` rows with sum ``s_j``::

    delta_j = (s_j - m_j c_j) / (v_j + T m_j)         v_j += m_j   (column d)

``v_j`` is the number of rows centre ``j`` has absorbed, so its learning rate
is Sculley's ``1 / v_j``; the ``T m_j`` (``T`` tasks) makes the ``T`` pushes
of one clock add up to the update of one global batch of ``T`` times the
task's size (exact when the tasks' counts agree).  The pushes are additive, so
the job may run under SSP: a task then assigns with centres up to ``s`` clocks
old.

Each step adds the batch's inertia (before the update) to its epoch's metrics
row ``[inertia sum, rows]``.

Under BSP a step takes two clocks: the pull, a *read barrier* (a clock), then
the assignment and the push, then the step's clock.  Without the barrier a task
still pulling could read a faster task's push of the same step, and two fits
with one ``random_state`` differed.  Under SSP or ASP a step is one clock and a
fit depends on the tasks' timing.

Example
-------
>>> import numpy as np
>>> c = np.array([[0.0, 0.0]]); s = np.array([[4.0, 2.0]])
>>> sculley_delta(c, s, np.array([2.0]), np.array([0.0]), 1).tolist()  # first batch: its mean
[[2.0, 1.0]]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ._psfs import CentreNorms
from ._rows import rows_of

__all__ = ["MiniBatchTask", "Plan", "sculley_delta"]


@dataclass(frozen=True)
class Plan:
    """What every task of one mini-batch fit needs (plain values)."""

    centers: str  # PS array (k, d + 1): column d counts the rows each centre absorbed
    metrics: str  # (epochs, 2) float64
    n_clusters: int
    n_features: int
    epochs: int
    steps: int  # steps per epoch (a step is two clocks with ``barrier``, else one)
    batch: int  # rows per task per step
    n_tasks: int
    seed: int
    barrier: bool = True  # BSP: a read barrier between each step's pull and push

    @property
    def clocks_per_step(self) -> int:
        return 2 if self.barrier else 1


def sculley_delta(
    c: np.ndarray, s: np.ndarray, m: np.ndarray, v: np.ndarray, n_tasks: int
) -> np.ndarray:
    """The change of the centres ``c`` for batch sums ``s`` and counts ``m``."""
    has = m > 0
    out = np.zeros_like(c)
    den = (v[has] + n_tasks * m[has])[:, None]
    out[has] = (s[has] - m[has, None] * c[has]) / den
    return out


class MiniBatchTask:
    """``fn(ctx, partition)`` of mini-batch k-means (see the module docstring)."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan

    def __call__(self, ctx: Any, part: Any) -> dict[str, Any]:
        p = self.plan
        rows = rows_of(part, p.n_features)
        C, M = ctx.array(p.centers), ctx.array(p.metrics)
        d = p.n_features
        n = rows.n
        two = np.arange(2)
        done = 0
        order, order_epoch = np.zeros(0, np.int64), -1
        per = p.clocks_per_step
        while ctx.iteration < p.epochs * p.steps * per:
            sc, phase = divmod(ctx.iteration, per)  # phase 1: resumed past its read barrier
            epoch, step = divmod(sc, p.steps)
            barrier = per == 2 and phase == 0
            if n:
                if epoch != order_epoch:
                    rng = np.random.default_rng([p.seed & 0xFFFFFFFF, 61, epoch, int(part.index)])
                    order, order_epoch = rng.permutation(n), epoch
                idx = np.sort(np.take(order, np.arange(step * p.batch, (step + 1) * p.batch),
                                      mode="wrap"))  # fmt: skip
                sub = rows.take(idx)
                cols = np.concatenate([sub.keys, [d]])
                got = np.asarray(C.get(cols=cols), np.float64)
                # CSR rows: the centres' norms over every feature (the pull has the
                # batch's columns only); read after the pull, before the barrier
                whole = None if rows.all_columns else C.psf(CentreNorms(d))
                if barrier:
                    ctx.clock()  # the read barrier: every task has its centres before any push
                cen, v = got[:, :-1], got[:, -1]
                out = sub.assign(cen, True, whole)
                delta = sculley_delta(cen, out.sums, out.counts, v, p.n_tasks)
                C.increment(np.hstack([delta, out.counts[:, None]]), cols=cols)
                M.increment(np.array([out.inertia, float(sub.n)]), rows=epoch, cols=two)
                done += sub.n
                ctx.report(batch_inertia=out.inertia / sub.n if sub.n else 0.0)
            elif barrier:
                ctx.clock()  # no rows: the read barrier all the same
            ctx.clock()
        return {"index": int(part.index), "rows_seen": done}
