"""A task's documents on its worker: held-out split, tokens, and state kept between fits.

Held-out documents are chosen by a seeded hash of each document's *content*
(its word ids and counts), not by its position: the same documents are held out
whatever the partitioning, and :func:`heldout_mask` gives a benchmark the same
split to hand to other systems.

The tokens and their topics of a partition live in :data:`STATES` on the
worker, keyed by the model and a fingerprint of the partition's rows, so a
``partial_fit`` (or a second ``fit`` with ``warm_start``) on the same documents
continues their chains; they are never shipped.  ``forget(model)`` drops a
model's state (run on every worker when the model is refitted or closed).

Example
-------
>>> import numpy as np, scipy.sparse as sp
>>> X = sp.csr_matrix(np.random.default_rng(0).poisson(1.0, (40, 6)))
>>> int(heldout_mask(X, 0.25, seed=0).sum()) in range(5, 16)
True
>>> Y = sp.csr_matrix(np.ones((40, 6), dtype=np.int64))  # identical documents
>>> int(heldout_mask(Y, 0.25, seed=0).sum()) in (0, 40)
True
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import njit

from ._corpus import Corpus, check_counts
from ._sampler import mix_seed

__all__ = ["STATES", "TaskDocs", "doc_hashes", "forget", "heldout_mask", "task_docs"]

# {(model uid, partition fingerprint): TaskDocs}
STATES: dict[tuple[str, str], Any] = {}  # TaskDocs (cgs) or SVIDocs (ma-svi)
_lock = threading.Lock()


@njit(nogil=True, cache=True)
def doc_hashes(indptr, indices, counts, seed):  # type: ignore[no-untyped-def]
    """A seeded 64-bit hash of each CSR document's (word, count) pairs, in [0, 1)."""
    nd = indptr.shape[0] - 1
    out = np.empty(nd)
    for d in range(nd):
        h = mix_seed(seed, 0x5EED, indptr[d + 1] - indptr[d])
        for e in range(indptr[d], indptr[d + 1]):
            h = mix_seed(h, indices[e], counts[e])
        out[d] = (h >> np.uint64(11)) * (1.0 / 9007199254740992.0)
    return out


def heldout_mask(X: Any, fraction: float, seed: int = 0) -> np.ndarray:
    """Which rows of the count matrix ``X`` the fit holds out (``validation_fraction``).

    Each document is held out with probability ``fraction``, by a hash of its
    content seeded with ``random_state``: the split :class:`LDA` uses, for
    handing the same held-out documents to other systems.
    """
    import scipy.sparse as sp

    X = sp.csr_matrix(X)
    X.sum_duplicates()
    return _mask(X.indptr, X.indices, X.data, fraction, seed)


def _mask(
    indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, fraction: float, seed: int
) -> np.ndarray:
    if fraction <= 0:
        return np.zeros(indptr.shape[0] - 1, bool)
    h = doc_hashes(
        np.asarray(indptr, np.int64), np.asarray(indices, np.int64),
        np.asarray(data).astype(np.int64), int(seed),
    )  # fmt: skip
    return h < fraction


@dataclass
class TaskDocs:
    """A partition's training tokens and held-out documents."""

    corpus: Corpus  # training tokens (keys = training words + held-out words)
    val_indptr: np.ndarray  # held-out documents, CSR ...
    val_words: np.ndarray  # ... positions in corpus.keys
    val_gids: np.ndarray  # ... global word ids
    val_counts: np.ndarray  # ... int64 counts
    n_train_docs: int

    @property
    def nbytes(self) -> int:
        return self.corpus.nbytes + sum(
            a.nbytes for a in (self.val_indptr, self.val_words, self.val_counts)
        )


def fingerprint(part: Any) -> str:
    """A digest of a partition's rows (what makes its state reusable)."""
    h = hashlib.blake2b(digest_size=16)
    for b in part.pieces():
        for a in (b.indptr - b.indptr[0], b.indices, b.data):
            h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def task_docs(part: Any, model: str, fraction: float, seed: int, n_words: int) -> TaskDocs:
    """The partition's :class:`TaskDocs` for ``model``: kept, or built now."""
    key = (model, fingerprint(part))
    with _lock:
        got = STATES.get(key)
    if got is not None:
        return got
    rows = part.csr()
    indptr = np.asarray(rows.indptr - rows.indptr[0], np.int64)
    indices = np.asarray(rows.indices, np.int64)
    check_counts(rows.data)
    if indices.size and int(indices.max()) >= n_words:
        from ...errors import InvalidArgumentError

        raise InvalidArgumentError(
            f"X: word id {int(indices.max())} is out of range for a vocabulary of {n_words} "
            f"words (n_features_in_)"
        )
    held = _mask(indptr, indices, rows.data, fraction, seed)
    lens = np.diff(indptr)
    sel_t, sel_v = np.flatnonzero(~held), np.flatnonzero(held)
    tr_ptr, tr_idx, tr_val = _take(indptr, indices, rows.data, sel_t, lens)
    va_ptr, va_idx, va_val = _take(indptr, indices, rows.data, sel_v, lens)
    extra = np.unique(va_idx)
    corpus = Corpus.build(tr_ptr, tr_idx, tr_val, extra_keys=extra)
    vw = np.searchsorted(corpus.keys, va_idx).astype(np.int64)
    docs = TaskDocs(corpus, va_ptr, vw, va_idx, va_val.astype(np.int64), int(sel_t.shape[0]))
    with _lock:
        STATES[key] = docs
    return docs


def _take(
    indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, sel: np.ndarray, lens: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    from ._corpus import _ranges

    idx = _ranges(indptr[sel], indptr[sel + 1])
    ptr = np.concatenate([[0], np.cumsum(lens[sel])]).astype(np.int64)
    return ptr, indices[idx], np.asarray(data)[idx]


def forget(model: str) -> int:
    """Drop every partition state of ``model`` on this worker; returns how many."""
    with _lock:
        keys = [k for k in STATES if k[0] == model]
        for k in keys:
            del STATES[k]
    return len(keys)
