"""The stochastic solvers as training tasks: ``'sgd'``, ``'ftrl'`` and ``'ma-sgd'``.

One task per data partition runs :class:`SGDTask` under ``angel.train``; a
clock is one *round* and an epoch is ``plan.rounds`` rounds, the same number
for every task (a task whose rows run out does empty rounds), so clocks line up
under BSP / SSP and a resubmitted task resumes at its epoch and round.

* ``'sgd'`` / ``'ftrl'`` (Angel's mini-batch SGD): a round is one minibatch of
  ``batch`` rows: pull the weights of the batch's keys, compute the gradient
  (compiled), and push it to the server-side optimiser psf (``ops.SGD``,
  ``Momentum``, ``AdaGrad``, ``Adam`` or ``FTRL``), which steps the weights
  and its state where they live.
* ``'ma-sgd'`` (model averaging, MLlib*): a round pulls the weights of the
  partition's keys once (a pruned pull by key-set tag), runs ``local_steps``
  minibatch SGD steps locally with lazy L2/L1 (a whole pass by default), and
  pushes its model delta weighted by its share of the round's rows, so the
  servers end the round holding the average of the local models.

At the start of every epoch a task evaluates the global model (under BSP the
copy it pulled; under SSP / ASP the servers' newest values) on its validation rows and adds the sums to the epoch's row of the metrics array; rows
that every task has finished (known from the clock rule, so all tasks read the
same figures) feed ``ctx.report`` and early stopping.

Example
-------
>>> angel.train(ps, SGDTask(plan), dataset, sync=angel.SSP(staleness=1))  # doctest: +SKIP
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from ...psarray import PSArray
from .._core._metrics import should_stop
from ._inplace import InPlaceData, prepare_in_place
from ._kernels import batch_keys, grad_rows
from ._metrics import OFFSET, finish, row_width
from ._task import Plan, TaskData, prepare, pull, push

__all__ = ["Monitor", "SGDTask", "round_share"]


def round_share(plan: Plan, task: int, rnd: int) -> float:
    """Task ``task``'s share of the training rows processed in round ``rnd``."""
    per = _per_round(plan)
    done = [min(max(n - rnd * per, 0), per) for n in plan.train_rows]
    total = sum(done)
    return done[task] / total if total else 0.0


def _per_round(plan: Plan) -> int:
    if plan.solver == "ma-sgd":
        if plan.local_steps is None:
            return max(max(plan.train_rows), 1)
        return plan.local_steps * plan.batch
    return plan.batch


class Monitor:
    """Validation sums into the metrics array; finished epochs into reports and stops."""

    def __init__(self, ctx: Any, plan: Plan, data: TaskData | InPlaceData) -> None:
        self.ctx = ctx
        self.plan = plan
        self.data = data
        self.met = ctx.array(plan.metrics)
        self.history: list[dict[str, float]] = []  # finished epochs, from the metrics array
        s = ctx.staleness(plan.metrics)
        self.staleness = s
        self.width = row_width(plan.nbins)

    def latest(self, keys: np.ndarray) -> np.ndarray:
        """The weights of ``keys`` as the servers hold them now (not the task's view).

        Under SSP / ASP a task trains on a copy up to ``staleness`` clocks old;
        the validation figures are of the newest model instead.
        """
        return pull(PSArray(self.plan.weights), keys, self.plan.n_outputs, pos=self.data.pos)

    def add_train(self, epoch: int, loss: float, n: int) -> None:
        if n:
            row = np.zeros(2)
            row[:] = (n, loss)
            self.met.increment(row, rows=epoch, cols=np.arange(2))

    def evaluate(self, epoch: int, W: np.ndarray) -> None:
        """Add this task's validation sums for the model after ``epoch`` to its row."""
        res = self.data.evaluate(W, self.plan)
        if res is None:
            return
        st, hist = res
        row = np.concatenate([st, hist.ravel()])
        cols = np.arange(OFFSET, self.width)
        self.met.increment(row, rows=epoch, cols=cols)

    def stop(self, clock: int) -> bool:
        """Read the epochs every task has finished by ``clock``; True to stop early."""
        p = self.plan
        if self.staleness is None:  # ASP: no clock tells which rows are complete
            return False
        last = (clock - self.staleness - 1) // p.rounds - 1  # newest complete row
        first = len(self.history)
        if last < first:
            return False
        rows = np.asarray(self.met.get(rows=np.arange(first, last + 1)))
        for r in rows:
            m = finish(r, p.task, binary=p.binary, logloss=p.logloss, nbins=p.nbins)
            self.history.append(m)
        self.ctx.report(epoch=p.epoch0 + last + 1, **self.history[-1])
        if p.tol is None:
            return False
        return should_stop(self.history, p.monitor, p.tol, p.patience)


