"""The exact collapsed Gibbs sampler over all ``K`` topics, word by word (small ``K``).

For a few topics the exact conditional costs less than the Metropolis-Hastings
chain of :func:`._sampler.sample_words`: per token one random number and ``K``
multiply-adds, against four proposals (each a random number, a random read of
another token's topic and an acceptance test) for ``mh_steps=2``.  ``LDA`` uses
this sampler while ``n_topics <= daskangel.lda.dense-max-topics`` (``sampler='auto'``).

Tokens are taken word-major, as the rows arrive from the PS.  While word ``w``'s
tokens are resampled, ``wk[k] = (n_wk + beta) / (n_k + V*beta)`` is kept for the
word's row (the live row: the pulled counts plus this task's changes), and a
token is drawn from::

    p(k) ~ (n_dk + alpha) * wk[k]

with its own counts removed; only the two topics a token leaves and joins change
``wk``, so the rest of the ``K`` ratios are not recomputed.  Counts read from the
PS may be stale (SSP/ASP) and a little negative for a moment; they are clamped
at zero in the ratios.

Random numbers: the xorshift64* stream of :mod:`._sampler`, seeded per
``(seed, sweep, word)``, so a sweep is the same whatever order the batches come in.

Example
-------
>>> import numpy as np
>>> from daskangel.models.lda._corpus import Corpus
>>> c = Corpus.build(np.array([0, 3, 5]), np.array([0, 1, 2, 1, 2]), np.ones(5))
>>> z = np.zeros(c.n_tokens, np.int32); ndk = np.zeros((2, 2), np.int32); ndk[:, 0] = [3, 2]
>>> rows = np.array([[1, 0], [2, 0], [2, 0]], np.int32); nk = np.array([5, 0])
>>> delta = np.empty_like(rows)
>>> sample_dense(np.arange(3), rows, nk, z, c.tdoc, c.wptr, ndk, 0.1, 0.01, 0.03, 0, 1, delta)
5
>>> int(delta.sum()), int(nk.sum()), int(ndk.sum())
(0, 5, 5)
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ._sampler import _next, mix_seed, word_span

__all__ = ["sample_dense"]


@njit(nogil=True, cache=True)
def sample_dense(  # type: ignore[no-untyped-def]
    local, rows, nk, z, tdoc, wptr, ndk, alpha, beta, vbeta, seed, sweep, delta_out
):  # fmt: skip
    """Resample every token of the words ``local`` (local word ids, one per row of ``rows``).

    ``rows[i]``: word ``local[i]``'s count row as pulled (left unchanged); ``nk``
    the live topic totals (updated); ``delta_out[i]`` receives the row's change.
    Returns the number of tokens sampled.
    """
    K = nk.shape[0]
    live = np.empty(K, np.int64)
    wk = np.empty(K)
    p = np.empty(K)
    done = 0
    for r in range(local.shape[0]):
        j, a0, a1 = word_span(local, r, wptr, delta_out)
        if a1 == a0:
            continue
        for k in range(K):
            c = rows[r, k]
            live[k] = c
            wk[k] = (max(c, 0) + beta) / (max(nk[k], 0) + vbeta)
        st = mix_seed(seed, sweep, j)
        for i in range(a0, a1):
            d = tdoc[i]
            s = z[i]
            ndk[d, s] -= 1
            live[s] -= 1
            nk[s] -= 1
            wk[s] = (max(live[s], 0) + beta) / (max(nk[s], 0) + vbeta)
            tot = 0.0
            for k in range(K):
                p[k] = (ndk[d, k] + alpha) * wk[k]
                tot += p[k]
            st, u = _next(st)
            u *= tot
            s = K - 1
            for k in range(K - 1):
                u -= p[k]
                if u < 0.0:
                    s = k
                    break
            z[i] = s
            ndk[d, s] += 1
            live[s] += 1
            nk[s] += 1
            wk[s] = (max(live[s], 0) + beta) / (max(nk[s], 0) + vbeta)
        done += a1 - a0
        for k in range(K):
            delta_out[r, k] = live[k] - rows[r, k]
    return done
