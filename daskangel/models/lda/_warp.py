"""WarpLDA's sampler (Chen et al., VLDB 2016): O(1) per token, each phase in cache.

For many topics the Metropolis-Hastings chain of :mod:`._sampler` is bound by
memory latency: every proposal reads a random entry of a random document's
4 KB ``n_dk`` row and the topic of a random token.  WarpLDA splits a sweep into
two phases, each visiting the tokens in the order that keeps *its* counts in
cache, and delays the count updates so that each acceptance test needs only
the counts of that phase:

* the **doc phase** (document by document, ``n_dk`` counted from the document's
  tokens into one ``K`` buffer): each token accepts or rejects the *word
  proposals* drawn in the last word phase, ``q(k) ~ n_wk + beta``, with the ratio
  ``(n_dt + alpha)(n_s + V beta) / ((n_ds + alpha)(n_t + V beta))`` (the word
  factors cancel against the proposal), then draws its next *doc proposals*
  ``q(k) ~ n_dk + alpha`` in O(1): the topic of a random token of the document,
  or with weight ``K alpha`` a uniform topic;
* the **word phase** (word by word, as the rows of ``n_wk`` arrive from the PS):
  each token accepts or rejects its doc proposals with
  ``(n_wt + beta)(n_s + V beta) / ((n_ws + beta)(n_t + V beta))``, then draws its
  next word proposals from an alias table over the word's live row (plus a
  uniform topic with weight ``K beta``).

A sweep is a doc phase then a word phase.  The word phase's live row is the
pulled row plus this task's changes since its last push: the doc phase moved
tokens of every word, and ``zpush`` (each token's topic when its word's delta
was last computed) tells by how much.  So the deltas a sweep pushes are every
change of the sweep, word by word, and the counts stay exact.

Per token the sampler keeps its topic ``z`` (int32), ``zpush`` and ``mh_steps``
proposals (int16 while ``K < 32768``): 4 + 2 + 2 x steps bytes, and no
``(documents, K)`` count matrix.

Random numbers: xorshift64* streams seeded per ``(seed, sweep, word)`` and
``(seed, sweep, document)``, so a sweep is the same whatever order the row
batches arrive in.

Example
-------
>>> import numpy as np
>>> from daskangel.models.lda._corpus import Corpus
>>> c = Corpus.build(np.array([0, 3, 5]), np.array([0, 1, 2, 1, 2]), np.ones(5))
>>> st = WarpState.start(np.zeros(c.n_tokens, np.int32), 2, 2)
>>> nk = np.array([5, 0]); K = 2
>>> doc_phase(st.z, st.prop, c.dptr, c.dtok, nk, 0.1, 0.01, 0.03, 0, 1)
5
>>> rows = np.array([[1, 0], [2, 0], [2, 0]], np.int32); delta = np.empty_like(rows)
>>> word_phase(np.arange(3), rows, nk, st.z, st.zpush, st.prop, c.wptr, 0.01, 0.03,
...            0, 1, delta)
5
>>> int(delta.sum()), int(nk.sum())
(0, 5)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from ._sampler import _next, mix_seed, vose_pair, word_span

__all__ = ["WarpState", "doc_phase", "init_counts", "word_phase", "z_deltas"]

_DOC_STREAM = 0x0D0C  # separates the doc phase's streams from the word phase's


@dataclass
class WarpState:
    """A task's per-token state for the WarpLDA sampler (word-major positions)."""

    z: np.ndarray  # (n_tokens,) int32 topics
    zpush: np.ndarray  # (n_tokens,) int16/int32 topics the pushed counts reflect
    prop: np.ndarray  # (n_tokens, steps) int16/int32 pending proposals

    @staticmethod
    def topic_dtype(K: int) -> np.dtype:
        return np.dtype(np.int16 if K < 2**15 else np.int32)

    @classmethod
    def start(cls, z: np.ndarray, K: int, steps: int) -> WarpState:
        """State for topics ``z`` whose counts are all pushed: no pending change, and
        every proposal the token's own topic (a no-op until the next phase draws)."""
        dt = cls.topic_dtype(K)
        zp = z.astype(dt)
        return cls(z, zp, np.repeat(zp[:, None], steps, axis=1))

    def fits(self, z: np.ndarray, K: int, steps: int) -> bool:
        """Is this state for ``z`` (the same array) with ``K`` topics and ``steps``?"""
        return (
            self.z is z
            and self.zpush.dtype == self.topic_dtype(K)
            and self.prop.shape == (z.shape[0], steps)
        )

    @property
    def nbytes(self) -> int:
        return int(self.zpush.nbytes + self.prop.nbytes)