class SGDTask:
    """``fn(ctx, partition)`` of the stochastic solvers (see the module docstring)."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan

    def __call__(self, ctx: Any, part: Any) -> dict[str, Any]:
        p = self.plan
        tm = {"prep": 0.0, "pull": 0.0, "sgd": 0.0, "push": 0.0, "eval": 0.0, "clock": 0.0}
        t_0 = time.perf_counter()
        d: TaskData | InPlaceData | None = prepare_in_place(part, p)
        if d is None:
            d = prepare(part, p, shuffle=True)
        K = p.n_outputs
        w = ctx.array(p.weights)
        tm["prep_rows"] = time.perf_counter() - t_0
        ks = w.key_set(d.keys) if K == 1 and p.prune and d.keys.size else None
        mon = Monitor(ctx, p, d)
        tm["prep"] += time.perf_counter() - t_0
        nk = d.keys.shape[0]
        W = np.zeros((nk, K))
        G = np.zeros((nk, K))
        mark = np.full(nk, -1, np.int64)
        per = _per_round(p)
        total = p.epochs * p.rounds
        order = np.arange(0)
        loss_sum, loss_n = 0.0, 0
        c = ctx.iteration
        stopped = False
        while c < total:
            epoch, rnd = divmod(c, p.rounds)
            W0 = None
            if rnd == 0:
                seed = [int(p.seed) & 0xFFFFFFFF, int(p.epoch0 + epoch), int(part.index)]
                order = d.epoch_order(seed)
                loss_sum, loss_n = 0.0, 0
                if epoch > 0:
                    t_0 = time.perf_counter()
                    W0 = pull(w, d.keys, K, ks, not p.prune, d.pos)
                    t_1 = time.perf_counter()
                    mon.evaluate(epoch - 1, W0 if mon.staleness == 0 else mon.latest(d.keys))
                    tm["pull"] += t_1 - t_0
                    tm["eval"] += time.perf_counter() - t_1
                t_0 = time.perf_counter()
                stop = mon.stop(c)
                tm["eval"] += time.perf_counter() - t_0
                if stop:
                    stopped = True
                    break
            rows = order[rnd * per : (rnd + 1) * per]
            eta = p.eta(epoch)
            if rows.size and p.solver == "ma-sgd":
                t_0 = time.perf_counter()
                if W0 is None:
                    W0 = pull(w, d.keys, K, ks, not p.prune, d.pos)
                t_1 = time.perf_counter()
                W = W0.copy()
                loss = d.local_sgd(rows, W, p, eta)
                t_2 = time.perf_counter()
                push(w, d.keys, (W - W0) * round_share(p, ctx.task_id, rnd), K, d.pos)
                tm["pull"] += t_1 - t_0
                tm["sgd"] += t_2 - t_1
                tm["push"] += time.perf_counter() - t_2
                loss_sum += loss
                loss_n += rows.size
            elif rows.size:
                assert isinstance(d, TaskData)  # in place: ma-sgd only
                t = d.train
                bk = batch_keys(t.indptr, t.indices, rows, mark, c)
                if p.has_bias:
                    bk = np.append(bk, nk - 1)
                W[bk] = pull(w, d.keys[bk], K, None, not p.prune and False)
                G[bk] = 0.0
                loss = grad_rows(
                    t.indptr, t.indices, t.data, d.y_train, rows, W, p.kind, p.eps,
                    p.has_bias, G,
                )  # fmt: skip
                g = G[bk] / rows.size
                if p.decay_grad:
                    g *= eta / p.eta0
                keys = d.keys[bk]
                if K == 1:
                    p.optimizer.step(g[:, 0], cols=keys, casting="same_kind", atomic=False)
                else:
                    p.optimizer.step(g, rows=keys, casting="same_kind", atomic=False)
                loss_sum += loss
                loss_n += rows.size
            if rnd == p.rounds - 1:
                mon.add_train(epoch, loss_sum, loss_n)
            t_0 = time.perf_counter()
            ctx.clock()
            tm["clock"] += time.perf_counter() - t_0
            c = ctx.iteration
        if not stopped and c >= total and total:
            t_0 = time.perf_counter()
            mon.evaluate(p.epochs - 1, mon.latest(d.keys))
            tm["eval"] += time.perf_counter() - t_0
        return {"epochs": c // p.rounds if p.rounds else 0, "stopped": stopped, "timings": tm}
