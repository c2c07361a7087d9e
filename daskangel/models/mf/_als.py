"""ALS on the parameter server: ALS-WR for explicit ratings, Hu-Koren-Volinsky for implicit.

Both factor matrices live on the PS.  Every task holds two parts of the
training ratings: its users' (the :class:`~._parts.RatingsPart` of SGD) and a
range of items' (the same ratings cut by item, :mod:`._transpose`).  An
iteration is two clocks, under BSP:

1. *users*: the task pulls the item rows its users rated (pruned, streamed
   with ``get_iter``), solves each of its user rows (:mod:`._als_kernels`) and
   writes them to the PS;
2. *items*: it pulls the user rows its items were rated by, solves its item
   rows and writes them; it adds the epoch's training error (explicit) or
   weighted loss (implicit) to the fit's metrics row.  After each clock the
   iterations every task has finished are reported (:func:`~._plan.monitor`).

Implicit feedback needs the Gram matrix of the fixed side: every task writes
the Gram of the rows it solved into its own block of a ``(2 * epochs + 1,
n_tasks, K, K)`` array (set, not added, so a resubmitted task cannot count
twice) and the other phase sums the blocks; the items' Gram before the first
iteration is computed by the driver.  Validation and ``eval_set`` ratings are
scored as SGD does, at the start of the next iteration and after the last.

Example
-------
>>> res = run_als(ps, plan, ingested, BSP(), progress=False)      # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._core import PREPARED
from ._als_kernels import als_rows, cg_rows, gram, implicit_loss
from ._kernels import sse
from ._parts import RatingsPart
from ._plan import METRICS_WIDTH, Plan, monitor
from ._prep import prepare
from ._sgd import evaluate, pull_users, write_users
from ._transpose import item_parts

__all__ = ["ALSTask", "CSRSide", "run_als"]


@dataclass(frozen=True, slots=True, eq=False)
class CSRSide:
    """One side's ratings of a task as CSR over its rows, with the other side's keys."""

    row0: int  # first row (of the solved matrix) the task owns
    n_rows: int
    indptr: np.ndarray  # int64 (n_rows + 1)
    slot: np.ndarray  # int64: the other side's row, as a position in ``keys``
    r: np.ndarray  # float32
    keys: np.ndarray  # int64 sorted rows of the other side to pull

    @property
    def nbytes(self) -> int:
        return int(self.indptr.nbytes + self.slot.nbytes + self.r.nbytes + self.keys.nbytes)


def _csr(row0: int, n_rows: int, local: np.ndarray, other: np.ndarray, r: np.ndarray) -> CSRSide:
    order = np.argsort(local, kind="stable")
    counts = np.bincount(local, minlength=n_rows)
    indptr = np.zeros(n_rows + 1, np.int64)
    np.cumsum(counts, out=indptr[1:])
    keys, slot = np.unique(other[order].astype(np.int64), return_inverse=True)
    return CSRSide(row0, n_rows, indptr, slot.astype(np.int64), r[order], keys)


def user_side(part: RatingsPart, seed: int, val_fraction: float, pull_rows: int) -> CSRSide:
    """The task's training ratings by user (validation split off as SGD does)."""

    def make() -> CSRSide:
        d = prepare(part, seed=seed, val_fraction=val_fraction, pull_rows=pull_rows)
        return _csr(part.user0, part.n_users, d.u.astype(np.int64), d.keys[d.slot], d.r)

    key = ("mf-als-users", id(part), int(seed), float(val_fraction), int(pull_rows))
    return PREPARED.get_or_make(part, key, make)


def item_side(part: RatingsPart) -> CSRSide:
    """An item part (``u``: item row less ``user0``, ``i``: user row) as CSR by item."""

    def make() -> CSRSide:
        return _csr(part.user0, part.n_users, part.u.astype(np.int64), part.i, part.r)

    return PREPARED.get_or_make(part, ("mf-als-items", id(part)), make)


def _gram_rows(plan: Plan, slot: int) -> slice:
    K, T = plan.n_factors, plan.n_tasks
    return slice(slot * T * K, (slot + 1) * T * K)


def read_gram(ctx_arr: Any, plan: Plan, slot: int) -> np.ndarray:
    """The Gram of phase ``slot`` summed over the tasks' blocks (float64, K x K)."""
    K = plan.n_factors
    blocks = np.asarray(ctx_arr.get(rows=_gram_rows(plan, slot)), np.float64)
    return blocks.reshape(plan.n_tasks, K, K).sum(axis=0)


def write_gram(ctx_arr: Any, plan: Plan, slot: int, task: int, G: np.ndarray) -> None:
    K = plan.n_factors
    r0 = slot * plan.n_tasks * K + task * K
    ctx_arr.set(G, rows=slice(r0, r0 + K), casting="same_kind")


