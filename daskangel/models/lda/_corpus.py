"""A task's documents as tokens: checked, split, and laid out word by word.

A document-word count matrix (CSR, one row per document) becomes

* ``keys``: the sorted global ids of the words the training documents use
  (the rows of ``n_wk`` the task pulls: Angel's pruned pull);
* word-major tokens: the tokens of local word ``j`` are ``wptr[j]:wptr[j+1]``,
  each with its document ``tdoc`` (local index) and topic ``z``;
* ``dptr`` / ``dtok``: the tokens of document ``d`` (positions in the word-major
  arrays), so the doc proposal can pick a random token of ``d``;
* ``ndk``: the dense ``(n_docs, K)`` document-topic counts.

Counts must be non-negative integers (a float count like 2.0 is fine);
empty documents are kept out (they have nothing to sample).

Example
-------
>>> import numpy as np
>>> c = Corpus.build(np.array([0, 2, 3]), np.array([4, 1, 4]), np.array([2.0, 1.0, 1.0]))
>>> c.keys.tolist(), c.wptr.tolist(), c.tdoc.tolist(), c.n_tokens
([1, 4], [0, 1, 4], [0, 0, 0, 1], 4)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import njit

from ...errors import InvalidArgumentError

__all__ = ["Corpus", "check_counts"]


def check_counts(data: np.ndarray, where: str = "X") -> None:
    """Raise if any count is negative, non-integer or not finite."""
    if data.size == 0:
        return
    d = np.asarray(data)
    if d.dtype.kind in "iu":
        if d.dtype.kind == "i" and d.min() < 0:
            raise InvalidArgumentError(
                f"{where}: expected non-negative integer word counts, got {int(d.min())}"
            )
        return
    bad = ~np.isfinite(d) | (d < 0) | (d != np.floor(d))
    if bad.any():
        raise InvalidArgumentError(
            f"{where}: expected non-negative integer word counts, got {d[bad][0]!r}"
        )


@njit(nogil=True, cache=True)
def _layout(indptr, indices, counts, keys, n_tokens, dtok):  # type: ignore[no-untyped-def]
    nd = indptr.shape[0] - 1
    nw = keys.shape[0]
    wptr = np.zeros(nw + 1, np.int64)
    pos = np.searchsorted(keys, indices)
    for e in range(indices.shape[0]):
        wptr[pos[e] + 1] += counts[e]
    for j in range(nw):
        wptr[j + 1] += wptr[j]
    fill = wptr[:-1].copy()
    tdoc = np.empty(n_tokens, np.int32)
    dptr = np.zeros(nd + 1, np.int64)
    for d in range(nd):
        o = dptr[d]
        for e in range(indptr[d], indptr[d + 1]):
            j = pos[e]
            for _ in range(counts[e]):
                t = fill[j]
                fill[j] += 1
                tdoc[t] = d
                dtok[o] = t
                o += 1
        dptr[d + 1] = o
    return wptr, tdoc, dptr


@njit(nogil=True, cache=True)
def _token_docs(dptr, dtok, n_tokens):  # type: ignore[no-untyped-def]
    tdoc = np.empty(n_tokens, np.int32)
    for d in range(dptr.shape[0] - 1):
        for o in range(dptr[d], dptr[d + 1]):
            tdoc[dtok[o]] = d
    return tdoc


@dataclass
class Corpus:
    """One task's training tokens (see the module docstring)."""

    keys: np.ndarray  # (n_words,) int64 sorted global word ids
    wptr: np.ndarray  # (n_words + 1,) int64
    tdoc: np.ndarray | None  # (n_tokens,) int32 local document of each word-major token
    # (dropped while the warp sampler runs: :meth:`token_docs` makes it again)
    dptr: np.ndarray  # (n_docs + 1,) int64
    dtok: np.ndarray  # (n_tokens,) int32 (int64 past 2**31 tokens) word-major position
    # of each doc-major token
    z: np.ndarray | None = None  # (n_tokens,) int32 topics, once initialised
    ndk: np.ndarray | None = None  # (n_docs, K) int32 (dense / mh samplers; made on demand)
    warp: Any = None  # ``._warp.WarpState`` (the warp sampler; made on demand)
    zps: np.ndarray | None = None  # z as last written to the PS (snapshots, ``._recover``)
    job: str | None = None  # the training job that last ran on these tokens

    @property
    def n_tokens(self) -> int:
        return int(self.wptr[-1])

    @property
    def n_docs(self) -> int:
        return int(self.dptr.shape[0] - 1)

    def token_docs(self) -> np.ndarray:
        """``tdoc``, rebuilt from ``dptr`` / ``dtok`` if it was dropped."""
        if self.tdoc is None:
            self.tdoc = _token_docs(self.dptr, self.dtok, self.n_tokens)
        return self.tdoc

    @property
    def nbytes(self) -> int:
        arrays = [self.keys, self.wptr, self.tdoc, self.dptr, self.dtok, self.z, self.ndk]
        extra = self.warp.nbytes if self.warp is not None else 0
        return sum(a.nbytes for a in arrays if a is not None) + extra

    @classmethod
    def build(
        cls,
        indptr: np.ndarray,
        indices: np.ndarray,
        data: np.ndarray,
        extra_keys: np.ndarray | None = None,
    ) -> Corpus:
        """Tokens of the CSR documents (empty documents dropped).

        ``extra_keys``: more words to pull (without tokens here), e.g. the
        held-out documents' words.
        """
        counts = np.asarray(data).astype(np.int64)
        indptr = np.asarray(indptr, np.int64)
        nz = counts > 0
        if not nz.all():  # explicit zeros: drop them
            cum = np.concatenate([[0], np.cumsum(nz)])
            indptr, indices, counts = cum[indptr], indices[nz], counts[nz]
        lens = np.diff(indptr)
        keep = np.flatnonzero(lens > 0)
        if keep.shape[0] != lens.shape[0]:  # empty documents: nothing to sample
            starts, ends = indptr[keep], indptr[keep + 1]
            sel = _ranges(starts, ends)
            indices, counts = indices[sel], counts[sel]
            indptr = np.concatenate([[0], np.cumsum(ends - starts)]).astype(np.int64)
        keys = np.unique(indices).astype(np.int64)
        if extra_keys is not None and extra_keys.size:
            keys = np.union1d(keys, np.asarray(extra_keys, np.int64))
        n_tokens = int(counts.sum())
        dtok = np.empty(n_tokens, np.int32 if n_tokens < 2**31 else np.int64)
        wptr, tdoc, dptr = _layout(
            np.asarray(indptr, np.int64),
            np.asarray(indices, np.int64),
            counts,
            keys,
            n_tokens,
            dtok,
        )
        return cls(keys, wptr, tdoc, dptr, dtok)


def _ranges(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Concatenated ``arange(s, e)`` for each pair."""
    n = ends - starts
    if n.sum() == 0:
        return np.zeros(0, np.int64)
    out = np.repeat(ends - np.cumsum(n), n) + np.arange(int(n.sum()))
    return out.astype(np.int64)
