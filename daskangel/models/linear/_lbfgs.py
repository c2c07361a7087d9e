"""Full-batch L-BFGS and OWL-QN with every vector on the PS and the algebra as psfs.

The tasks form one group (lockstep clocks, whatever ``sync`` says: a quasi-Newton
step needs the exact full gradient).  One clock is one evaluation of the
objective at the point ``w`` held by the PS:

1. every task pulls the weights of its partition's keys, adds its loss gradient
   to the accumulator ``G`` and its loss to the metrics row, evaluates its
   validation rows, flushes, and meets the others at a barrier;
2. the leader (rank 0) finishes the objective (mean loss + ``alpha/2 |w|^2`` +
   ``l1 |w|_1``) with psfs (``Scale``, ``Axpy``, ``Dot``, ``Asum``), runs one
   step of a backtracking (Armijo) line search, and on acceptance the L-BFGS
   two-loop recursion over the ``memory`` pairs ``S_i``, ``Y_i`` (``Dot`` and
   ``Axpy`` on the servers: no vector ever comes to the leader), then writes
   the next trial point into ``w`` and tells every member whether to go on.

Arrays (co-partitioned with ``w``): ``x`` (accepted point), ``G`` (gradient
accumulator), ``g`` (gradient at ``x``), ``d`` (direction), ``q`` (two-loop
scratch), ``pg`` (OWL-QN pseudo-gradient), ``S0..``, ``Y0..``.

.. warning::
   The intercept is regularised like the other weights here (as liblinear does),
   and the leader's line-search state lives in its task: a resubmitted leader
   restarts the curvature memory.

Example
-------
>>> angel.train(ps, QNTask(plan), ds, groups=1, group_size=len(ds.partitions))  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ... import ops
from ...psarray import PSArray
from .._core._rows import pull, push
from ._kernels import grad_rows
from ._psfs import OrthantProject, ProjectDirection, PseudoGradient
from ._solvers import Monitor
from ._task import Plan, prepare

__all__ = ["QNTask", "qn_arrays"]


def qn_arrays(weights: str, memory: int) -> list[str]:
    """Names of the PS vectors L-BFGS / OWL-QN keep next to ``weights``."""
    base = [f"{weights}.{n}" for n in ("x", "G", "g", "d", "q", "pg")]
    return (
        base
        + [f"{weights}.S{i}" for i in range(memory)]
        + [f"{weights}.Y{i}" for i in range(memory)]
    )


class _Leader:
    """The line search and two-loop recursion, run by the group leader."""

    C1 = 1e-4

    def __init__(self, plan: Plan, n_rows: int) -> None:
        self.plan = plan
        self.n = max(n_rows, 1)
        a = {n.rsplit(".", 1)[1]: PSArray(n) for n in qn_arrays(plan.weights, plan.memory)}
        self.a = a
        self.w = PSArray(plan.weights)
        self.owl = plan.solver == "owlqn"
        self.pairs: list[tuple[int, float]] = []  # (slot, rho), oldest first
        self.next_slot = 0
        self.fx: float | None = None
        self.t = 1.0
        self.gd = 0.0
        self.ls_steps = 0

    def _psf(self, func: Any, *arrays: PSArray) -> Any:
        return arrays[0].psf(func, *arrays[1:], atomic=False)

    def objective(self, loss_sum: float) -> float:
        """Finish ``f`` and ``G`` at ``w``: mean loss and gradient plus the regularisers."""
        p, G, w = self.plan, self.a["G"], self.w
        self._psf(ops.Scale(1.0 / self.n), G)
        f = loss_sum / self.n
        if p.alpha:
            self._psf(ops.Axpy(p.alpha), w, G)
            f += 0.5 * p.alpha * float(self._psf(ops.Dot(), w, w))
        if self.owl and p.l1:
            f += p.l1 * float(self._psf(ops.Asum(), w))
        return f

    def _direction(self) -> None:
        a = self.a
        src = a["pg"] if self.owl else a["g"]
        q = a["q"]
        self._psf(ops.Copy(), src, q)
        alphas = []
        for slot, rho in reversed(self.pairs):
            al = rho * float(self._psf(ops.Dot(), a[f"S{slot}"], q))
            self._psf(ops.Axpy(-al), a[f"Y{slot}"], q)
            alphas.append(al)
        if self.pairs:
            slot, rho = self.pairs[-1]
            yy = float(self._psf(ops.Dot(), a[f"Y{slot}"], a[f"Y{slot}"]))
            self._psf(ops.Scale(1.0 / (rho * yy)), q)
        for (slot, rho), al in zip(self.pairs, reversed(alphas), strict=True):
            b = rho * float(self._psf(ops.Dot(), a[f"Y{slot}"], q))
            self._psf(ops.Axpy(al - b), a[f"S{slot}"], q)
        self._psf(ops.Copy(), q, a["d"])
        self._psf(ops.Scale(-1.0), a["d"])
        if self.owl:
            self._psf(ProjectDirection(), a["d"], a["pg"])
        self.gd = float(self._psf(ops.Dot(), src, a["d"]))
        if self.gd >= 0:  # not a descent direction: forget the curvature, go down the gradient
            self.pairs = []
            self._psf(ops.Copy(), src, a["d"])
            self._psf(ops.Scale(-1.0), a["d"])
            self.gd = float(self._psf(ops.Dot(), src, a["d"]))

    def _trial(self, t: float) -> None:
        a = self.a
        self.t = t
        self._psf(ops.Copy(), a["x"], self.w)
        self._psf(ops.Axpy(t), a["d"], self.w)
        if self.owl:
            self._psf(OrthantProject(), self.w, a["x"], a["pg"])

    def _accept(self, f: float) -> None:
        a = self.a
        self._psf(ops.Copy(), self.w, a["x"])
        self._psf(ops.Copy(), a["G"], a["g"])
        if self.owl:
            self._psf(PseudoGradient(self.plan.l1), a["x"], a["g"], a["pg"])
        self.fx = f

    def step(self, f: float) -> bool:
        """Consume the evaluation ``f`` at ``w``; set the next ``w``.  True: stop."""
        a, p = self.a, self.plan
        stop = False
        if self.fx is None:
            self._accept(f)
            self._direction()
            dn = float(self._psf(ops.Nrm2(), a["d"]))
            self._trial(1.0 / max(dn, 1.0))
        else:
            if self.owl:
                decrease = float(self._psf(ops.Dot(), a["pg"], self.w)) - float(
                    self._psf(ops.Dot(), a["pg"], a["x"])
                )
            else:
                decrease = self.t * self.gd
            if f <= self.fx + self.C1 * decrease:
                slot = self.next_slot
                S, Y = a[f"S{slot}"], a[f"Y{slot}"]
                self._psf(ops.Copy(), self.w, S)
                self._psf(ops.Axpy(-1.0), a["x"], S)
                self._psf(ops.Copy(), a["G"], Y)
                self._psf(ops.Axpy(-1.0), a["g"], Y)
                ys = float(self._psf(ops.Dot(), Y, S))
                if ys > 1e-12:
                    self.pairs = [q for q in self.pairs if q[0] != slot] + [(slot, 1.0 / ys)]
                    self.next_slot = (slot + 1) % p.memory
                fx = self.fx
                self._accept(f)
                rel = abs(fx - f) / max(abs(f), abs(fx), 1.0)
                if p.tol is not None and rel < p.tol:
                    stop = True
                else:
                    self._direction()
                    self._trial(1.0)
            elif self.t < 1e-10:
                self._psf(ops.Copy(), a["x"], self.w)  # no progress possible: keep x
                stop = True
            else:
                self._trial(self.t * 0.5)
        self._psf(ops.Fill(0.0), a["G"])
        return stop


class QNTask:
    """``fn(ctx, partition)`` of ``'lbfgs'`` / ``'owlqn'`` (see the module docstring)."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan

    def __call__(self, ctx: Any, part: Any) -> dict[str, Any]:
        p = self.plan
        d = prepare(part, p)
        K = p.n_outputs
        w = ctx.array(p.weights)
        G = ctx.array(f"{p.weights}.G")
        ks = w.key_set(d.keys) if K == 1 and d.keys.size else None
        mon = Monitor(ctx, p, d)
        t = d.train
        rows = np.arange(t.n_rows)
        leader = _Leader(p, sum(p.train_rows)) if ctx.is_leader else None
        met = PSArray(p.metrics)
        c = ctx.iteration
        while c < p.epochs:
            W = pull(w, d.keys, K, ks)
            g = np.zeros_like(W)
            loss = 0.0
            if rows.size:
                loss = grad_rows(
                    t.indptr, t.indices, t.data, d.y_train, rows, W, p.kind, p.eps, p.has_bias, g
                )
                push(G, d.keys, g, K)
            mon.add_train(c, loss, rows.size)
            mon.evaluate(c, W)
            ctx.flush()
            ctx.barrier()
            if leader is not None:
                loss_sum = float(np.asarray(met.get(rows=c, cols=[1])).ravel()[0])
                f = leader.objective(loss_sum)
                ctx.report(objective=f)
                ctx.send([leader.step(f)] * ctx.group_size)
            stop = bool(ctx.receive())
            ctx.ack(stop)
            ctx.clock()
            c = ctx.iteration
            if stop:
                break
        return {"epochs": c, "stopped": c < p.epochs}