class ALSTask:
    """``fn(ctx, (user_part, item_part))`` of ALS (see the module docstring)."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan

    def __call__(self, ctx: Any, pair: tuple[RatingsPart, RatingsPart]) -> dict[str, Any]:
        return _Run(self.plan, ctx, pair[0], pair[1]).run()


class _Run:
    def __init__(self, plan: Plan, ctx: Any, up: RatingsPart, ip: RatingsPart) -> None:
        p = self.plan = plan
        self.ctx, self.part = ctx, up
        t0 = time.perf_counter()
        self.us = user_side(up, p.seed, p.val_fraction, p.pull_rows)
        self.its = item_side(ip)
        self.d = prepare(up, seed=p.seed, val_fraction=p.val_fraction, pull_rows=p.pull_rows)
        self.users, self.items = ctx.array(p.users), ctx.array(p.items)
        self.grams = ctx.array(p.gram) if p.gram else None
        self.P = pull_users(self.users, up, p.n_factors + 1)
        self.mon = monitor(ctx, p, 2)  # finished iterations to the dashboard
        self.tm = {"prep": time.perf_counter() - t0, "pull": 0.0, "solve": 0.0, "push": 0.0,
                   "eval": 0.0, "clock": 0.0}  # fmt: skip

    def _pull(self, arr: Any, side: CSRSide) -> np.ndarray:
        t0 = time.perf_counter()
        Y = np.zeros((side.keys.shape[0], self.plan.n_factors + 1), np.float32)
        for rid, vals in arr.get_iter(side.keys, batch=self.plan.pull_rows):
            Y[np.searchsorted(side.keys, rid)] = vals
        self.tm["pull"] += time.perf_counter() - t0
        return Y

    def _solve(self, side: CSRSide, Y: np.ndarray, X: np.ndarray, G: np.ndarray | None) -> None:
        p = self.plan
        t0 = time.perf_counter()
        if p.implicit:
            assert G is not None
            A = G + p.reg * np.eye(p.n_factors)
            cg_rows(side.indptr, side.slot, side.r, Y, X, A, p.alpha, p.cg_steps)
        else:
            als_rows(side.indptr, side.slot, side.r, Y, X, p.mu, p.reg, p.biases)
        self.tm["solve"] += time.perf_counter() - t0

    def users_phase(self, epoch: int) -> None:
        p, us = self.plan, self.us
        G = read_gram(self.grams, p, 2 * epoch) if p.implicit else None
        Q = self._pull(self.items, us)
        self._solve(us, Q, self.P, G)
        t0 = time.perf_counter()
        write_users(self.users, self.part, self.P)
        if p.implicit:
            write_gram(self.grams, p, 2 * epoch + 1, self.part.task, gram(self.P, p.n_factors))
        self.tm["push"] += time.perf_counter() - t0

    def items_phase(self, epoch: int) -> None:
        p, its = self.plan, self.its
        G = read_gram(self.grams, p, 2 * epoch + 1) if p.implicit else None
        X = self._pull(self.users, its)
        rows = slice(its.row0, its.row0 + its.n_rows)
        Y = (
            np.array(self.items.get(rows=rows), np.float32)
            if its.n_rows
            else np.zeros((0, p.n_factors + 1), np.float32)
        )
        self._solve(its, X, Y, G)
        t0 = time.perf_counter()
        if its.n_rows:
            self.items.set(Y, rows=rows, casting="same_kind")
        row = np.zeros(METRICS_WIDTH)
        row[0] = its.r.shape[0]
        if p.implicit:
            assert G is not None
            write_gram(self.grams, p, 2 * epoch + 2, self.part.task, gram(Y, p.n_factors))
            loss, sq = implicit_loss(its.indptr, its.slot, its.r, X, Y, G, p.alpha, p.reg)
            if self.part.task == 0:  # the users' regularisation, once
                loss += p.reg * float(np.trace(G))
            row[1], row[6] = sq, loss
        else:
            local = np.repeat(np.arange(its.n_rows, dtype=np.int64), np.diff(its.indptr))
            row[1] = sse(local, its.slot, its.r, Y, X, p.mu, p.lo, p.hi)
        self.ctx.array(p.metrics).increment(row[None, :], rows=[epoch])
        self.tm["push"] += time.perf_counter() - t0

    def _evaluate(self, epoch: int) -> None:
        t0 = time.perf_counter()
        evaluate(self.ctx, self.plan, self.d, self.P, self.items, epoch, fresh=False)
        self.tm["eval"] += time.perf_counter() - t0

    def run(self) -> dict[str, Any]:
        p, ctx = self.plan, self.ctx
        total = 2 * p.epochs
        c = ctx.iteration
        while c < total:
            epoch, phase = divmod(c, 2)
            if phase == 0:
                if epoch > 0:
                    self._evaluate(epoch - 1)
                self.users_phase(epoch)
            else:
                self.items_phase(epoch)
            t0 = time.perf_counter()
            ctx.clock()
            self.tm["clock"] += time.perf_counter() - t0
            c = ctx.iteration
            t0 = time.perf_counter()
            self.mon.stop(c)
            self.tm["eval"] += time.perf_counter() - t0
        if total and c >= total:
            self._evaluate(p.epochs - 1)
        return {"epochs": c // 2, "timings": self.tm, "ratings": int(self.us.r.shape[0])}


def _initial_gram(ps: Any, plan: Plan) -> None:
    from ._arrays import read_rows

    Q = read_rows(ps.get_array(plan.items))
    ps.get_array(plan.gram).set(
        gram(Q, plan.n_factors), rows=slice(0, plan.n_factors), casting="same_kind"
    )


def run_als(ps: Any, plan: Plan, ing: Any, sync: Any, progress: bool | str) -> Any:
    """Train ``plan.epochs`` ALS iterations on the ingested parts; the job's result."""
    from ...train import train

    T = len(ing.parts)
    plan = dataclasses.replace(plan, n_tasks=T)
    pairs = item_parts(ps.client, ing, plan)
    gname = None
    if plan.implicit:
        gname = f"{plan.metrics}.gram"
        K = plan.n_factors
        ps.zeros(gname, ((2 * plan.epochs + 1) * T * K, K), "float64")
        plan = dataclasses.replace(plan, gram=gname)
        _initial_gram(ps, plan)
    try:
        return train(
            ps, ALSTask(plan), pairs, sync=sync, epochs=2 * plan.epochs, progress=progress,
            unit="iteration", clocks_per_unit=2,
        )  # fmt: skip
    finally:
        if gname is not None:
            ps.drop(gname)
