"""Data-parallel SGD: one task per user range, item rows pulled as a clock needs them.

Angel's MF (and Bösen's): the ratings are partitioned by user, each task keeps
its users' factors and biases in memory for the whole fit, and the item
factors and biases live on the PS, row-partitioned.  An epoch is
``plan.rounds`` clocks; in each clock a task takes the next minibatch of its
ratings (an epoch visits them in a fresh seeded order), and

1. pulls only the item rows the minibatch uses, group by group through the
   worker's pipelined ``get_iter``, training on a group's ratings as soon as
   its rows are in (Angel's pipelined pulling);
2. ``optimizer='sgd'``: updates user and item rows rating by rating (the
   classic update, as ``surprise`` does) on its copy, and pushes the item rows'
   deltas through the worker's merged update buffer;
   ``'adagrad'`` / ``'adarevision'``: keeps the item copy read-only (Bösen),
   sums the item gradients of the minibatch and pushes them to the server-side
   optimiser psf (``ops.AdaGrad`` / ``ops.AdaRevision`` with the versions it
   pulled), while its users take local AdaGrad steps;
3. ``ctx.clock()``: under BSP / SSP / ASP like every model.

At the end of each epoch a task writes its users' rows back to the PS (so a
snapshot holds them, a resubmitted task resumes from them, and the fitted model
can predict); at the start of the next one it evaluates the model on its
validation and evaluation ratings (see :mod:`._plan`).  After every clock the
epochs all tasks have finished go to ``ctx.report`` (the progress bar and the
dashboard show ``epoch``, ``train_rmse``, ``val_rmse`` ...; :func:`~._plan.monitor`).

Example
-------
>>> angel.train(ps, SGDTask(plan), parts, sync=angel.SSP(staleness=1))  # doctest: +SKIP
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from .._core import SHUFFLE_BLOCK, epoch_order
from ._kernels import (
    fill_blocks,
    grad_block,
    group_by_slot,
    sgd_block,
    sgd_blocks,
    sse,
    touched_slots,
)
from ._parts import RatingsPart
from ._plan import METRICS_WIDTH, Plan, monitor
from ._prep import TaskData, band_blocks, prepare

__all__ = ["SGDTask", "evaluate", "pull_users"]


def pull_users(arr: Any, part: RatingsPart, width: int) -> np.ndarray:
    """The task's user rows as a writable float32 copy."""
    if part.n_users == 0:
        return np.zeros((0, width), np.float32)
    rows = slice(part.user0, part.user0 + part.n_users)
    return np.array(arr.get(rows=rows), dtype=np.float32, order="C")


def write_users(arr: Any, part: RatingsPart, P: np.ndarray) -> None:
    if part.n_users:
        arr.set(P, rows=slice(part.user0, part.user0 + part.n_users), casting="same_kind")


def evaluate(
    ctx: Any, plan: Plan, d: TaskData, P: np.ndarray, items: Any, epoch: int, fresh: bool
) -> None:
    """Add this task's validation / evaluation sums for the model after ``epoch``."""
    row = np.zeros(METRICS_WIDTH)
    if d.vr.shape[0] == 0 and d.er.shape[0] == 0:
        return
    used = np.unique(np.concatenate([d.vslot, d.eslot[d.eslot >= 0]]).astype(np.int64))
    Q = np.zeros((d.keys.shape[0], plan.n_factors + 1), np.float32)
    if used.shape[0]:
        rows = d.keys[used]
        Q[used] = items.get(rows=rows) if not fresh else _latest(plan, rows)
    row[2] = d.vr.shape[0]
    row[3] = sse(d.vu, d.vslot, d.vr, P, Q, plan.mu, plan.lo, plan.hi)
    row[4] = d.er.shape[0]
    row[5] = sse(d.eu, d.eslot, d.er, P, Q, plan.mu, plan.lo, plan.hi)
    ctx.array(plan.metrics).increment(row[None, :], rows=[epoch])


def _latest(plan: Plan, rows: np.ndarray) -> np.ndarray:
    from ...psarray import PSArray

    return np.asarray(PSArray(plan.items).get(rows=rows))


