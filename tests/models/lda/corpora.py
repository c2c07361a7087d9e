"""Small generated corpora with planted topics for the LDA tests."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp


def planted_corpus(
    n_docs: int = 300,
    n_topics: int = 4,
    words_per_topic: int = 25,
    doc_len: int = 60,
    seed: int = 0,
) -> tuple[sp.csr_matrix, np.ndarray]:
    """Counts ``(n_docs, K * words_per_topic)`` and the planted topics ``(K, V)``.

    Topic ``k`` puts its mass on its own block of words (and a little on all
    others); each document mixes one or two topics.
    """
    rng = np.random.default_rng(seed)
    V = n_topics * words_per_topic
    topics = np.full((n_topics, V), 0.02 / V)
    for k in range(n_topics):
        topics[k, k * words_per_topic : (k + 1) * words_per_topic] += rng.dirichlet(
            np.ones(words_per_topic)
        )
    topics /= topics.sum(axis=1, keepdims=True)
    rows = []
    for _ in range(n_docs):
        theta = rng.dirichlet(np.full(n_topics, 0.1))
        z = rng.choice(n_topics, size=doc_len, p=theta)
        words = np.array([rng.choice(V, p=topics[k]) for k in z])
        rows.append(np.bincount(words, minlength=V))
    return sp.csr_matrix(np.array(rows, dtype=np.int64)), topics
