"""MA-LDA: stochastic variational inference with model averaging through the PS.

The PS holds ``lambda`` lazily (see :mod:`._vb`): a ``(V, K)`` float64 array ``mu``
and its column sums ``musum`` (``1 x K``), with ``lambda = eta + S * mu`` for a
scale ``S`` every task computes from the shared step-size schedule
``rho_t = (learning_offset + t) ** -learning_decay``.  At rest (between fits)
``S = 1``, so the array holds ``lambda - eta``.

A pass over the data is ``steps_per_pass`` minibatch steps per task (each task
cuts its shuffled training documents into that many minibatches, so every task
takes the same number of steps), grouped into rounds of ``average_every`` steps;
a round is one clock:

1. pull the rows of the words the round's minibatches use (a pruned pull) and
   ``musum``: the task's replica of the model;
2. run the round's SVI steps on the replica, each as if its minibatch of ``B``
   documents stood for all ``D`` training documents (``D / B`` scaling) and
   touching only its words' rows (lazy sparse update, decay through ``S``);
3. push ``(replica - pulled) / n_tasks`` for the touched rows and ``musum``:
   the PS then holds the *average* of the tasks' replicas (the MLlib* paper's
   model averaging, Algorithm 6), since the untouched rows of every replica only
   decayed by the common ``S``;
4. ``clock()`` (BSP / SSP / ASP).

The model at the start of each pass is scored on the task's held-out documents
(document completion, :mod:`._eval`) in the pass's first round, from rows it
pulls anyway plus the held-out words; the final model after the last clock.

Example
-------
>>> log_scales(SVIPlan.example(), 0, 3).round(4).tolist()
[0.0, -0.1054, -0.2007, -0.2877]
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._core._monitor import Monitor
from ._docs import STATES, _lock, _mask, _take, fingerprint
from ._eval import completion_sums
from ._history import SweepPlan, score_entries, sweep_metrics
from ._vb import batch_words, estep, expected_log_rows, sgd_update

__all__ = ["SVIDocs", "SVIPlan", "SVITask", "log_scales", "prepare_svi"]


@dataclass(frozen=True)
class SVIPlan:
    """What every task of one MA-SVI fit needs (plain values)."""

    lam: str  # PS array (V, K) float64: mu
    lamsum: str  # PS array (1, K) float64: musum
    metrics: str  # PS array (passes + 1, METRIC_COLS + tasks) float64 (``._history``)
    model: str  # uid keying the worker-side state
    n_words: int
    n_topics: int
    alpha: float
    eta: float
    seed: int
    passes: int  # passes of this fit
    pass0: int  # passes done before (the shuffles continue)
    step0: int  # SVI steps done before (the step sizes continue)
    n_docs: int  # D: training documents over all tasks
    steps_per_pass: int
    average_every: int
    offset: float  # learning_offset
    decay: float  # learning_decay
    tol: float  # mean_change_tol
    max_doc_iter: int
    val_fraction: float
    evaluate_every: int
    fold_in: int

    @property
    def rounds(self) -> int:
        """Clocks per pass."""
        return -(-self.steps_per_pass // self.average_every)

    @classmethod
    def example(cls) -> SVIPlan:
        return cls("lam", "lamsum", "met", "m", 10, 2, 0.1, 0.01, 0, 1, 0, 0, 10, 3, 3,
                   9.0, 1.0, 1e-3, 100, 0.0, 1, 50)  # fmt: skip


def log_scales(p: SVIPlan, first: int, n: int) -> np.ndarray:
    """``log S`` after each of the fit's steps ``first .. first + n`` (relative to its start)."""
    t = p.step0 + np.arange(1, first + n + 1, dtype=np.float64)
    rho = (p.offset + t) ** -p.decay
    out = np.concatenate([[0.0], np.cumsum(np.log1p(-rho))])
    return out[first : first + n + 1]  # type: ignore[no-any-return]


@dataclass
class SVIDocs:
    """A partition's training documents (CSR over local word rows) and held-out ones."""

    keys: np.ndarray  # sorted global ids of the words of training + held-out documents
    indptr: np.ndarray
    words: np.ndarray  # local rows (positions in keys)
    counts: np.ndarray  # float64
    val_indptr: np.ndarray
    val_words: np.ndarray
    val_gids: np.ndarray
    val_counts: np.ndarray  # int64
    n_tokens: int

    @property
    def n_docs(self) -> int:
        return int(self.indptr.shape[0] - 1)


