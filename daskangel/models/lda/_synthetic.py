"""Corpora with planted topics, generated with a seed (tests, benchmarks, examples).

Topic ``k`` puts 90 % of its mass on its own block of ``V / K`` words (Zipf-like
inside the block) and the rest on every word; a document mixes three topics
(weights from a Dirichlet(1)) and draws ``doc_len`` tokens.  Compiled, so a
corpus of 100 M tokens takes seconds.

Example
-------
>>> X = planted_counts(n_docs=10, n_words=40, n_topics=4, doc_len=20, seed=0)
>>> X.shape, int(X.sum())
((10, 40), 200)
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from numba import njit

__all__ = ["planted_counts"]


@njit(nogil=True, cache=True)
def _generate(n_docs, V, K, doc_len, seed):  # type: ignore[no-untyped-def]
    np.random.seed(seed)
    block = max(V // K, 1)
    # Zipf-like cumulative weights inside a block
    cw = np.empty(block)
    acc = 0.0
    for i in range(block):
        acc += 1.0 / (i + 1.0)
        cw[i] = acc
    for i in range(block):
        cw[i] /= acc
    indptr = np.zeros(n_docs + 1, np.int64)
    cap = n_docs * min(doc_len, V)
    indices = np.empty(cap, np.int32)
    data = np.empty(cap, np.int32)
    words = np.empty(doc_len, np.int64)
    nnz = 0
    for d in range(n_docs):
        t = np.random.randint(0, K, 3)
        w = np.random.gamma(1.0, 1.0, 3)
        w /= w.sum()
        for i in range(doc_len):
            u = np.random.random()
            k = t[0] if u < w[0] else (t[1] if u < w[0] + w[1] else t[2])
            if np.random.random() < 0.9:
                at = np.searchsorted(cw, np.random.random())
                words[i] = min(k * block + at, V - 1)
            else:
                words[i] = np.random.randint(0, V)
        words.sort()
        i = 0
        while i < doc_len:
            j = i
            while j < doc_len and words[j] == words[i]:
                j += 1
            indices[nnz] = words[i]
            data[nnz] = j - i
            nnz += 1
            i = j
        indptr[d + 1] = nnz
    return indptr, indices[:nnz].copy(), data[:nnz].copy()


def planted_counts(
    n_docs: int, n_words: int, n_topics: int, doc_len: int, seed: int = 0
) -> sp.csr_matrix:
    """A ``(n_docs, n_words)`` int32 count matrix with planted topics (see the module docstring)."""
    indptr, indices, data = _generate(
        int(n_docs), int(n_words), int(n_topics), int(doc_len), int(seed)
    )
    return sp.csr_matrix((data, indices, indptr), shape=(n_docs, n_words))
