"""CSRBatch: rows of a partition as compact CSR arrays, and the kernels that cut them.

Every reader produces, and every training task consumes, :class:`CSRBatch` es:
``indptr`` (int64), ``indices`` (int32 when every index fits, else int64),
``data`` (float32), ``labels`` (float32, one per row) and optional ``row_ids``
(int64: the document of a docword row, the user of a ratings row).

A :class:`DenseBatch` is a CSRBatch whose rows are kept as one dense float32
``(n, d)`` block ``X`` (``from_array(X, dense=True)``): a family with a dense
kernel (KMeans) reads ``X`` as it is, with no CSR copy; every other reader sees
the same rows as CSR (``indptr`` / ``indices`` / ``data`` are made on access,
every entry stored, zeros included).

Example
-------
>>> import numpy as np
>>> b = CSRBatch.from_arrays([0, 2, 3], [1, 4, 0], [1.0, 2.0, 3.0], [1.0, -1.0], 5)
>>> b.take(np.array([1, 0])).to_scipy().toarray()
array([[3., 0., 0., 0., 0.],
       [0., 1., 0., 0., 2.]], dtype=float32)
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import njit

__all__ = ["CSRBatch", "DenseBatch", "concat", "index_dtype", "rebatch"]

INT32_MAX = np.iinfo(np.int32).max


def index_dtype(max_index: int) -> np.dtype:
    """int32 when every index fits, else int64."""
    return np.dtype(np.int32) if max_index <= INT32_MAX else np.dtype(np.int64)


@njit(nogil=True, cache=True)
def _gather(indptr, indices, data, rows):  # type: ignore[no-untyped-def]
    m = rows.shape[0]
    out_ptr = np.empty(m + 1, np.int64)
    out_ptr[0] = 0
    for k in range(m):
        r = rows[k]
        out_ptr[k + 1] = out_ptr[k] + indptr[r + 1] - indptr[r]
    out_idx = np.empty(out_ptr[m], indices.dtype)
    out_val = np.empty(out_ptr[m], data.dtype)
    for k in range(m):
        r = rows[k]
        a = indptr[r]
        n = indptr[r + 1] - a
        o = out_ptr[k]
        out_idx[o : o + n] = indices[a : a + n]
        out_val[o : o + n] = data[a : a + n]
    return out_ptr, out_idx, out_val


@dataclass(frozen=True, slots=True)
class CSRBatch:
    """Rows in CSR form with their labels (see the module docstring)."""

    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray
    labels: np.ndarray
    n_features: int
    row_ids: np.ndarray | None = None

    @classmethod
    def from_arrays(
        cls,
        indptr: Any,
        indices: Any,
        data: Any,
        labels: Any,
        n_features: int,
        row_ids: Any = None,
    ) -> CSRBatch:
        ind = np.asarray(indices)
        dt = index_dtype(int(ind.max()) if ind.size else 0)
        return cls(
            np.asarray(indptr, np.int64),
            ind.astype(dt, copy=False),
            np.asarray(data, np.float32),
            np.asarray(labels, np.float32),
            int(n_features),
            None if row_ids is None else np.asarray(row_ids, np.int64),
        )

    @classmethod
    def empty(cls, n_features: int = 0, row_ids: bool = False) -> CSRBatch:
        return cls(
            np.zeros(1, np.int64),
            np.empty(0, np.int32),
            np.empty(0, np.float32),
            np.empty(0, np.float32),
            n_features,
            np.empty(0, np.int64) if row_ids else None,
        )

    @property
    def n_rows(self) -> int:
        return int(self.indptr.shape[0] - 1)

    @property
    def nnz(self) -> int:
        return int(self.indptr[-1] - self.indptr[0])

    @property
    def shape(self) -> tuple[int, int]:
        return self.n_rows, self.n_features

    @property
    def nbytes(self) -> int:
        n = self.indptr.nbytes + self.indices.nbytes + self.data.nbytes + self.labels.nbytes
        return int(n + (0 if self.row_ids is None else self.row_ids.nbytes))

    def to_scipy(self) -> Any:
        """A ``scipy.sparse.csr_matrix`` sharing the arrays."""
        import scipy.sparse as sp

        ptr = self.indptr - self.indptr[0] if self.indptr[0] else self.indptr
        return sp.csr_matrix((self.data, self.indices, ptr), shape=self.shape)

    def slice(self, start: int, stop: int) -> CSRBatch:
        """Rows ``[start, stop)`` (views of the data, a rebased indptr)."""
        a, b = int(self.indptr[start]), int(self.indptr[stop])
        return CSRBatch(
            self.indptr[start : stop + 1] - a,
            self.indices[a:b],
            self.data[a:b],
            self.labels[start:stop],
            self.n_features,
            None if self.row_ids is None else self.row_ids[start:stop],
        )

    def take(self, rows: np.ndarray) -> CSRBatch:
        """The given rows, in that order (a compiled gather)."""
        rows = np.asarray(rows, np.int64)
        ptr = self.indptr - self.indptr[0] if self.indptr[0] else self.indptr
        p, i, v = _gather(ptr, self.indices, self.data, rows)
        return CSRBatch(
            p,
            i,
            v,
            self.labels[rows],
            self.n_features,
            None if self.row_ids is None else self.row_ids[rows],
        )

    def compact(self) -> CSRBatch:
        """A copy owning exactly its own rows (a slice would keep its parent alive)."""
        a, b = int(self.indptr[0]), int(self.indptr[-1])
        return CSRBatch(
            self.indptr - a,
            self.indices[a:b].copy(),
            self.data[a:b].copy(),
            self.labels.copy(),
            self.n_features,
            None if self.row_ids is None else self.row_ids.copy(),
        )

    def select_columns(self, lo: int, hi: int) -> CSRBatch:
        """Every row, keeping only the entries of features ``lo <= index < hi``
        (global indices kept; one vectorised pass)."""
        a, b = int(self.indptr[0]), int(self.indptr[-1])
        idx = self.indices[a:b]
        keep = (idx >= lo) & (idx < hi)
        kept = np.zeros(keep.shape[0] + 1, np.int64)
        np.cumsum(keep, out=kept[1:])
        return CSRBatch(
            kept[self.indptr - a],
            idx[keep],
            self.data[a:b][keep],
            self.labels,
            self.n_features,
            self.row_ids,
        )

    def with_features(self, n_features: int) -> CSRBatch:
        return CSRBatch(
            self.indptr, self.indices, self.data, self.labels, int(n_features), self.row_ids
        )


class DenseBatch(CSRBatch):
    """Rows as one dense float32 block ``X`` (see the module docstring).

    .. warning::
       ``data`` is a view of ``X``; ``indptr`` and ``indices`` are made on the
       first access and kept with the batch (8 bytes a row and 4 bytes an
       entry, once): readers that know the class take ``X``.

    >>> import numpy as np
    >>> b = DenseBatch(np.array([[1.0, 0.0], [0.0, 2.0]], np.float32), np.zeros(2, np.float32), 2)
    >>> b.nnz, b.indices.tolist(), b.indices is b.indices, b.take(np.array([1])).X.tolist()
    (4, [0, 1, 0, 1], True, [[0.0, 2.0]])
    """

    __slots__ = ("X", "_csr")
    X: np.ndarray
    _csr: tuple[np.ndarray, np.ndarray] | None

    def __init__(
        self, X: Any, labels: Any, n_features: int, row_ids: np.ndarray | None = None
    ) -> None:
        object.__setattr__(self, "X", np.ascontiguousarray(X, np.float32))
        object.__setattr__(self, "labels", np.asarray(labels, np.float32))
        object.__setattr__(self, "n_features", int(n_features))
        object.__setattr__(self, "row_ids", row_ids)
        object.__setattr__(self, "_csr", None)

    def __reduce__(self) -> Any:
        return (DenseBatch, (self.X, self.labels, self.n_features, self.row_ids))

    def __repr__(self) -> str:
        return f"DenseBatch(rows={self.n_rows}, n_features={self.n_features})"

    def _made_csr(self) -> tuple[np.ndarray, np.ndarray]:
        """``(indptr, indices)``, made once (a race makes equal arrays twice)."""
        got = self._csr
        if got is None:
            n, d = self.X.shape
            got = (np.arange(n + 1, dtype=np.int64) * d, np.tile(np.arange(d, dtype=np.int32), n))
            object.__setattr__(self, "_csr", got)
        return got

    @property  # type: ignore[override]
    def indptr(self) -> np.ndarray:
        return self._made_csr()[0]

    @property  # type: ignore[override]
    def indices(self) -> np.ndarray:
        return self._made_csr()[1]

    @property  # type: ignore[override]
    def data(self) -> np.ndarray:
        return self.X.reshape(-1)

    @property
    def n_rows(self) -> int:
        return int(self.X.shape[0])

    @property
    def nnz(self) -> int:
        return int(self.X.size)

    @property
    def nbytes(self) -> int:
        n = self.X.nbytes + self.labels.nbytes
        return int(n + (0 if self.row_ids is None else self.row_ids.nbytes))

    def _like(self, X: np.ndarray, rows: Any) -> DenseBatch:
        rid = None if self.row_ids is None else self.row_ids[rows]
        return DenseBatch(X, self.labels[rows], self.n_features, rid)

    def to_scipy(self) -> Any:
        import scipy.sparse as sp

        return sp.csr_matrix((self.data, self.indices, self.indptr), shape=self.shape)

    def slice(self, start: int, stop: int) -> DenseBatch:
        return self._like(self.X[start:stop], slice(start, stop))

    def take(self, rows: np.ndarray) -> DenseBatch:
        rows = np.asarray(rows, np.int64)
        return self._like(self.X[rows], rows)

    def compact(self) -> DenseBatch:
        return self._like(self.X.copy(), slice(None))

    def select_columns(self, lo: int, hi: int) -> CSRBatch:
        n = self.n_rows
        lo, hi = max(0, min(lo, self.X.shape[1])), max(0, min(hi, self.X.shape[1]))
        w = max(0, hi - lo)
        return CSRBatch(
            np.arange(n + 1, dtype=np.int64) * w,
            np.tile(np.arange(lo, lo + w, dtype=np.int32), n),
            np.ascontiguousarray(self.X[:, lo : lo + w]).reshape(-1),
            self.labels,
            self.n_features,
            self.row_ids,
        )

    def with_features(self, n_features: int) -> DenseBatch:
        return DenseBatch(self.X, self.labels, int(n_features), self.row_ids)


def concat(parts: list[CSRBatch], n_features: int | None = None) -> CSRBatch:
    """Stack batches vertically (one copy; dense batches stay dense)."""
    parts = [p for p in parts if p.n_rows] or parts[:1]
    if not parts:
        return CSRBatch.empty(n_features or 0)
    nf = max(p.n_features for p in parts) if n_features is None else n_features
    if all(isinstance(p, DenseBatch) for p in parts) and len({p.X.shape[1] for p in parts}) == 1:  # type: ignore[attr-defined]
        if len(parts) == 1:
            return parts[0].with_features(nf)
        rid = None
        if parts[0].row_ids is not None:
            rid = np.concatenate([p.row_ids for p in parts if p.row_ids is not None])
        X = np.concatenate([p.X for p in parts])  # type: ignore[attr-defined]
        return DenseBatch(X, np.concatenate([p.labels for p in parts]), nf, rid)
    if len(parts) == 1:
        p = parts[0]
        if p.indptr[0]:
            p = p.slice(0, p.n_rows)
        return p if p.n_features == nf else p.with_features(nf)
    dt = np.result_type(*[p.indices.dtype for p in parts])
    sizes = np.array([p.nnz for p in parts], np.int64)
    offs = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    indptr = np.concatenate(
        [np.zeros(1, np.int64)]
        + [p.indptr[1:] - p.indptr[0] + o for p, o in zip(parts, offs, strict=True)]
    )
    rid = None
    if parts[0].row_ids is not None:
        rid = np.concatenate([p.row_ids for p in parts if p.row_ids is not None])
    return CSRBatch(
        indptr,
        np.concatenate([p.indices[p.indptr[0] : p.indptr[-1]] for p in parts]).astype(
            dt, copy=False
        ),
        np.concatenate([p.data[p.indptr[0] : p.indptr[-1]] for p in parts]),
        np.concatenate([p.labels for p in parts]),
        nf,
        rid,
    )


def rebatch(pieces: Iterable[CSRBatch], batch_size: int) -> Iterator[CSRBatch]:
    """Re-cut a stream of row blocks into batches of exactly ``batch_size`` rows
    (the last one may be smaller)."""
    carry: list[CSRBatch] = []
    have = 0
    for p in pieces:
        start = 0
        n = p.n_rows
        while start < n:
            take = min(batch_size - have, n - start)
            part = p if (start == 0 and take == n) else p.slice(start, start + take)
            start += take
            if have == 0 and take == batch_size:
                yield part
                continue
            carry.append(part)
            have += take
            if have == batch_size:
                yield concat(carry)
                carry, have = [], 0
    if carry:
        yield concat(carry)