@njit(nogil=True, cache=True)
def init_counts(z, wptr, K, seed, w0, w1, keys):  # type: ignore[no-untyped-def]
    """Uniform random topics for the tokens of local words ``w0:w1``; their counts as
    sparse entries ``(row * K + topic, count)`` of the words' global ids ``keys``.

    Same streams as :func:`._sampler.init_topics` (seeded per word).
    """
    cnt = np.zeros(K, np.int32)
    n = 0
    for j in range(w0, w1):
        n += min(K, wptr[j + 1] - wptr[j])
    out_k = np.empty(n, np.int64)
    out_v = np.empty(n, np.int32)
    n = 0
    for j in range(w0, w1):
        s = mix_seed(seed, 0, j)
        a0, a1 = wptr[j], wptr[j + 1]
        for i in range(a0, a1):
            s, u = _next(s)
            k = int(u * K)
            if k >= K:
                k = K - 1
            z[i] = k
            cnt[k] += 1
        for k in range(K):  # sorted keys: the push buffer does not sort them again
            if cnt[k] != 0:
                out_k[n] = keys[j] * K + k
                out_v[n] = cnt[k]
                cnt[k] = 0
                n += 1
    return out_k[:n], out_v[:n]


@njit(nogil=True, cache=True)
def doc_phase(z, prop, dptr, dtok, nk, alpha, beta, vbeta, seed, sweep):  # type: ignore[no-untyped-def]
    """Every document's tokens accept or reject their word proposals, then draw doc
    proposals (see the module docstring).  ``nk``: live topic totals (updated).
    Returns the number of tokens visited."""
    K = nk.shape[0]
    M = prop.shape[1]
    cnt = np.zeros(K, np.int32)
    kalpha = K * alpha
    zd = np.empty(0, np.int32)  # the document's topics and proposals, gathered once
    pd = np.empty((0, M), prop.dtype)
    done = 0
    for d in range(dptr.shape[0] - 1):
        o0 = dptr[d]
        L = dptr[d + 1] - o0
        if L == 0:
            continue
        if zd.shape[0] < L:
            zd = np.empty(2 * L, np.int32)
            pd = np.empty((2 * L, M), prop.dtype)
        for a in range(L):  # one gather pass: independent loads, many misses in flight
            i = dtok[o0 + a]
            zd[a] = z[i]
            for m in range(M):
                pd[a, m] = prop[i, m]
        for a in range(L):
            cnt[zd[a]] += 1
        st = mix_seed(seed + _DOC_STREAM, sweep, d)
        for a in range(L):
            s = zd[a]
            cnt[s] -= 1
            nk[s] -= 1
            for m in range(M):
                t = pd[a, m]
                if t != s:
                    num = (cnt[t] + alpha) * (max(nk[s], 0) + vbeta)
                    den = (cnt[s] + alpha) * (max(nk[t], 0) + vbeta)
                    st, u = _next(st)
                    if u * den < num:
                        s = t
            cnt[s] += 1
            nk[s] += 1
            zd[a] = s
        for a in range(L):  # doc proposals ~ n_dk + alpha, drawn in O(1)
            for m in range(M):
                st, u = _next(st)
                u *= L + kalpha
                if u < L:
                    t = zd[int(u)]
                else:
                    t = int((u - L) / alpha)
                    if t >= K:
                        t = K - 1
                pd[a, m] = t
        for a in range(L):  # scatter back (the lines are still in cache)
            i = dtok[o0 + a]
            z[i] = zd[a]
            cnt[zd[a]] = 0
            for m in range(M):
                prop[i, m] = pd[a, m]
        done += L
    return done


