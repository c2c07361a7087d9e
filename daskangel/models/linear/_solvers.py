"""The stochastic solvers as training tasks: ``'sgd'``, ``'ftrl'`` and ``'ma-sgd'``.

One task per data partition runs :class:`SGDTask` under ``angel.train``; a
clock is one *round* and an epoch is ``plan.rounds`` rounds, the same number
for every task (a task whose rows run out does empty rounds), so clocks line up
under BSP / SSP and a resubmitted task resumes at its epoch and round.

* ``'sgd'`` / ``'ftrl'`` (Angel's mini-batch SGD): a minibatch of ``batch``
  rows pulls the weights of its keys, computes the gradient (compiled), and
  pushes it to the server-side optimiser psf (``ops.SGD``, ``Momentum``,
  ``AdaGrad``, ``Adam`` or ``FTRL``), which steps the weights and its state
  where they live; a round is ``plan.group`` minibatches whose pulls and pushes
  overlap their compute (:mod:`._minibatch`).
* ``'ma-sgd'`` (model averaging, MLlib*): a round pulls the weights of the
  partition's keys once (a pruned pull by key-set tag), runs ``local_steps``
  minibatch SGD steps locally with lazy L2/L1 (a whole pass by default), and
  pushes its model delta weighted by its share of the round's rows, so the
  servers end the round holding the average of the local models.  With
  ``adaptive=True`` the local steps are per-feature AdaGrad (:mod:`._adaptive`)
  and the squared-gradient sums are pulled, and their change pushed, alike.
  A task whose keys are most of the vector pushes it, and pulls the weights, whole
  (:mod:`._exchange`).

Under SSP / ASP, ``ma-sgd`` pulls its base past the clock cache (the servers'
newest weights): its push is the change of its local model against that base,
and against a cached, older base the changes other tasks pushed since would be
added a second time (the model oscillated, its epochs scored like a coin).

Under BSP a ``'ma-sgd'`` round takes two clocks: every task pulls its base,
then a *read barrier* (a clock), then local SGD and the push, then the round's
clock.  With one clock a task that is still pulling its base could read the
pushes of a faster task's same round (its delta flushed at its next clock), so
two fits with one ``random_state`` differed by whole percents; with the barrier
every task starts a round from the same weights, and what is left of the arrival
order is the rounding of the servers' sums.

At the start of every epoch a task evaluates the global model (under BSP the
copy it pulled; under SSP / ASP the servers' newest values) on its validation
rows and adds the sums to the epoch's row of the metrics array; rows that every
task has finished (known from the clock rule, so all tasks read the same
figures) feed ``ctx.report`` and early stopping.  Under BSP ``'ma-sgd'`` decides
right after the read barrier, which every task passes only once each has added
the last epoch's sums: it stops before training an epoch it will not keep (the
other solvers decide an epoch later, when the next clock has completed the row).

Example
-------
>>> angel.train(ps, SGDTask(plan), dataset, sync=angel.SSP(staleness=1))  # doctest: +SKIP
"""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from ...psarray import PSArray
from .._core._monitor import Monitor as _Monitor
from .._core._order import round_share as _round_share
from .._core._order import rows_per_round
from .._core._rounds import check_finite_step
from .._core._rows import pull, push
from ._exchange import DensePush, dense_on, pull_dense
from ._inplace import InPlaceData, prepare_in_place
from ._kernels import SQ_HINGE, SQUARED
from ._minibatch import MinibatchRounds
from ._task import Plan, TaskData, prepare

__all__ = ["Monitor", "SGDTask", "check_finite_step", "round_share", "step_cap"]


def round_share(plan: Plan, task: int, rnd: int) -> float:
    """Task ``task``'s share of the training rows processed in round ``rnd``."""
    return _round_share(_per_round(plan), plan.train_rows, task, rnd)


def _per_round(plan: Plan) -> int:
    if plan.solver in ("sgd", "ftrl"):  # plan.group minibatches a clock (see _minibatch)
        return plan.batch * plan.group
    return rows_per_round(plan.solver, plan.local_steps, plan.batch, plan.train_rows)