def svi_docs(part: Any, model: str, fraction: float, seed: int) -> SVIDocs:
    """The partition's :class:`SVIDocs` for ``model``: kept on the worker, or built now."""
    key = (model + "/svi", fingerprint(part))
    with _lock:
        got = STATES.get(key)
    if got is not None:
        return got  # type: ignore[no-any-return]
    rows = part.csr()
    indptr = np.asarray(rows.indptr - rows.indptr[0], np.int64)
    indices = np.asarray(rows.indices, np.int64)
    data = np.asarray(rows.data)
    held = _mask(indptr, indices, data, fraction, seed)
    lens = np.diff(indptr)
    sel_t = np.flatnonzero(~held & (lens > 0))
    sel_v = np.flatnonzero(held)
    tr_ptr, tr_idx, tr_val = _take(indptr, indices, data, sel_t, lens)
    va_ptr, va_idx, va_val = _take(indptr, indices, data, sel_v, lens)
    keys = np.union1d(tr_idx, va_idx).astype(np.int64)
    docs = SVIDocs(
        keys, tr_ptr, np.searchsorted(keys, tr_idx).astype(np.int64),
        np.asarray(tr_val, np.float64), va_ptr, np.searchsorted(keys, va_idx).astype(np.int64),
        va_idx, np.asarray(va_val).astype(np.int64), int(np.asarray(tr_val).sum()),
    )  # fmt: skip
    with _lock:
        STATES[key] = docs
    return docs


def prepare_svi(part: Any, model: str, fraction: float, seed: int) -> tuple[int, int]:
    """Build (or find) the partition's state; ``(training documents, tokens)``."""
    d = svi_docs(part, model, fraction, seed)
    return d.n_docs, d.n_tokens


def _due(p: SVIPlan, i: int) -> bool:
    return i == p.passes or (p.evaluate_every > 0 and i % p.evaluate_every == 0)


def _score(docs: SVIDocs, vrows: np.ndarray, vslot: np.ndarray, mu: np.ndarray,
           musum: np.ndarray, log_s: float, p: SVIPlan) -> tuple[float, int]:  # fmt: skip
    """Document-completion sums of the held-out documents under ``E[beta]`` of the replica."""
    s = math.exp(log_s)
    phi = (p.eta + s * mu[vrows]) / (p.n_words * p.eta + s * musum)[None, :]
    ll, n = completion_sums(
        docs.val_indptr, vslot[docs.val_words], docs.val_gids, docs.val_counts,
        np.ascontiguousarray(phi), p.alpha, p.fold_in, p.seed,
    )  # fmt: skip
    return float(ll), int(n)


