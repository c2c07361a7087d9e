"""The collapsed Gibbs sampler: Metropolis-Hastings with alias proposals, word by word.

A task samples its tokens *word-major*: the rows of the word-topic counts
``n_wk`` arrive from the PS in batches (``get_iter``) and every token of a word
is resampled while the word's row is at hand, so sampling the first rows
overlaps the pull of the later ones (Angel's pipelined pulls), and a row is
needed only while its word is sampled.

Per token the target is the collapsed conditional (counts without the token)::

    p(k) ~ (n_dk + alpha) (n_wk + beta) / (n_k + V*beta)

and the chain alternates LightLDA's two proposals, each accepted with the exact
Metropolis-Hastings ratio, ``mh_steps`` times:

* the *doc proposal* ``q(k) ~ n_dk + alpha`` is drawn in O(1) by picking the topic
  of a random token of the document (or, with weight ``K*alpha``, a uniform topic);
* the *word proposal* ``q(k) ~ (n_wk + beta) / (n_k + V*beta)`` with the counts as
  they were when the word's turn came, split into a sparse part over the
  word's non-zero topics (an alias table built in O(nnz) per word) and a dense
  smoothing part ``beta / (n_k + V*beta)`` shared by every word (one alias table per
  sweep).

So the cost per token does not grow with ``K``; the cost per word is O(nnz of
its row) for the alias table plus O(K) to copy the row and read its delta.
Counts read from the PS may be stale (SSP/ASP) and even a little negative for a
moment; they are clamped at zero in the probabilities.

Random numbers come from a xorshift64* stream seeded per (seed, sweep, word),
so a sweep is the same whatever order the row batches arrive in.

Example
-------
>>> import numpy as np
>>> p, a = np.empty(3), np.empty(3, np.int32)
>>> build_alias(np.array([1.0, 0.0, 3.0]), 3, p, a)
4.0
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = [
    "build_alias",
    "count_words",
    "init_topics",
    "mix_seed",
    "sample_words",
    "vose_pair",
    "word_deltas",
    "word_span",
]

_M = np.uint64(0x2545F4914F6CDD1D)


@njit(nogil=True, cache=True, inline="always")
def _next(s):  # type: ignore[no-untyped-def]
    """xorshift64*: the next state and a float in [0, 1)."""
    s ^= s >> np.uint64(12)
    s ^= s << np.uint64(25)
    s ^= s >> np.uint64(27)
    r = s * _M
    return s, (r >> np.uint64(11)) * (1.0 / 9007199254740992.0)


@njit(nogil=True, cache=True)
def mix_seed(a, b, c):  # type: ignore[no-untyped-def]
    """splitmix64 of three integers: a non-zero 64-bit seed."""
    x = np.uint64(a) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(b)
    x = x * np.uint64(0xBF58476D1CE4E5B9) + np.uint64(c)
    x ^= x >> np.uint64(30)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(27)
    x *= np.uint64(0x94D049BB133111EB)
    x ^= x >> np.uint64(31)
    if x == np.uint64(0):
        x = np.uint64(0x9E3779B97F4A7C15)
    return x


@njit(nogil=True, cache=True)
def build_alias(w, n, prob, alias):  # type: ignore[no-untyped-def]
    """Vose's alias table over ``w[:n]`` into ``prob`` / ``alias``; returns ``sum(w[:n])``.

    Drawing: ``j = int(u * n)``, then ``j`` if ``frac < prob[j]`` else ``alias[j]``.
    """
    total = 0.0
    for i in range(n):
        total += w[i]
    if n == 0 or total <= 0.0:
        return 0.0
    scale = n / total
    for i in range(n):
        prob[i] = w[i] * scale
    vose_pair(n, prob, alias, np.empty(n, np.int32), np.empty(n, np.int32))
    return total


@njit(nogil=True, cache=True)
def vose_pair(n, prob, alias, small, large):  # type: ignore[no-untyped-def]
    """The pairing step of Vose's alias method, shared by every table builder:
    ``prob[:n]`` holds the weights scaled to mean 1 and becomes the table's
    acceptance probabilities; ``alias[:n]`` is written; ``small`` / ``large`` are
    int32 workspaces of at least ``n``."""
    ns = 0
    nl = 0
    for i in range(n):
        alias[i] = i
        if prob[i] < 1.0:
            small[ns] = i
            ns += 1
        else:
            large[nl] = i
            nl += 1
    while ns > 0 and nl > 0:
        ns -= 1
        s = small[ns]
        g = large[nl - 1]
        alias[s] = g
        prob[g] = prob[g] + prob[s] - 1.0
        if prob[g] < 1.0:
            nl -= 1
            small[ns] = g
            ns += 1
    for i in range(nl):
        prob[large[i]] = 1.0
    for i in range(ns):
        prob[small[i]] = 1.0


@njit(nogil=True, cache=True, inline="always")
def _draw(prob, alias, n, u):  # type: ignore[no-untyped-def]
    x = u * n
    j = int(x)
    if j >= n:
        j = n - 1
    if x - j < prob[j]:
        return j
    return alias[j]


@njit(nogil=True, cache=True, inline="always")
def word_span(local, r, wptr, delta_out):  # type: ignore[no-untyped-def]
    """Row ``r``'s word: ``(local id, first token, end)``; an absent word's delta row is 0."""
    j = local[r]
    a0 = wptr[j]
    a1 = wptr[j + 1]
    if a1 == a0:
        delta_out[r, :] = 0
    return j, a0, a1


@njit(nogil=True, cache=True)
def init_topics(z, tdoc, wptr, ndk, K, seed):  # type: ignore[no-untyped-def]
    """Uniform random topics for every token; fills ``ndk``; returns ``(n_words, K)`` counts."""
    nw = wptr.shape[0] - 1
    nwk = np.zeros((nw, K), np.int32)
    for j in range(nw):
        s = mix_seed(seed, 0, j)
        for i in range(wptr[j], wptr[j + 1]):
            s, u = _next(s)
            k = int(u * K)
            if k >= K:
                k = K - 1
            z[i] = k
            ndk[tdoc[i], k] += 1
            nwk[j, k] += 1
    return nwk


@njit(nogil=True, cache=True)
def count_words(z, wptr, K):  # type: ignore[no-untyped-def]
    """``(n_words, K)`` counts of the assignments ``z`` (word-major tokens)."""
    nw = wptr.shape[0] - 1
    nwk = np.zeros((nw, K), np.int32)
    for j in range(nw):
        for i in range(wptr[j], wptr[j + 1]):
            nwk[j, z[i]] += 1
    return nwk


@njit(nogil=True, cache=True)
def sample_words(  # type: ignore[no-untyped-def]
    local, rows, nk, nk0, z, tdoc, wptr, dptr, dtok, ndk, alpha, beta, vbeta,
    dense_prob, dense_alias, dense_total, mh_steps, seed, sweep, delta_out,
):  # fmt: skip
    """Resample every token of the words ``local`` (local word ids, one per row).

    ``rows[i]`` is word ``local[i]``'s count row as pulled (left unchanged);
    ``nk`` the live topic totals (updated), ``nk0`` the totals the sweep began
    with (the proposals' normaliser), the dense alias table over
    ``beta / (nk0 + V*beta)``.  ``delta_out[i]`` receives the row's change.  Returns
    the number of tokens sampled.
    """
    K = nk.shape[0]
    live = np.empty(K, np.int64)
    topics = np.empty(K, np.int32)
    w = np.empty(K)
    prob = np.empty(K)
    alias = np.empty(K, np.int32)
    inv0 = np.empty(K)
    for k in range(K):
        inv0[k] = 1.0 / (max(nk0[k], 0) + vbeta)
    kalpha = K * alpha
    done = 0
    for r in range(local.shape[0]):
        j, a0, a1 = word_span(local, r, wptr, delta_out)
        if a1 == a0:
            continue
        nnz = 0
        for k in range(K):
            c = rows[r, k]
            live[k] = c
            if c > 0:
                topics[nnz] = k
                w[nnz] = c * inv0[k]
                nnz += 1
        sparse_total = build_alias(w, nnz, prob, alias)
        ztot = sparse_total + dense_total
        st = mix_seed(seed, sweep, j)
        for i in range(a0, a1):
            d = tdoc[i]
            s0 = z[i]
            ndk[d, s0] -= 1
            live[s0] -= 1
            nk[s0] -= 1
            s = s0
            d0 = dptr[d]
            nd = dptr[d + 1] - d0
            for _ in range(mh_steps):
                # doc proposal: q(k) ~ n_dk (token included) + alpha
                st, u = _next(st)
                u *= nd + kalpha
                if u < nd:
                    t = z[dtok[d0 + int(u)]]
                else:
                    t = int((u - nd) / alpha)
                    if t >= K:
                        t = K - 1
                if t != s:
                    # accept with min(1, p(t) q(s) / (p(s) q(t))), no divisions
                    qt = ndk[d, t] + (1 if t == s0 else 0) + alpha
                    qs = ndk[d, s] + (1 if s == s0 else 0) + alpha
                    num = (ndk[d, t] + alpha) * (max(live[t], 0) + beta) * (max(nk[s], 0) + vbeta)
                    den = (ndk[d, s] + alpha) * (max(live[s], 0) + beta) * (max(nk[t], 0) + vbeta)
                    st, u = _next(st)
                    if u * den * qt < num * qs:
                        s = t
                # word proposal: q(k) ~ (n_wk + beta) / (n_k + V*beta), counts at the word's start
                st, u = _next(st)
                u *= ztot
                if u < sparse_total:
                    t = topics[_draw(prob, alias, nnz, u / sparse_total)]
                else:
                    t = _draw(dense_prob, dense_alias, K, (u - sparse_total) / dense_total)
                if t != s:
                    qt = (max(rows[r, t], 0) + beta) * inv0[t]
                    qs = (max(rows[r, s], 0) + beta) * inv0[s]
                    num = (ndk[d, t] + alpha) * (max(live[t], 0) + beta) * (max(nk[s], 0) + vbeta)
                    den = (ndk[d, s] + alpha) * (max(live[s], 0) + beta) * (max(nk[t], 0) + vbeta)
                    st, u = _next(st)
                    if u * den * qt < num * qs:
                        s = t
            z[i] = s
            ndk[d, s] += 1
            live[s] += 1
            nk[s] += 1
        done += a1 - a0
        for k in range(K):
            delta_out[r, k] = live[k] - rows[r, k]
    return done


@njit(nogil=True, cache=True)
def word_deltas(rows_ids, delta, K):  # type: ignore[no-untyped-def]
    """The non-zero entries of ``delta`` (one row per id) as ``(row ids, cols, values)``."""
    n = 0
    for r in range(delta.shape[0]):
        for k in range(K):
            if delta[r, k] != 0:
                n += 1
    ri = np.empty(n, np.int64)
    ci = np.empty(n, np.int64)
    vi = np.empty(n, np.int32)
    n = 0
    for r in range(delta.shape[0]):
        for k in range(K):
            v = delta[r, k]
            if v != 0:
                ri[n] = rows_ids[r]
                ci[n] = k
                vi[n] = v
                n += 1
    return ri, ci, vi