def step_cap(plan: Plan, max_sq: float) -> float:
    """The largest stable local step of a loss whose gradient grows with the margin.

    A step of ``eta`` on one row of squared loss scales its residual by
    ``1 - eta |x|^2`` (squared hinge: ``1 - 2 eta |x|^2``), so on unscaled
    features (``|x|^2`` in the hundreds) a default ``learning_rate`` of 0.01
    overflows within an epoch.  ``'ma-sgd'`` therefore never steps past
    ``1 / L`` (squared hinge ``1 / 2L``), ``L = max |x|^2 (+1 for the intercept)``
    over the task's training rows: the step scikit-learn's SAG solvers take for
    the squared loss.  The logistic, hinge, Huber and softmax gradients are
    bounded, so their steps are not capped.
    """
    if plan.kind not in (SQUARED, SQ_HINGE):
        return float("inf")
    L = max_sq + (1.0 if plan.has_bias else 0.0)
    if L <= 0.0:
        return float("inf")
    return 1.0 / (L * (2.0 if plan.kind == SQ_HINGE else 1.0))


class Monitor(_Monitor):
    """The shared :class:`.._core._monitor.Monitor` of a linear model's task data."""

    plan: Plan

    def __init__(self, ctx: Any, plan: Plan, data: TaskData | InPlaceData) -> None:
        self.data = data
        self._epoch = 0
        super().__init__(ctx, plan, self._sums)

    def evaluate(self, epoch: int, W: np.ndarray) -> None:
        """The shared monitor's, once ``W`` and its sums are checked finite: ``'sgd'``
        pushes its last steps after its last pull, so a step that blew the servers'
        weights up is first seen here (a DivergedError, not a non-finite metric)."""
        check_finite_step(0.0, W, epoch, self.plan.eta(epoch))
        self._epoch = epoch
        super().evaluate(epoch, W)

    def _sums(self, W: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        res = self.data.evaluate(W, self.plan)
        if res is not None and not all(np.isfinite(a).all() for a in res):
            check_finite_step(float("inf"), None, self._epoch, self.plan.eta(self._epoch))
        return res

    def latest(self, keys: np.ndarray) -> np.ndarray:
        """The weights of ``keys`` as the servers hold them now (not the task's view).

        Under SSP / ASP a task trains on a copy up to ``staleness`` clocks old;
        the validation figures are of the newest model instead.
        """
        return pull(PSArray(self.plan.weights), keys, self.plan.n_outputs, pos=self.data.pos)


def _stop(mon: Monitor, rnd: int, tm: dict[str, float]) -> bool:
    """Whether to stop early at round ``rnd`` (:meth:`Monitor.stop`), timed into ``tm``."""
    t_0 = time.perf_counter()
    stop = mon.stop(rnd)
    tm["eval"] += time.perf_counter() - t_0
    return stop


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
        # ma-sgd's pushes as whole vectors when its keys cover most of one
        dense = bool(K == 1 and p.solver == "ma-sgd") and dense_on(
            p.dense_keys, d.keys, p.n_features + 1, sparse=w.meta.sparse
        )
        # the server-side key set of the full pulls: ma-sgd's every round; 'sgd' /
        # 'ftrl' pull per minibatch and need it only for an epoch's evaluation
        want_ks = bool(K == 1 and p.prune and d.keys.size) and p.solver == "ma-sgd"
        acc = ctx.array(p.accum) if p.adaptive else None  # AdaGrad's sums, pulled alike
        # AdaGrad's sums are pulled by a second thread while this one pulls the weights
        # and evaluates them: the two pulls' round trips and the validation pass overlap
        pool = ThreadPoolExecutor(1, "daskangel-acc") if acc is not None or want_ks else None
        # the key sets (the sums' pulled by tag too: sending the keys each epoch was 8
        # bytes a key) are registered by that thread while this one makes the first
        # epoch's order; a fresh fit under BSP pulls nothing before its second epoch
        # (Plan.zero_start), so they overlap its first pass
        ks: Future[Any] | None = None
        acc_ks: Future[Any] | None = None
        if pool is not None and want_ks:
            if not dense:  # (pulled whole under BSP; else registered when first needed)
                ks = pool.submit(w.key_set, d.keys)
            if acc is not None:
                acc_ks = pool.submit(acc.key_set, d.keys)
        mon = Monitor(ctx, p, d)
        # ma-sgd pushes its local model's change against the weights it pulled, so
        # that base must be the servers' newest: from the clock cache (up to
        # ``staleness`` clocks old) the changes others pushed since would be added
        # again, and the model oscillates with a growing amplitude
        base = w.plain if p.solver == "ma-sgd" and mon.staleness != 0 else w
        tm["prep"] += time.perf_counter() - t_0
        capped = p.solver == "ma-sgd" and p.kind in (SQUARED, SQ_HINGE)  # (a pass over the rows)
        cap = step_cap(p, d.max_sq_norm()) if capped else float("inf")
        try:
            return self._rounds(ctx, part, d, mon, w, base, ks, acc, acc_ks, pool, cap, dense, tm)
        finally:
            if pool is not None:
                pool.shutdown(wait=True)

    def _rounds(
        self,
        ctx: Any,
        part: Any,
        d: TaskData | InPlaceData,
        mon: Monitor,
        w: Any,
        base: Any,
        ks_f: Future[Any] | None,
        acc: Any,
        acc_ks: Future[Any] | None,
        pool: ThreadPoolExecutor | None,
        cap: float,
        dense: bool,
        tm: dict[str, float],
    ) -> dict[str, Any]:
        """The task's rounds from its clock on (see the module docstring)."""
        p = self.plan
        K = p.n_outputs
        want_ks = bool(K == 1 and p.prune and d.keys.size)
        acc_base = acc.plain if acc is not None and mon.staleness != 0 else acc
        n = p.n_features + 1
        push_w = DensePush(w, d.keys, d.pos, n) if dense else None
        push_g = DensePush(acc, d.keys, d.pos, n) if dense and acc is not None else None

        ks = None  # the weights' key set, once needed

        def pull_w() -> np.ndarray:
            nonlocal ks
            if dense and base is w and p.prune:  # whole (under BSP: the servers' newest)
                return pull_dense(w, d.keys, d.pos)
            if want_ks and ks is None:
                ks = ks_f.result() if ks_f is not None else w.key_set(d.keys)
            return pull(base, d.keys, K, ks, not p.prune, d.pos)

        def pull_acc() -> np.ndarray:
            aks = acc_ks.result() if acc_ks is not None else None
            return pull(acc_base, d.keys, K, aks, not p.prune, d.pos)

        def seed_of(epoch: int) -> list[int]:
            return [int(p.seed) & 0xFFFFFFFF, int(p.epoch0 + epoch), int(part.index)]

        # the next epoch's order, made by the second thread while this one waits at the
        # epoch's last clock (10-20 ms an epoch on 450,000 rows, otherwise between passes)
        nxt: Future[np.ndarray] | None = None

        per = _per_round(p)
        mb = MinibatchRounds(p, d, w, p.prefetch) if isinstance(d, TaskData) else None
        m = p.clocks_per_round
        total = p.epochs * p.rounds * m
        order = np.arange(0)
        loss_sum, loss_n = 0.0, 0
        c = ctx.iteration
        stopped = False
        while c < total:
            rc, phase = divmod(c, m)  # rc: the round; phase 1: resumed past its read barrier
            epoch, rnd = divmod(rc, p.rounds)
            W0 = G0 = None
            g_fut: Future[np.ndarray] | None = None
            if rnd == 0 and phase == 0:
                order = nxt.result() if nxt is not None else d.epoch_order(seed_of(epoch))
                nxt = None
                loss_sum, loss_n = 0.0, 0
                if epoch > 0:
                    t_0 = time.perf_counter()
                    if acc is not None and pool is not None and order[:per].size:  # (see below)
                        g_fut = pool.submit(pull_acc)
                    W0 = pull_w()
                    t_1 = time.perf_counter()
                    fresh = mon.staleness == 0 or base is not w
                    mon.evaluate(epoch - 1, W0 if fresh else mon.latest(d.keys))
                    tm["pull"] += t_1 - t_0
                    tm["eval"] += time.perf_counter() - t_1
                if m == 1 and _stop(mon, rc, tm):
                    stopped = True
                    break
            elif m == 2 and phase == 1 and rnd == 0 and _stop(mon, rc + 1, tm):
                stopped = True  # (resumed past the barrier: decide as the others did)
                break
            rows = order[rnd * per : (rnd + 1) * per]
            eta = min(p.eta(epoch), cap)
            if rows.size and p.solver == "ma-sgd":
                t_0 = time.perf_counter()
                if W0 is None and c == 0 and m == 2 and p.zero_start:
                    # a fresh fit's first round under BSP: the servers hold the zeros
                    # they were made with (no task pushes before every task has passed
                    # the read barrier), so there is nothing to pull
                    W0 = np.zeros((d.keys.shape[0], K))
                    G0 = np.zeros_like(W0) if acc is not None else None
                elif W0 is None:
                    if pool is not None and acc is not None:
                        g_fut = pool.submit(pull_acc)
                    W0 = pull_w()
                if acc is not None and G0 is None:  # (before the barrier too: a faster
                    # task's push of this round's sums would otherwise be read by a slower one)
                    G0 = g_fut.result() if g_fut is not None else pull_acc()
                    g_fut = None
                if m == 2 and phase == 0:
                    ctx.clock()  # the read barrier: every task has its base before any push
                    if rnd == 0 and _stop(mon, rc + 1, tm):
                        stopped = True
                        break
                t_1 = time.perf_counter()
                share = round_share(p, ctx.task_id, rnd)
                dG = None
                if acc is not None and G0 is not None and isinstance(d, InPlaceData):
                    # the pushed changes straight from the workspace (no array arithmetic)
                    loss, dW, dG = d.adagrad_delta(rows, W0, G0, p, eta, share)
                    check_finite_step(loss, dW, epoch, eta)
                else:
                    W = W0.copy()
                    if acc is not None and G0 is not None:
                        G = G0.copy()
                        loss = d.local_adagrad(rows, W, G, p, eta)
                        dG = (G - G0) * share
                    else:
                        loss = d.local_sgd(rows, W, p, eta)
                    check_finite_step(loss, W, epoch, eta)
                    dW = (W - W0) * share
                t_2 = time.perf_counter()
                if push_w is not None:  # whole vectors, sent now: applied before the clock
                    sent = [push_w.send(dW)]
                    if dG is not None and push_g is not None:
                        sent.append(push_g.send(dG))
                    for f in sent:
                        f.result()
                else:
                    push(w, d.keys, dW, K, d.pos)
                    if dG is not None:
                        push(acc, d.keys, dG, K, d.pos)
                tm["pull"] += t_1 - t_0
                tm["sgd"] += t_2 - t_1
                tm["push"] += time.perf_counter() - t_2
                loss_sum += loss
                loss_n += rows.size
            elif rows.size:
                assert mb is not None  # in place: ma-sgd only
                loss_sum += mb.run(rows, epoch, rnd, eta, tm)
                loss_n += rows.size
            elif m == 2 and phase == 0:
                ctx.clock()  # no rows this round: the read barrier all the same
                if rnd == 0 and _stop(mon, rc + 1, tm):
                    stopped = True
                    break
            last = rnd == p.rounds - 1
            if last and pool is not None and epoch + 1 < p.epochs:
                nxt = pool.submit(d.epoch_order, seed_of(epoch + 1))
            c = mon.end_round(epoch, last, loss_sum, loss_n, tm)
        # the monitor counts rounds: with the read barrier a round is two clocks
        return mon.finish(c // m, p.epochs, stopped, lambda: mon.latest(d.keys), tm)
