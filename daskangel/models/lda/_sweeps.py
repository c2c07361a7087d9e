"""One CGS sweep of a task: the deterministic BSP form and the rounds form.

:class:`Sweeper` holds what every sweep of a task reuses (the plan, the
worker-side corpus, the alias buffers, the timing buckets) and runs a sweep in
one of two forms:

* :meth:`Sweeper.bsp` (data parallel under BSP): every read of the sweep happens
  before any push of the sweep can be visible, so a sweep reads exactly the
  model of the previous clock boundary and a fit is the same for a
  ``random_state`` whatever the timing.  While ``V x K`` int32 is at most
  ``daskangel.lda.whole-pull-bytes`` the task pulls the whole word-topic matrix
  in one request at the sweep start and sums ``n_k`` from it (no ``n_k`` round
  trip); else it pulls its words' rows pipelined (``get_iter``) and ``n_k``.  The
  task then enters the job barrier "every task has read sweep ``s``" without
  waiting (:meth:`~daskangel.train.TaskContext.job_barrier`), samples, waits for
  the barrier (long passed, as a rule) and buffers its merged deltas, which
  ``clock()`` pushes in one flush.
* :meth:`Sweeper.rounds` (SSP / ASP, and model parallel groups): rows pulled
  pipelined and each batch's deltas buffered as soon as it is sampled (sent by
  size in the background), one round per vocabulary slice.

Example
-------
>>> sw = Sweeper(plan, corpus, tm, hook, vkeys, slot)          # doctest: +SKIP
>>> capture, nk_eval, push = sw.bsp(ctx, s, nwk, nka, whole=True, due=False)  # doctest: +SKIP
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import scipy.sparse as sp

from ... import config
from ._dense import sample_dense
from ._recover import doc_topic
from ._sampler import build_alias, sample_words, word_deltas
from ._warp import WarpState, doc_phase, word_phase, z_deltas

__all__ = ["Sweeper"]


class Sweeper:
    """The sweeps of one CGS task (see the module docstring)."""

    def __init__(
        self, plan: Any, corpus: Any, tm: dict[str, float], hook: Any,
        vkeys: np.ndarray, slot: np.ndarray,
    ) -> None:  # fmt: skip
        self.p = plan
        self.c = corpus
        self.tm = tm
        self.hook = hook
        self.vkeys = vkeys  # local ids of the held-out documents' words
        self.slot = slot  # local word id -> its row among the captured rows (-1: none)
        K = plan.n_topics
        self.dprob, self.dalias = np.empty(K), np.empty(K, np.int32)
        self.sampled = 0
        self.batch = int(config.get("daskangel.lda.row-batch"))
        self._dbuf = np.empty((0, K), np.int32)

    def _alias(self, nk0: np.ndarray) -> float:
        p = self.p
        if p.sampler != "mh":
            return 0.0
        w = p.beta / (np.maximum(nk0, 0) + p.n_words * p.beta)
        return float(build_alias(w, p.n_topics, self.dprob, self.dalias))

    def _prepare(self, nk: np.ndarray, s: int) -> None:
        """The sampler's per-token state (made on demand: a fit's first sweep, after a
        restore) and, for ``'warp'``, the sweep's doc phase (``nk`` updated)."""
        p, c = self.p, self.c
        K = p.n_topics
        if p.sampler != "warp":
            if c.ndk is None:
                c.ndk = doc_topic(c.token_docs(), c.z, c.n_docs, K)
            return
        c.ndk = c.tdoc = None  # not used: the doc phase visits the tokens doc by doc
        if c.warp is None or not c.warp.fits(c.z, K, p.mh_steps):
            c.warp = WarpState.start(c.z, K, p.mh_steps)
        ts = time.perf_counter()
        w = c.warp
        doc_phase(w.z, w.prop, c.dptr, c.dtok, nk, p.alpha, p.beta, p.n_words * p.beta,
                  p.seed, p.sweep0 + s)  # fmt: skip
        self.tm["sample"] += time.perf_counter() - ts
        self.tm["doc_phase"] = self.tm.get("doc_phase", 0.0) + time.perf_counter() - ts  # of it

    def _sample(
        self, local: np.ndarray, vals: np.ndarray, nk: np.ndarray, nk0: np.ndarray,
        dtot: float, s: int,
    ) -> np.ndarray:  # fmt: skip
        """Resample the tokens of the words ``local`` (rows ``vals``); their count changes."""
        p, c = self.p, self.c
        n = vals.shape[0]
        if self._dbuf.shape[0] < n:  # one buffer for every batch (no page faults a batch)
            self._dbuf = np.empty((n, p.n_topics), np.int32)
        delta = self._dbuf[:n]
        ts = time.perf_counter()
        vb = p.n_words * p.beta
        if p.sampler == "warp":
            w = c.warp
            self.sampled += word_phase(
                local, vals, nk, w.z, w.zpush, w.prop, c.wptr, p.beta, vb, p.seed,
                p.sweep0 + s, delta,
            )  # fmt: skip
        elif p.sampler == "dense":
            self.sampled += sample_dense(
                local, vals, nk, c.z, c.tdoc, c.wptr, c.ndk, p.alpha, p.beta, vb,
                p.seed, p.sweep0 + s, delta,
            )  # fmt: skip
        else:
            self.sampled += sample_words(
                local, vals, nk, nk0, c.z, c.tdoc, c.wptr, c.dptr, c.dtok, c.ndk,
                p.alpha, p.beta, vb, self.dprob, self.dalias, dtot, p.mh_steps,
                p.seed, p.sweep0 + s, delta,
            )  # fmt: skip
        self.tm["sample"] += time.perf_counter() - ts
        return delta

    def bsp(
        self, ctx: Any, s: int, nwk: Any, nka: Any, whole: bool, due: bool
    ) -> tuple[np.ndarray | None, np.ndarray, float]:
        """Sweep ``s`` under BSP: ``(captured held-out rows or None, n_k read, push s)``."""
        p, c, tm = self.p, self.c, self.tm
        K, V = p.n_topics, p.n_words
        tq = time.perf_counter()
        capture = None
        if whole:  # one request: the whole matrix, n_k summed from it
            full = np.asarray(nwk.get())
            nk0 = full.sum(axis=0, dtype=np.int64)
            barrier = ctx.job_barrier(s, wait=False)  # every read of this sweep is done
            tm["rows"] += time.perf_counter() - tq
            rows = full[c.keys]
            nk = nk0.copy()
            self._prepare(nk, s)
            delta = self._sample(np.arange(c.keys.shape[0]), rows, nk, nk0, self._alias(nk0), s)
            if due:
                capture = rows[self.vkeys]
            t1 = time.perf_counter()
            dfull = np.zeros((V, K), np.int32)
            dfull[c.keys] = delta
            update: Any = dfull
        else:  # this task's words, pipelined with sampling; the deltas made after the barrier
            nk0 = np.asarray(nka.get(rows=0), np.int64)
            tm["nk"] += time.perf_counter() - tq
            nk = nk0.copy()
            z0 = c.z.astype(WarpState.topic_dtype(K))  # the topics the pushed counts reflect
            self._prepare(nk, s)
            dtot = self._alias(nk0)
            if due:
                capture = np.zeros((self.vkeys.shape[0], K), np.int32)
            tq, s0 = time.perf_counter(), tm["sample"]
            for rb, vals in nwk.get_iter(rows=c.keys, batch=self.batch, ordered=True):
                local = np.searchsorted(c.keys, rb)
                if capture is not None:
                    sl = self.slot[local]
                    m = sl >= 0
                    capture[sl[m]] = vals[m]
                self._sample(local, vals, nk, nk0, dtot, s)
            barrier = ctx.job_barrier(s, wait=False)
            tm["rows"] += time.perf_counter() - tq - (tm["sample"] - s0)  # net of sampling
            t1 = time.perf_counter()
            update = None
        tb = time.perf_counter()
        barrier.wait()
        tm["barrier"] += time.perf_counter() - tb
        if update is not None:
            nwk.increment(update)
        else:  # nothing held: the sweep's changes are z against z0, word by word, in row order
            self._push_changes(nwk, z0)
        self.hook.at(ctx, s)  # the test hook: die with the rows pushed, n_k not
        nka.increment(nk - nk0, rows=0)
        return capture, nk0, time.perf_counter() - t1

    def _push_changes(self, nwk: Any, z0: np.ndarray) -> None:
        """Push the count changes between ``z0`` and the task's topics now, a run of
        words of about ``2**20`` tokens at a time (sorted entries: no re-sort)."""
        c, K, V = self.c, self.p.n_topics, self.p.n_words
        nw = c.keys.shape[0]
        w0 = 0
        while w0 < nw:
            w1 = int(np.searchsorted(c.wptr, c.wptr[w0] + (1 << 20), side="right")) - 1
            w1 = min(nw, max(w1, w0 + 1))
            keys, vals = z_deltas(z0, c.z, c.wptr, K, w0, w1, c.keys)
            if keys.size:
                r, col = np.divmod(keys, K)
                nwk.increment(sp.coo_matrix((vals, (r, col)), shape=(V, K)))
            w0 = w1

    def rounds(
        self, ctx: Any, s: int, nwk: Any, nka: Any, bounds: np.ndarray, due: bool
    ) -> tuple[np.ndarray | None, np.ndarray | None, float]:
        """Sweep ``s`` in rounds (SSP / ASP, model parallel): as :meth:`bsp`'s result.

        A round is the words of one vocabulary slice (all words when the group has one
        task).  The first read waits for the clock's sync floor; in model parallelism
        every read then goes past the worker's clock cache to the servers
        (``TaskArray.plain``), since another member of the group (maybe on this worker)
        changed the rows and ``n_k`` since the clock began.
        """
        p, c, tm = self.p, self.c, self.tm
        K, V = p.n_topics, p.n_words
        G = ctx.group_size
        rows_src = nwk.plain if G > 1 else nwk
        capture = np.zeros((self.vkeys.shape[0], K), np.int32) if due else None
        nk_eval = None
        push = 0.0
        for r, sl_id in enumerate(ctx.round_robin() if G > 1 else [0]):
            tq = time.perf_counter()
            nk0 = np.asarray((nka if r == 0 else nka.plain).get(rows=0), np.int64)
            tm["nk"] += time.perf_counter() - tq
            nk = nk0.copy()
            if nk_eval is None:
                nk_eval = nk0
            if r == 0:
                self._prepare(nk, s)  # warp: n_k pushed per round is exact by the clock
            dtot = self._alias(nk0)
            words = c.keys[bounds[sl_id] : bounds[sl_id + 1]]
            for rb, vals in rows_src.get_iter(rows=words, batch=self.batch, ordered=True):
                local = np.searchsorted(c.keys, rb)
                if capture is not None:
                    sl = self.slot[local]
                    m = sl >= 0
                    capture[sl[m]] = vals[m]
                delta = self._sample(local, vals, nk, nk0, dtot, s)
                t1 = time.perf_counter()
                ri, ci, vi = word_deltas(rb, delta, K)
                if ri.size:
                    nwk.increment(sp.coo_matrix((vi, (ri, ci)), shape=(V, K)))
                push += time.perf_counter() - t1
                self.hook.at(ctx, s)  # the test hook: die in the middle of the sweep
            nka.increment(nk - nk0, rows=0)
            if G > 1:  # the next member samples these rows next round: push them now
                t1 = time.perf_counter()
                ctx.flush()
                push += time.perf_counter() - t1
        return capture, nk_eval, push
