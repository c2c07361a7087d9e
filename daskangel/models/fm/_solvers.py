"""A factorization machine's training task: minibatches through server-side optimisers, or MA-SGD.

One task per data partition runs :class:`FMTask` under ``angel.train``; an
epoch is ``plan.rounds`` rounds, the same number for every task (a task whose
rows run out does empty rounds), so clocks line up under BSP / SSP and a
resubmitted task resumes at its epoch and round.  Under BSP a round is two
clocks (:mod:`.._core._rounds`): the reads, a read barrier, then the writes, so
every task of a round reads the same model and two fits with one
``random_state`` give the same model (up to the rounding of float64 sums);
under SSP / ASP a round is one clock.

* ``'adam'``, ``'adagrad'``, ``'ftrl'``, ``'sgd'``: a round is one minibatch
  per task: pull the rows (linear weight and factors) of the batch's features
  only, compute the gradient over the CSR rows (compiled, ``O(nnz k)``) and add
  the L2 terms of the touched rows.  Under BSP the tasks add their gradients,
  weighted by their share of the round's rows, to an accumulator array, and
  after the barrier each applies the optimiser psf to the rows it touched
  (:func:`daskangel.ops.step_accumulated`: one step per entry with the summed
  gradient, whatever the order), so a round is one synchronous step of the
  round's whole batch.  Under SSP / ASP each task pushes its gradient to the
  optimiser psf as it comes (Angel's way): the optimiser's state then depends
  on the order of arrival and fits are not repeatable.
* ``'ma-sgd'``: a round pulls the rows of the partition's keys once (pruned),
  runs ``local_steps`` minibatch SGD steps locally (a whole pass by default)
  and pushes the model delta weighted by the task's share of the round's rows,
  so the servers end the round holding the average of the local models.  Under
  SSP / ASP it pulls past the clock cache (the servers' newest rows), as the
  linear models do: against an older cached base the changes other tasks
  pushed since would be added a second time.  The squared loss's step is capped
  at ``1 / (max |x|^2 + 1)`` (:func:`step_cap`).

A step that leaves a non-finite loss, gradient or model raises
:class:`~daskangel.errors.DivergedError` instead of pushing it.  At the start
of every epoch a task evaluates the model on its validation rows into the
epoch's row of the metrics array (:class:`.._core._monitor.Monitor`).

Example
-------
>>> angel.train(ps, FMTask(plan), dataset, sync=angel.BSP())  # doctest: +SKIP
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from ...ops import step_accumulated
from ...psarray import PSArray
from .._core._monitor import Monitor
from .._core._order import round_share, rows_per_round
from .._core._rounds import barrier, check_finite_step
from .._core._rows import pull, push
from ._kernels import SQUARED, batch_keys, grad_rows
from ._task import Plan, TaskData, prepare

__all__ = ["FMTask", "per_round", "step_cap"]


def per_round(plan: Plan) -> int:
    """Training rows a task visits in one clock."""
    return rows_per_round(plan.solver, plan.local_steps, plan.batch, plan.train_rows)


class FMTask:
    """``fn(ctx, partition)`` of a factorization machine's fit (see the module docstring)."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan

    def __call__(self, ctx: Any, part: Any) -> dict[str, Any]:
        p = self.plan
        tm = {"prep": 0.0, "pull": 0.0, "grad": 0.0, "push": 0.0, "eval": 0.0, "clock": 0.0}
        t_0 = time.perf_counter()
        d = prepare(part, p)
        D = p.width
        w = ctx.array(p.weights)
        acc = ctx.array(p.acc) if p.acc else None
        mon = Monitor(ctx, p, lambda W: d.evaluate(W, p))
        # ma-sgd pushes its change against the rows it pulled: under SSP / ASP that
        # base must be the servers' newest (see the linear models' SGDTask)
        base = w.plain if p.solver == "ma-sgd" and mon.staleness != 0 else w
        tm["prep"] += time.perf_counter() - t_0
        nk = d.keys.shape[0]
        W = np.zeros((nk, D))
        G = np.zeros((nk, D))
        mark = np.full(nk, -1, np.int64)
        scratch = np.empty(nk, np.int64)
        per = per_round(p)
        rc_of = p.clock_rounds
        cap = step_cap(p, d) if p.solver == "ma-sgd" else float("inf")
        order = np.arange(0)
        loss_sum, loss_n = 0.0, 0
        c = ctx.iteration
        stopped = False
        t = d.train
        while c < rc_of.total(p.epochs):
            rc, epoch, rnd, phase = rc_of.at(c)
            W0 = None
            if rnd == 0 and phase == 0:
                order = d.epoch_order([int(p.seed) & 0xFFFFFFFF, p.epoch0 + epoch, part.index])
                loss_sum, loss_n = 0.0, 0
                if epoch > 0:
                    t_0 = time.perf_counter()
                    W0 = pull(base, d.keys, D, pos=d.pos)
                    t_1 = time.perf_counter()
                    fresh = mon.staleness == 0 or base is not w
                    mon.evaluate(epoch - 1, W0 if fresh else self._latest(d))
                    tm["pull"] += t_1 - t_0
                    tm["eval"] += time.perf_counter() - t_1
                t_0 = time.perf_counter()
                stopped = mon.stop(rc)
                tm["eval"] += time.perf_counter() - t_0
                if stopped:
                    break
            rows = order[rnd * per : (rnd + 1) * per]
            share = round_share(per, p.train_rows, ctx.task_id, rnd)
            if p.solver == "ma-sgd":
                if rows.size:
                    t_0 = time.perf_counter()
                    if W0 is None:
                        W0 = pull(base, d.keys, D, pos=d.pos)
                    tm["pull"] += time.perf_counter() - t_0
                if rc_of.per == 2 and phase == 0:
                    barrier(ctx, tm)  # every task has its base before any push
                if rows.size:
                    assert W0 is not None
                    t_1 = time.perf_counter()
                    W = W0.copy()
                    eta = min(p.eta(epoch), cap)
                    loss = d.local_sgd(rows, W, p, eta)
                    check_finite_step(loss, W, p.epoch0 + epoch, eta)
                    t_2 = time.perf_counter()
                    push(w, d.keys, (W - W0) * share, D, d.pos)
                    tm["grad"] += t_2 - t_1
                    tm["push"] += time.perf_counter() - t_2
                    loss_sum += loss
                    loss_n += rows.size
            else:
                keys = np.zeros(0, np.int64)
                if rows.size:
                    bk = np.append(batch_keys(t.indptr, t.indices, rows, mark, c, scratch), nk - 1)
                    keys = d.keys[bk] if d.pos is None else d.keys[d.pos[bk]]
                if rows.size and phase == 0:
                    t_0 = time.perf_counter()
                    W[bk] = pull(w, keys, D)
                    t_1 = time.perf_counter()
                    G[bk] = 0.0
                    loss = grad_rows(
                        t.indptr, t.indices, t.data, d.y_train, rows, W, d.fields, p.n_fields,
                        p.kind, G,
                    )  # fmt: skip
                    g = G[bk] / rows.size
                    g[:-1, 0] += p.reg_linear * W[bk[:-1], 0]
                    g[:-1, 1:] += p.reg_factors * W[bk[:-1], 1:]
                    check_finite_step(float(loss), g, p.epoch0 + epoch, p.eta0)
                    t_2 = time.perf_counter()
                    if acc is not None:  # summed with the other tasks', stepped after the barrier
                        acc.increment(g * share, rows=keys, casting="same_kind")
                    else:
                        p.optimizer.step(g, rows=keys, casting="same_kind", atomic=False)
                    tm["pull"] += t_1 - t_0
                    tm["grad"] += t_2 - t_1
                    tm["push"] += time.perf_counter() - t_2
                    loss_sum += float(loss)
                    loss_n += rows.size
                if rc_of.per == 2 and phase == 0:
                    barrier(ctx, tm)  # every task's gradient is in the accumulator
                if acc is not None and keys.size:
                    t_0 = time.perf_counter()
                    step_accumulated(p.optimizer, acc.plain, rows=keys, atomic=False)
                    tm["push"] += time.perf_counter() - t_0
            c = mon.end_round(epoch, rnd == p.rounds - 1, loss_sum, loss_n, tm)
        # the monitor counts rounds: with the read barrier a round is two clocks
        return mon.finish(c // rc_of.per, p.epochs, stopped, lambda: self._latest(d), tm)

    def _latest(self, d: TaskData) -> np.ndarray:
        """The rows of ``d``'s keys as the servers hold them now (not the task's view)."""
        return pull(PSArray(self.plan.weights), d.keys, self.plan.width, pos=d.pos)


def step_cap(plan: Plan, d: TaskData) -> float:
    """MA-SGD's largest stable step for the squared loss: ``1 / (max |x|^2 + 1)`` over
    the task's training rows (a step scales a row's residual by ``1 - eta |x|^2`` in its
    linear part; unscaled features would overflow), as the linear models cap theirs.
    The logistic gradient is bounded: no cap."""
    if plan.kind != SQUARED or d.train.n_rows == 0:
        return float("inf")
    t = d.train
    row = np.repeat(np.arange(t.n_rows), np.diff(t.indptr))
    sq = np.bincount(row, weights=np.asarray(t.data, np.float64) ** 2, minlength=t.n_rows)
    return 1.0 / (float(sq.max(initial=0.0)) + 1.0)