class SGDTask:
    """``fn(ctx, part)`` of data-parallel SGD (see the module docstring)."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan

    def __call__(self, ctx: Any, part: RatingsPart) -> dict[str, Any]:
        return _Run(self.plan, ctx, part).run()


class _Run:
    """One task's fit: its data, its users' rows and its scratch copies of item rows."""

    @property
    def rounds(self) -> int:
        """Clocks per epoch."""
        return self.plan.rounds

    def __init__(self, plan: Plan, ctx: Any, part: RatingsPart) -> None:
        p = self.plan = plan
        self.ctx, self.part = ctx, part
        # seconds by kind; "cpu": the task thread's CPU seconds in pulls and training (against
        # "pull" + "sgd": how much of them the thread was not on a core, e.g. a loaded machine)
        self.tm = {"prep": 0.0, "pull": 0.0, "sgd": 0.0, "push": 0.0, "eval": 0.0, "clock": 0.0}
        self.tm["cpu"] = 0.0
        t0 = time.perf_counter()
        d = self.d = prepare(
            part,
            seed=p.seed,
            val_fraction=p.val_fraction,
            pull_rows=p.pull_rows,
            runs=p.user_runs,
            bounds=p.band_bounds,
        )
        self.users, self.items = ctx.array(p.users), ctx.array(p.items)
        width = p.n_factors + 1
        self.ada = p.optimizer != "sgd"
        self.P = pull_users(self.users, part, width)
        self.H = (
            pull_users(ctx.array(p.user_state), part, width)
            if self.ada
            else np.zeros((0, width), np.float32)
        )
        nk = d.keys.shape[0]
        self.Q = np.zeros((nk, width), np.float32)  # pulled item rows (sgd: updated)
        # sgd: the rows as pulled (deltas); adagrad / adarevision: the gradient sums
        self.Q0 = np.zeros((nk, width), np.float32)
        self.mark = np.full(nk, -1, np.int64)
        self.all_slots = np.arange(nk, dtype=np.int64)
        # the epochs' orders, each written over the last (no fresh array of n rows an epoch)
        self.order = np.empty(d.n_train, np.int32 if d.n_train < 2**31 else np.int64)
        self.stamp = 0
        # item bands, one a clock (see _prep): where each clock's band starts in the
        # epoch's order, and the band of the current clock (None: no bands)
        self.banded = d.n_bands > 1 and d.n_bands == self.rounds
        self.visit = np.zeros(0, np.int64)
        self.blocks: list[np.ndarray] = []
        self.band: int | None = None
        # the clock's band as its blocks' starts when the kernel walks them itself (the
        # order is then never written out), and the band's end
        self.lazy: np.ndarray | None = None
        self.lim = 0
        self.mon = monitor(ctx, p, self.rounds)
        self.tm["prep"] = time.perf_counter() - t0

    def epoch_order(self, epoch: int) -> np.ndarray:
        """The order of epoch ``epoch`` (of this fit) in ``self.order``.

        With item bands a clock trains one band: band ``(perm[c] + task) mod n``
        in clock ``c`` (``perm`` the epoch's seeded permutation, the same for every
        task), so that tasks train different bands at once as in DSGD; each
        band's ratings in a seeded block order (:func:`~._prep.band_blocks`).
        """
        p = self.plan
        seed = [int(p.seed) & 0xFFFFFFFF, p.epoch0 + epoch, self.part.task]
        if not self.banded:
            return epoch_order(self.d.n_train, seed, out=self.order)
        nb = self.d.n_bands
        perm = np.random.default_rng([int(p.seed) & 0xFFFFFFFF, 7933, p.epoch0 + epoch])
        self.visit = (perm.permutation(nb) + self.part.task) % nb
        self.blocks = band_blocks(self.d.band_starts, self.visit, seed)
        return self.order

    def rows_of(self, order: np.ndarray, rnd: int) -> np.ndarray:
        """The training ratings of clock ``rnd`` of an epoch visiting ``order``."""
        if self.banded:
            p, d = self.plan, self.d
            b = self.band = int(self.visit[rnd])
            s0, s1 = int(d.band_starts[b]), int(d.band_starts[b + 1])
            rows = order[s0:s1]  # (band b's own stretch of the buffer)
            self.lazy, self.lim = self.blocks[rnd], s1
            if p.optimizer != "sgd" or s1 - s0 < p.group_ratings * int(
                d.band_slots[b + 1] - d.band_slots[b]
            ):  # the clock goes group by group, or takes optimiser steps: write the order
                fill_blocks(self.lazy, s1, SHUFFLE_BLOCK, rows)
                self.lazy = None
            return rows
        per = -(-self.d.n_train // self.rounds)
        return order[rnd * per : (rnd + 1) * per]

    def train_rows(self, rows: np.ndarray) -> float:
        """Train on one clock's ratings; their summed squared errors."""
        return self.minibatch(rows)

    def run(self) -> dict[str, Any]:
        p, d, ctx, tm = self.plan, self.d, self.ctx, self.tm
        R = self.rounds
        total = p.epochs * R
        order = np.zeros(0, np.int64)
        c = ctx.iteration
        while c < total:
            epoch, rnd = divmod(c, R)
            if rnd == 0 or order.shape[0] != d.n_train:  # (a resumed task starts mid-epoch)
                order = self.epoch_order(epoch)
                if epoch > 0 and rnd == 0:
                    t1 = time.perf_counter()
                    fresh = ctx.staleness(p.items) != 0
                    evaluate(ctx, p, d, self.P, self.items, epoch - 1, fresh=fresh)
                    tm["eval"] += time.perf_counter() - t1
            rows = self.rows_of(order, rnd)
            loss = self.train_rows(rows) if rows.shape[0] else 0.0
            self.end_clock(epoch, loss, rows.shape[0], rnd == R - 1)
            c = self.clock()
        if total and c >= total:
            t1 = time.perf_counter()
            evaluate(ctx, p, d, self.P, self.items, p.epochs - 1, fresh=True)
            tm["eval"] += time.perf_counter() - t1
        return {"epochs": c // R if R else 0, "timings": tm, "ratings": d.n_train}

    def clock(self) -> int:
        """The clock, then the epochs every task has finished to the dashboard.

        Before a clock that a snapshot follows, the users' rows go to the PS (the
        end of an epoch writes them anyway): a job rolled back to the snapshot
        resumes with users and items of the same moment.
        """
        p = self.plan
        nxt = int(self.ctx.iteration) + 1
        if p.snap_every and nxt % p.snap_every == 0 and nxt % self.rounds:
            t1 = time.perf_counter()
            self.write_back()
            self.tm["push"] += time.perf_counter() - t1
        t1 = time.perf_counter()
        self.ctx.clock()
        self.tm["clock"] += time.perf_counter() - t1
        c = int(self.ctx.iteration)
        t1 = time.perf_counter()
        self.mon.stop(c)
        self.tm["eval"] += time.perf_counter() - t1
        return c

    def end_clock(self, epoch: int, sse_sum: float, n_seen: int, last: bool) -> None:
        """The clock's training sums into its epoch's metrics row (a snapshot then
        holds them: a fit resumed mid-epoch reports the whole epoch); at the end
        of an epoch, the users' rows back to the PS."""
        t1 = time.perf_counter()
        if last:
            self.write_back()
        if n_seen:
            row = np.zeros(METRICS_WIDTH)
            row[0], row[1] = n_seen, sse_sum
            self.ctx.array(self.plan.metrics).increment(row[None, :], rows=[epoch])
        self.tm["push"] += time.perf_counter() - t1

    def write_back(self) -> None:
        """The task's users' rows (and AdaGrad accumulators) to the PS."""
        write_users(self.users, self.part, self.P)
        if self.ada:
            write_users(self.ctx.array(self.plan.user_state), self.part, self.H)

    def minibatch(self, rows: np.ndarray) -> float:
        """One clock's ratings: one push (sgd) or one optimiser step per ``plan.batch``."""
        b = self.plan.batch
        if not self.ada or not b or rows.shape[0] <= b:
            return self.step(rows)
        return sum(self.step(rows[s : s + b]) for s in range(0, rows.shape[0], b))

    def train_group(self, seq: np.ndarray) -> float:
        p, d = self.plan, self.d
        if self.ada:
            return float(
                grad_block(
                    seq,
                    d.u,
                    d.slot,
                    d.r,
                    self.P,
                    self.H,
                    self.Q,
                    self.Q0,
                    p.mu,
                    p.lr,
                    p.reg,
                    p.lr_bias,
                    p.reg_bias,
                    p.eps,
                )
            )
        if self.lazy is not None:  # the whole band, straight from its blocks
            blocks, self.lazy = self.lazy, None
            loss = sgd_blocks(
                blocks, self.lim, SHUFFLE_BLOCK, d.u, d.slot, d.r, self.P, self.Q,
                p.mu, p.lr, p.reg, p.lr_bias, p.reg_bias,
            )  # fmt: skip
            return float(loss)
        return float(
            sgd_block(
                seq, d.u, d.slot, d.r, self.P, self.Q, p.mu, p.lr, p.reg, p.lr_bias, p.reg_bias
            )
        )

    def step(self, rows: np.ndarray) -> float:
        """Pull what ``rows`` need (pipelined), train on them, push."""
        p, d, tm = self.plan, self.d, self.tm
        t0, c0 = time.perf_counter(), time.thread_time()
        nk = d.keys.shape[0]
        if p.optimizer == "sgd" and self.band is not None:
            # one item band: its slots are one range (untouched rows push a delta of 0)
            tk = self.all_slots[d.band_slots[self.band] : d.band_slots[self.band + 1]]
        elif p.optimizer == "sgd" and not p.n_blocks and rows.shape[0] >= p.group_ratings * nk:
            # so many ratings per row that the clock touches (nearly) all the task's rows:
            # pull and push them all (an untouched row's delta is 0) rather than pass over
            # the clock's ratings to find them (0.1 s a clock at 12 M ratings)
            tk = self.all_slots
        else:
            self.stamp += 1
            tk = touched_slots(rows, d.slot, self.mark, self.stamp)
        if self.ada:
            self.Q0[tk] = 0.0
        loss = 0.0
        pulled = 0.0
        versions = None
        if p.optimizer == "adarevision":
            vals, versions = p.opt.pull(rows=d.keys[tk])
            self.Q[tk] = vals
            pulled = time.perf_counter() - t0
            loss += self.train_group(rows)
        elif rows.shape[0] >= p.group_ratings * tk.shape[0]:
            # many ratings per row: pull them all, then train in the epoch's order
            # (visiting the ratings group by group costs more than the overlap saves)
            t1 = time.perf_counter()
            for rid, vals in self.items.get_iter(d.keys[tk], batch=p.pull_rows, own_writes=True):
                self.pulled_rows(rid, vals)
            pulled = time.perf_counter() - t1
            loss += self.train_group(rows)
        else:
            if self.lazy is not None:  # (not expected: rows_of writes it for this case)
                fill_blocks(self.lazy, self.lim, SHUFFLE_BLOCK, rows)
                self.lazy = None
            seq, starts = group_by_slot(rows, d.slot, d.group, d.n_groups)
            gk = d.group[tk]
            by_group = tk[np.argsort(gk, kind="stable")]
            need = np.bincount(gk, minlength=d.n_groups)
            arrived = np.zeros(d.n_groups, np.int64)
            t1 = time.perf_counter()
            for rid, vals in self.items.get_iter(
                d.keys[by_group], batch=p.pull_rows, own_writes=True
            ):
                pulled += time.perf_counter() - t1
                gs = d.group[self.pulled_rows(rid, vals)]
                arrived += np.bincount(gs, minlength=d.n_groups)
                for g in np.unique(gs):  # the groups this batch completes
                    if arrived[g] == need[g]:
                        loss += self.train_group(seq[starts[g] : starts[g + 1]])
                t1 = time.perf_counter()
        t3 = time.perf_counter()
        tm["pull"] += pulled
        tm["sgd"] += t3 - t0 - pulled
        tm["cpu"] += time.thread_time() - c0
        keys = d.keys[tk]
        if self.ada:
            p.opt.step(self.Q0[tk], rows=keys, versions=versions, casting="same_kind", atomic=False)
        else:
            delta = self.Q[tk] - self.Q0[tk]
            self.items.increment(delta, rows=keys, casting="same_kind")
        tm["push"] += time.perf_counter() - t3
        return loss

    def pulled_rows(self, rid: np.ndarray, vals: np.ndarray) -> np.ndarray:
        """Pulled item rows into the task's copy (sgd: and the rows as pulled); their slots."""
        s = self.d.slots_of(rid)
        self.Q[s] = vals
        if not self.ada:
            self.Q0[s] = vals
        return s
