"""The collapsed Gibbs solver as a training task (data parallel, AD-LDA on the PS).

One task per partition runs :class:`CGSTask` under ``angel.train``.  Clock 0
initialises: random topics for the task's tokens, their counts pushed to
``n_wk`` (``V x K`` int32, row-partitioned on the PS) and ``n_k``.  Every later
clock is one sweep (:mod:`._sweeps`).  Data parallel under BSP a sweep reads
exactly the model of the previous clock boundary (a fit is the same for a
``random_state``): the whole matrix in one pull while it is at most
``daskangel.lda.whole-pull-bytes`` (``n_k`` summed from it), else the task's
words' rows pipelined and ``n_k``; then the job barrier "every task has read",
entered without waiting; the sampling; the merged deltas pushed once, by
``clock()``.  Otherwise (SSP / ASP, model parallel groups):

1. pull ``n_k`` (under the job's BSP / SSP / ASP floor);
2. pull the rows of the words this task's documents use (only those: a pruned
   pull), pipelined with ``get_iter`` in batches of ``daskangel.lda.row-batch``
   rows, and resample every token of a batch's words as soon as the batch is
   in (:func:`._dense.sample_dense`, the exact conditional, for a few topics;
   else :func:`._sampler.sample_words`, the Metropolis-Hastings chain whose cost
   per token does not grow with ``K``: ``LDA(sampler=)``),
   while the next batches are on the wire;
3. push each batch's non-zero count changes as sparse entries into the
   worker's merged update buffer (sent by size in the background, and all of it
   at ``clock()``), then ``n_k``'s change;
4. ``clock()``.

*Model parallel* (``group_size > 1``): the vocabulary is cut into
``group_size`` slices of word ids, and a sweep is ``group_size`` rounds of
Angel's leader scheduling (``ctx.round_robin``): in a round each member of the
group samples only its documents' tokens of one slice, no two members the same
slice, and pushes its changes before acknowledging, so a word row is changed by
one member at a time and the next member reads it fresh.  Groups are data
parallel between them (*hybrid*; ``groups=1`` is pure model parallelism).  The
held-out score of a model-parallel sweep is taken from rows read across its
rounds (slightly newer than the sweep's start).

Document-topic counts and assignments never leave the worker.  The model the
sweep started from is scored on the task's held-out documents from the rows it
pulled anyway (no extra pull; the final model is scored after the last clock),
and the sums go into the metrics array: row ``i`` holds the model after ``i``
sweeps of this fit (``[log-likelihood sum, tokens scored, eval seconds]``).

Example
-------
>>> angel.train(ps, CGSTask(plan), dataset, sync=angel.SSP(1))   # doctest: +SKIP
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from ... import config
from .._core._faults import ExitHook
from .._core._monitor import Monitor
from ._docs import TaskDocs, task_docs
from ._eval import completion_sums, phi_rows
from ._history import SweepPlan, score_entries, sweep_metrics
from ._recover import restore_z, write_z
from ._sweeps import Sweeper
from ._warp import init_counts

__all__ = ["CGSTask", "Plan", "evaluate_docs"]


@dataclass(frozen=True)
class Plan:
    """What every task of one fit needs (plain values)."""

    nwk: str  # PS array (V, K) int32
    nk: str  # PS array (1, K) int64
    metrics: str  # PS array (sweeps + 1, METRIC_COLS + tasks) float64 (``._history``)
    model: str  # uid keying the worker-side token state
    n_words: int  # V
    n_topics: int  # K
    alpha: float
    beta: float
    mh_steps: int
    sampler: str  # "dense" (``._dense``), "mh" (``._sampler``) or "warp" (``._warp``)
    seed: int
    sweeps: int  # sweeps of this fit
    sweep0: int  # sweeps done before (partial_fit): the random streams continue
    val_fraction: float
    evaluate_every: int  # 0: only the final model
    fold_in: int  # fixed-point iterations of the evaluation
    z: str | None = None  # PS array of the assignments (clock snapshots on), ``._recover``
    z_offsets: tuple[int, ...] = ()  # start of partition i's tokens in ``z``
    snap_every: int = 0  # clocks between snapshots (0: none)
    recovery: str = "continue"  # the context's recovery mode
    z_fresh: bool = True  # ``z`` was made for this fit (holds nothing of a previous one)
    resume_clock: int = 0  # a fit resumed from a snapshot: its clock (``z`` holds its topics)


def evaluate_docs(
    docs: TaskDocs, words: np.ndarray, rows: np.ndarray, nk: np.ndarray, p: Plan
) -> tuple[float, int]:
    """Document-completion sums of the held-out documents (``words[e]``: the row of
    ``rows`` holding entry ``e``'s word)."""
    phi = phi_rows(rows, nk, p.beta, p.n_words)
    ll, n = completion_sums(
        docs.val_indptr, words, docs.val_gids, docs.val_counts, phi,
        p.alpha, p.fold_in, p.seed,
    )  # fmt: skip
    return float(ll), int(n)


def _due(p: Plan, i: int) -> bool:
    """Is the model after ``i`` sweeps of this fit scored?"""
    if i == p.sweeps:
        return True
    return p.evaluate_every > 0 and i % p.evaluate_every == 0


class CGSTask:
    """``fn(ctx, partition)`` of the CGS solver (see the module docstring)."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan

    def __call__(self, ctx: Any, part: Any) -> dict[str, Any]:
        p = self.plan
        docs = task_docs(part, p.model, p.val_fraction, p.seed, p.n_words)
        c = docs.corpus
        K, V = p.n_topics, p.n_words
        nwk, nka, met = ctx.array(p.nwk), ctx.array(p.nk), ctx.array(p.metrics)
        tm = dict.fromkeys(
            ("pull_sample", "sample", "nk", "push", "eval", "flush", "clock", "waited"), 0.0
        )
        zarr = ctx.array(p.z) if p.z is not None else None
        zoff = p.z_offsets[part.index] if p.z is not None else 0
        # a second start in this job, or a start past clock 0: restarted after a failure
        restart = c.job == ctx.job or ctx.iteration > 0
        first_start, c.job = c.job is None, ctx.job
        if c.z is not None and p.z_fresh and ctx.iteration == 0 and not restart:
            c.zps = None  # a new z array: write every token
        if restart and ctx.iteration == 0 and p.sweep0 > 0 and p.z_fresh:
            zarr = None  # z holds nothing from before this fit: the tokens cannot come back
        if restart and not (ctx.iteration == 0 and p.sweep0 == 0):
            # the snapshot's assignments (a resumed fit's tasks start at its clock)
            resumed = p.resume_clock > 0 and ctx.iteration == p.resume_clock and first_start
            restore_z(ctx, zarr, c, zoff, K, "rollback" if resumed else p.recovery)
        elif ctx.iteration == 0 and (c.z is None or restart):
            c.z = np.empty(c.n_tokens, np.int32)
            c.zps = c.ndk = c.warp = None
            _init_counts(c, nwk, nka, V, K, p.seed + 1000 * part.index)
        if ctx.iteration == 0:
            if zarr is not None:
                write_z(zarr, c, zoff)
            ctx.clock()
        # held-out words: their slot among the captured rows, -1 for others
        vkeys = np.unique(docs.val_words)
        slot = np.full(c.keys.shape[0], -1, np.int64)
        slot[vkeys] = np.arange(vkeys.shape[0])
        vwords = slot[docs.val_words]
        has_val = docs.val_indptr.shape[0] > 1
        G = ctx.group_size  # > 1: model parallel inside the group (vocabulary slices rotate)
        bounds = np.searchsorted(c.keys, (np.arange(G + 1) * V) // G)
        hook = ExitHook.from_config("lda", "exit-at-sweep")
        sw = Sweeper(p, c, tm, hook, vkeys, slot)
        # BSP, data parallel: a sweep reads exactly the previous boundary's model (``._sweeps``)
        bsp = G == 1 and ctx.staleness(p.nwk) == 0
        whole = bsp and config.get_bytes("daskangel.lda.whole-pull-bytes") >= V * K * 4
        if bsp:
            tm.update(rows=0.0, barrier=0.0)
        # finished sweeps' figures (every task's sums) to the dashboard, as every family's
        n_tasks = ctx.n_tasks
        mon = Monitor(ctx, SweepPlan(p.metrics, p.sweep0 - 1), lambda _: None,
                      finish_row=lambda r: sweep_metrics(r, n_tasks), x="sweep")  # fmt: skip
        while ctx.iteration <= p.sweeps:
            s = ctx.iteration  # this clock's sweep (1-based)
            t0 = time.perf_counter()
            due = has_val and _due(p, s - 1)
            nk_eval: np.ndarray | None
            if bsp:
                capture, nk_eval, push = sw.bsp(ctx, s, nwk, nka, whole, due)
            else:
                capture, nk_eval, push = sw.rounds(ctx, s, nwk, nka, bounds, due)
            t1 = time.perf_counter()
            tm["pull_sample"] += t1 - t0 - push
            tm["push"] += push
            met.increment(np.array([float(c.n_tokens), t1 - t0]), rows=s, cols=np.arange(3, 5))
            ev = 0.0
            if capture is not None:
                assert nk_eval is not None
                ll, n = evaluate_docs(docs, vwords, capture, nk_eval, p)
                ev = time.perf_counter() - t1
                vals, cols = score_entries(ll, n, ev, part.index)
                met.increment(vals, rows=s - 1, cols=cols)
            tm["eval"] += ev
            if zarr is not None and p.snap_every and ((s + 1) % p.snap_every == 0 or s == p.sweeps):
                write_z(zarr, c, zoff)  # in the snapshot at clock s + 1 (and kept for the next fit)
            ctx.report(eval_s=ev, tokens=int(c.n_tokens))
            t2 = time.perf_counter()
            ctx.flush()  # (the clock's flush, timed apart)
            t3 = time.perf_counter()
            ctx.clock()
            tm["flush"] += t3 - t2
            tm["clock"] += time.perf_counter() - t3
            tm["waited"] += float(ctx.history[-1]["waited"])  # for slower tasks, of "clock"
            if _due(p, s - 1) or s % 10 == 0 or s == p.sweeps:  # the dashboard's rows (a pull)
                mon.stop(ctx.iteration)
        if has_val and ctx.iteration == p.sweeps + 1:
            t0 = time.perf_counter()
            ctx.flush()
            rows = np.asarray(nwk.get(rows=c.keys[vkeys]))
            ll, n = evaluate_docs(docs, vwords, rows, _nk_now(nka), p)
            vals, cols = score_entries(ll, n, time.perf_counter() - t0, part.index)
            met.increment(vals, rows=p.sweeps, cols=cols)
        return {
            "tokens": c.n_tokens, "docs": docs.n_train_docs, "sampled": sw.sampled, "timings": tm,
            "state_bytes": docs.nbytes,
        }  # fmt: skip


def _init_counts(c: Any, nwk: Any, nka: Any, V: int, K: int, seed: int) -> None:
    """Uniform random topics for every token, their counts pushed a slice of words at a
    time (sparse entries: no ``(words, K)`` matrix at once)."""
    nk = np.zeros(K, np.int64)
    nw = c.keys.shape[0]
    step = max(1, (1 << 22) // max(K, 1))
    for w0 in range(0, nw, step):
        keys, vals = init_counts(c.z, c.wptr, K, seed, w0, min(nw, w0 + step), c.keys)
        if keys.size:
            r, col = np.divmod(keys, K)
            nwk.increment(sp.coo_matrix((vals, (r, col)), shape=(V, K)))
            nk += np.bincount(col, weights=vals, minlength=K).astype(np.int64)
    nka.increment(nk, rows=0)


def _nk_now(nka: Any) -> np.ndarray:
    return np.asarray(nka.get(rows=0), np.int64)