@njit(nogil=True, cache=True)
def _alias(w, idx, n, prob, alias, small, large):  # type: ignore[no-untyped-def]
    """Vose's alias table over ``w[idx[:n]]`` (positions ``0..n-1``); returns the total."""
    total = 0.0
    for a in range(n):
        total += w[idx[a]]
    if total <= 0.0:
        return 0.0
    scale = n / total
    for a in range(n):
        prob[a] = w[idx[a]] * scale
    vose_pair(n, prob, alias, small, large)
    return total


@njit(nogil=True, cache=True)
def word_phase(local, rows, nk, z, zpush, prop, wptr, beta, vbeta, seed, sweep, delta_out):  # type: ignore[no-untyped-def]
    """The word phase over the words ``local`` (one per row of ``rows``, as pulled).

    Tokens accept or reject their doc proposals, then draw word proposals;
    ``delta_out[r]`` receives row ``r``'s change since this task's last push (doc
    phase included) and ``zpush`` of the words' tokens becomes ``z``.  Returns the
    number of tokens sampled.
    """
    K = nk.shape[0]
    M = prop.shape[1]
    live = np.empty(K, np.int64)
    w = np.empty(K)
    idx = np.empty(K, np.int32)
    prob = np.empty(K)
    alias = np.empty(K, np.int32)
    small = np.empty(K, np.int32)
    large = np.empty(K, np.int32)
    kbeta = K * beta
    done = 0
    for r in range(local.shape[0]):
        j, a0, a1 = word_span(local, r, wptr, delta_out)
        if a1 == a0:
            continue
        for k in range(K):
            live[k] = rows[r, k]
        for i in range(a0, a1):  # this task's changes since its last push (doc phase)
            if zpush[i] != z[i]:
                live[zpush[i]] -= 1
                live[z[i]] += 1
        nnz = 0
        for k in range(K):
            if live[k] > 0:
                w[k] = live[k]
                idx[nnz] = k
                nnz += 1
        wtot = _alias(w, idx, nnz, prob, alias, small, large)
        st = mix_seed(seed, sweep, j)
        for i in range(a0, a1):
            s = z[i]
            live[s] -= 1
            nk[s] -= 1
            for m in range(M):
                t = prop[i, m]
                if t != s:
                    num = (max(live[t], 0) + beta) * (max(nk[s], 0) + vbeta)
                    den = (max(live[s], 0) + beta) * (max(nk[t], 0) + vbeta)
                    st, u = _next(st)
                    if u * den < num:
                        s = t
            live[s] += 1
            nk[s] += 1
            z[i] = s
            for m in range(M):  # word proposals ~ n_wk + beta (the word's start)
                st, u = _next(st)
                u *= wtot + kbeta
                if u < wtot:
                    x = u / wtot * nnz
                    a = int(x)
                    if a >= nnz:
                        a = nnz - 1
                    t = idx[a] if x - a < prob[a] else idx[alias[a]]
                else:
                    t = int((u - wtot) / beta)
                    if t >= K:
                        t = K - 1
                prop[i, m] = t
            zpush[i] = s
        done += a1 - a0
        for k in range(K):
            delta_out[r, k] = live[k] - rows[r, k]
    return done


@njit(nogil=True, cache=True)
def z_deltas(z0, z, wptr, K, w0, w1, ids):  # type: ignore[no-untyped-def]
    """The count changes of the words ``w0:w1`` between topics ``z0`` and ``z``, as sorted
    entries ``(ids[j] * K + topic, change)``: a sweep's deltas recomputed after the
    barrier instead of held from the sampling (see :mod:`._sweeps`)."""
    cnt = np.zeros(K, np.int32)
    n = 0
    for j in range(w0, w1):
        m = 0
        for i in range(wptr[j], wptr[j + 1]):
            if z0[i] != z[i]:
                m += 2
        n += min(K, m)
    keys = np.empty(n, np.int64)
    vals = np.empty(n, np.int32)
    n = 0
    for j in range(w0, w1):
        moved = False
        for i in range(wptr[j], wptr[j + 1]):
            if z0[i] != z[i]:
                cnt[z0[i]] -= 1
                cnt[z[i]] += 1
                moved = True
        if not moved:
            continue
        base = np.int64(ids[j]) * K
        for k in range(K):
            if cnt[k] != 0:
                keys[n] = base + k
                vals[n] = cnt[k]
                cnt[k] = 0
                n += 1
    return keys[:n], vals[:n]