class SVITask:
    """``fn(ctx, partition)`` of the MA-SVI solver (see the module docstring)."""

    def __init__(self, plan: SVIPlan) -> None:
        self.plan = plan

    def __call__(self, ctx: Any, part: Any) -> dict[str, Any]:
        p = self.plan
        docs = svi_docs(part, p.model, p.val_fraction, p.seed)
        K, nk = p.n_topics, docs.keys.shape[0]
        lam, lsum, met = ctx.array(p.lam), ctx.array(p.lamsum), ctx.array(p.metrics)
        fp = int(fingerprint(part)[:8], 16)
        gamma = np.empty((docs.n_docs, K))  # the E-step's doc-topic parameters
        if ctx.iteration == 0:
            ctx.clock()
        mu = np.zeros((nk, K))
        ebeta = np.zeros((nk, K))
        sstats = np.zeros((nk, K))
        mark = np.full(nk, -1, np.int64)
        vrows = np.unique(docs.val_words)
        vslot = np.full(nk, -1, np.int64)
        vslot[vrows] = np.arange(vrows.shape[0])
        has_val = docs.val_indptr.shape[0] > 1
        R, n_b, m = p.rounds, p.steps_per_pass, ctx.n_tasks
        logs = log_scales(p, 0, p.passes * n_b)
        tm = {"pull": 0.0, "estep": 0.0, "push": 0.0, "eval": 0.0}
        e_iters = 0
        chunks: list[np.ndarray] = []
        stamp = 0
        # finished passes' figures (every task's sums) to the dashboard, as for CGS
        mon = Monitor(ctx, SweepPlan(p.metrics, p.pass0 - 1, rounds=R), lambda _: None,
                      finish_row=lambda row: sweep_metrics(row, m), x="sweep")  # fmt: skip
        while ctx.iteration <= p.passes * R:
            c = ctx.iteration - 1
            ps_i, r = divmod(c, R)
            if r == 0 or not chunks:
                rng = np.random.default_rng([p.seed, fp, p.pass0 + ps_i])
                gamma[:] = rng.gamma(100.0, 0.01, gamma.shape)  # scikit-learn's start
                chunks = np.array_split(rng.permutation(docs.n_docs).astype(np.int64), n_b)
            steps = range(r * p.average_every, min((r + 1) * p.average_every, n_b))
            bws = []
            for j in steps:
                stamp += 1
                bws.append(batch_words(chunks[j], docs.indptr, docs.words, mark, stamp))
            evaluate = has_val and r == 0 and _due(p, ps_i)
            need = np.unique(np.concatenate([*bws, vrows if evaluate else vrows[:0]]))
            t0 = time.perf_counter()
            pulled = np.asarray(lam.get(rows=docs.keys[need]), np.float64)
            ms0 = np.asarray(lsum.get(rows=0), np.float64).reshape(K)
            mu[need] = pulled
            musum = ms0.copy()
            t1 = time.perf_counter()
            tm["pull"] += t1 - t0
            ev = 0.0
            if evaluate:
                ll, n = _score(docs, vrows, vslot, mu, musum, logs[ps_i * n_b], p)
                ev = time.perf_counter() - t1
                vals, cols = score_entries(ll, n, ev, part.index)
                met.increment(vals, rows=ps_i, cols=cols)
                tm["eval"] += ev
            t1 = time.perf_counter()
            for j, bw in zip(steps, bws, strict=True):
                batch = chunks[j]
                if batch.shape[0] == 0:
                    continue
                i = ps_i * n_b + j  # steps of this fit before this one
                s = math.exp(logs[i])
                expected_log_rows(bw, mu, musum, s, p.eta, p.n_words * p.eta, ebeta)
                e_iters += estep(batch, docs.indptr, docs.words, docs.counts, ebeta, p.alpha,
                                 gamma, p.tol, p.max_doc_iter, sstats)  # fmt: skip
                step = (1.0 - math.exp(logs[i + 1] - logs[i])) * p.n_docs / batch.shape[0]
                sgd_update(bw, sstats, mu, musum, step / math.exp(logs[i + 1]))
            t2 = time.perf_counter()
            tm["estep"] += t2 - t1
            touched = np.unique(np.concatenate(bws)) if bws else need[:0]
            if touched.shape[0]:
                back = np.searchsorted(need, touched)
                lam.increment((mu[touched] - pulled[back]) / m, rows=docs.keys[touched])
            lsum.increment((musum - ms0) / m, rows=0)
            tm["push"] += time.perf_counter() - t2
            tokens = sum(int(docs.counts[_entries(docs.indptr, chunks[j])].sum()) for j in steps)
            met.increment(np.array([float(tokens), time.perf_counter() - t0 - ev]),
                          rows=ps_i + 1, cols=np.arange(3, 5))  # fmt: skip
            ctx.report(eval_s=ev, tokens=tokens)
            ctx.clock()
            mon.stop(ctx.iteration)
        if has_val and ctx.iteration == p.passes * R + 1:
            t0 = time.perf_counter()
            ctx.flush()
            mu[vrows] = np.asarray(lam.get(rows=docs.keys[vrows]), np.float64)
            musum = np.asarray(lsum.get(rows=0), np.float64).reshape(K)
            ll, n = _score(docs, vrows, vslot, mu, musum, logs[-1], p)
            vals, cols = score_entries(ll, n, time.perf_counter() - t0, part.index)
            met.increment(vals, rows=p.passes, cols=cols)
        return {"tokens": docs.n_tokens, "docs": docs.n_docs, "estep_iters": e_iters,
                "timings": tm}  # fmt: skip


def _entries(indptr: np.ndarray, docs: np.ndarray) -> np.ndarray:
    """Entry positions of the documents ``docs`` (for summing their counts)."""
    from ._corpus import _ranges

    return _ranges(indptr[docs], indptr[docs + 1])
