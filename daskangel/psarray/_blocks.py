"""Block storage on a PS server: dense numpy blocks and sparse sorted-key blocks.

A block answers reads and applies writes for its own local index space; it knows
where it sits in the global array only to draw partition-independent random
initial values.  Every write bumps ``version``.

* :class:`DenseBlock` is a C-contiguous ``(rows, cols)`` numpy array.
* :class:`SparseBlock` stores only touched entries as sorted int64 keys
  ``local_row * width + local_col`` and their values (12 bytes per float32 entry
  plus at most ``daskangel.server.sparse-growth`` spare capacity).  Missing keys
  read as ``default``, or, with lazy initialisation, as the counter-based random
  value of the entry, which a read then stores (Angel's *initAndGet*).

Example
-------
>>> import numpy as np
>>> b = SparseBlock((1, 10**12), np.dtype("float32"), default=0.0)
>>> b.update(None, np.array([7, 10**11]), np.ones((1, 2), "float32"), add=True)
>>> b.get(None, np.array([7, 8]))
array([[1., 0.]], dtype=float32)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import config
from ..errors import PSIndexError, ShapeMismatchError
from . import _kernels as K
from ._initspec import InitSpec
from ._packed import PACK_SHIFT, unpack_reduce
from ._recvpool import pooled
from ._scratch import scratch
from ._sortedstore import merge_missing, merge_present
from ._storepool import packed_merge, packed_store, room_for

__all__ = ["DenseBlock", "SparseBlock", "make_block"]


def _check_local(name: str, idx: np.ndarray | None, extent: int) -> None:
    # Defensive check on the server: compiled kernels must never see a bad index.
    if idx is None or idx.shape[0] == 0:
        return
    if idx.shape[0] <= 16:  # a Python min/max is ~10x cheaper than two numpy reductions
        short = idx.tolist()
        lo, hi = min(short), max(short)
    else:
        lo, hi = int(idx.min()), int(idx.max())
    if lo < 0 or hi >= extent:
        raise PSIndexError(f"{name}: local index {lo if lo < 0 else hi} outside [0, {extent})")


class DenseBlock:
    """A dense block: ``data`` is the ``(rows, cols)`` array."""

    kind = "dense"
    __slots__ = ("col0", "data", "lent", "n_cols", "row0", "version")

    def __init__(self, data: np.ndarray, row0: int = 0, col0: int = 0, n_cols: int = 0) -> None:
        self.data = np.ascontiguousarray(data)
        self.row0, self.col0, self.n_cols = row0, col0, n_cols or data.shape[1]
        self.version = 0
        # True while ``data`` itself may be on its way to a reader (``get(lend=True)``):
        # the next write then works on a copy, so the lent array never changes
        self.lent = False

    @property
    def shape(self) -> tuple[int, int]:
        return self.data.shape  # type: ignore[return-value]

    @property
    def dtype(self) -> np.dtype:
        return self.data.dtype

    @property
    def nbytes(self) -> int:
        return int(self.data.nbytes)

    def check(self, rows: np.ndarray | None, cols: np.ndarray | None) -> None:
        _check_local("rows", rows, self.data.shape[0])
        _check_local("cols", cols, self.data.shape[1])

    def get(
        self,
        rows: np.ndarray | None,
        cols: np.ndarray | None,
        lend: bool = False,
        pool: Any = None,
    ) -> np.ndarray:
        """The selected entries, always a new array, except that a whole-block read
        with ``lend=True`` returns the block's own array: the block then copies it
        before its next write (copy-on-write), so the reader's array stays as read.
        Only a reader that never writes into the result may ask to borrow (the comm
        handler, which serialises it).  ``pool`` (a ``ReceivePool``): selected rows
        are gathered into one of its buffers (checked indices: no bounds check)."""
        d = self.data
        if rows is None and cols is None:
            if lend:
                self.lent = True
                return d
            return d.copy()
        if cols is None:
            n = rows.shape[0] * d.shape[1] * d.itemsize if rows is not None else 0
            if pool is not None and n >= config.get_bytes("daskangel.client.direct-read-bytes"):
                assert rows is not None
                out = pooled(pool, (rows.shape[0], d.shape[1]), d.dtype)
                return np.take(d, rows, axis=0, out=out, mode="clip")
            return d[rows]
        if rows is None:
            return d[:, cols]
        return d[np.ix_(rows, cols)]

    def update(
        self, rows: np.ndarray | None, cols: np.ndarray | None, values: np.ndarray, add: bool
    ) -> None:
        d = self.own()
        values = values.astype(d.dtype, copy=False)
        if rows is None and cols is None:
            if add and values.shape == d.shape and values.flags.c_contiguous:
                K.add_into(d, values)
            elif add:
                d += values
            else:
                d[...] = values
        else:
            r = np.arange(d.shape[0]) if rows is None else rows
            c = np.arange(d.shape[1]) if cols is None else cols
            K.scatter_grid(d, r, c, values.reshape(r.shape[0], c.shape[0]), add)
        self.version += 1

    def update_packed(self, row: int, packed: np.ndarray) -> None:
        """Add values packed with their columns (see :meth:`SparseBlock.update_packed`)."""
        cols = packed >> PACK_SHIFT
        values = (packed & 0xFFFFFFFF).astype(np.uint32).view(self.dtype)
        d = self.own()
        K.scatter_grid(d, np.array([row]), cols, values.reshape(1, -1), True)
        self.version += 1

    def update_coo(self, rows: np.ndarray, cols: np.ndarray, values: np.ndarray, add: bool) -> None:
        d = self.own()
        K.scatter_coo(d, rows, cols, values.astype(d.dtype, copy=False), add)
        self.version += 1

    def check_csr(
        self, rows: np.ndarray, lens: np.ndarray, cols: np.ndarray, values: np.ndarray
    ) -> None:
        """Check compressed rows before writing any (:func:`._scatter.check_csr`)."""
        K.check_csr(self.data.shape, self.data.dtype, rows, lens, cols, values)

    def update_csr(
        self, rows: np.ndarray, lens: np.ndarray, cols: np.ndarray, values: np.ndarray, add: bool
    ) -> None:
        """Write compressed rows: ``lens[i]`` entries ``(cols, values)`` in row ``rows[i]``."""
        d = self.own()
        K.scatter_csr(d, rows, lens, cols, values, add)  # (checked: widened per entry)
        self.version += 1

    def own(self) -> np.ndarray:
        """The block's array, safe to change in place (a copy if it was lent)."""
        if self.lent:
            self.data = self.data.copy()
            self.lent = False
        return self.data

    def fill(self, value: Any) -> None:
        self.own().fill(value)
        self.version += 1

    def copy(self) -> DenseBlock:
        out = DenseBlock(self.data.copy(), self.row0, self.col0, self.n_cols)
        out.version = self.version
        return out

    def entries(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(rows, cols, values)`` of the non-zero entries (local indices)."""
        r, c = np.nonzero(self.data)
        return r, c, self.data[r, c]


class SparseBlock:
    """A sparse block of local shape ``(rows, width)`` holding only touched keys."""

    kind = "sparse"
    __slots__ = (
        "col0",
        "default",
        "dtype",
        "init",
        "keys",
        "n",
        "n_cols",
        "row0",
        "shape",
        "vals",
        "version",
    )

    def __init__(
        self,
        shape: tuple[int, int],
        dtype: np.dtype,
        default: float = 0.0,
        init: InitSpec | None = None,
        row0: int = 0,
        col0: int = 0,
        n_cols: int = 0,
    ) -> None:
        if shape[0] * shape[1] >= 2**63:
            raise ShapeMismatchError(f"shape: a sparse block of {shape} has more than 2**63 keys")
        self.shape = (int(shape[0]), int(shape[1]))
        self.dtype = np.dtype(dtype)
        self.keys = np.empty(0, np.int64)
        self.vals = np.empty(0, self.dtype)
        self.n = 0
        self.default = self.dtype.type(default)
        self.init = init if init is not None and init.lazy else None
        self.row0, self.col0, self.n_cols = row0, col0, n_cols or self.shape[1]
        self.version = 0

    @property
    def nbytes(self) -> int:
        return int(self.keys.nbytes + self.vals.nbytes)

    @property
    def nnz(self) -> int:
        return self.n

    def check(self, rows: np.ndarray | None, cols: np.ndarray | None) -> None:
        _check_local("rows", rows, self.shape[0])
        _check_local("cols", cols, self.shape[1])

    def _keys(self, rows: np.ndarray | None, cols: np.ndarray | None) -> np.ndarray:
        r = (
            np.arange(self.shape[0], dtype=np.int64)
            if rows is None
            else rows.astype(np.int64, copy=False)
        )
        c = (
            np.arange(self.shape[1], dtype=np.int64)
            if cols is None
            else cols.astype(np.int64, copy=False)
        )
        if r.shape[0] == 1:
            return c + r[0] * self.shape[1]
        return (r[:, None] * self.shape[1] + c[None, :]).ravel()

    def _global_index(self, keys: np.ndarray) -> np.ndarray:
        r, c = np.divmod(keys, self.shape[1])
        return (r + self.row0) * self.n_cols + (c + self.col0)

    def _lookup(self, keys: np.ndarray, store_missing: bool) -> np.ndarray:
        out = np.empty(keys.shape[0], self.dtype)
        found = np.empty(keys.shape[0], np.bool_)
        K.sparse_lookup(self.keys, self.vals, self.n, keys, out, found)
        if not found.all():
            miss = ~found
            if self.init is None:
                out[miss] = self.default
            else:
                mk = keys[miss]
                drawn = self.init.draw(self._global_index(mk), self.dtype)
                out[miss] = drawn
                if store_missing:
                    sk, sv = K.sort_pairs(mk, drawn)
                    sk, sv = K.reduce_sorted(sk, sv, False)
                    self._merge(sk, sv, add=False)
        return out

    def get(self, rows: np.ndarray | None, cols: np.ndarray | None) -> np.ndarray:
        keys = self._keys(rows, cols)
        nr = self.shape[0] if rows is None else rows.shape[0]
        return self._lookup(keys, store_missing=True).reshape(nr, -1)

    def _merge(self, keys: np.ndarray, vals: np.ndarray, add: bool) -> None:
        """Merge sorted unique ``keys``; a store that must grow takes pooled memory
        (:mod:`._storepool`: no page faults when a freed store's chunk fits)."""
        missing = scratch("missing", keys.shape[0], np.int64)
        n_missing = merge_present(self.keys, self.vals, self.n, keys, vals, add, missing)
        if n_missing == 0:
            return
        out_keys, out_vals = room_for(self.n + n_missing, self.keys, self.vals)
        self.n = merge_missing(
            self.keys, self.vals, self.n, keys, vals, add, self.default, missing, n_missing,
            out_keys, out_vals,
        )  # fmt: skip
        self.keys, self.vals = out_keys, out_vals

    def _apply(self, keys: np.ndarray, values: np.ndarray, add: bool) -> None:
        keys, values = K.sort_pairs(keys, values.astype(self.dtype, copy=False).ravel())
        self._apply_sorted(keys, values, add)

    def update_packed(self, row: int, packed: np.ndarray) -> None:
        """Add values packed with their columns (``_packed.pack_by_bounds``) to ``row``:
        ``packed`` (reordered here) holds ``col << 32 | value bits`` of a 4-byte dtype,
        whose radix sort by key carries the values along (:mod:`._storepool`)."""
        if not packed.flags.writeable:
            packed = packed.copy()
        at = row * self.shape[1]
        if self.init is None:  # no unpacked copy: into a new store or merged in one pass
            self.keys, self.vals, self.n = (
                packed_merge(self.keys, self.vals, self.n, packed, at, self.default)
                if self.n
                else packed_store(packed, self.dtype, at, self.default)
            )
            self.version += 1
            return
        keys, values = unpack_reduce(packed, self.dtype, at)
        self._apply_unique(keys, values, True)

    def _apply_sorted(self, keys: np.ndarray, values: np.ndarray, add: bool) -> None:
        """Apply ascending ``keys`` (duplicates allowed) and their values."""
        keys, values = K.reduce_sorted(keys, values, add)
        self._apply_unique(keys, values, add)

    def _apply_unique(self, keys: np.ndarray, values: np.ndarray, add: bool) -> None:
        """Apply ascending unique ``keys`` and their values."""
        if add and self.init is not None:
            # missing keys start from their lazily drawn value, not from `default`
            out = np.empty(keys.shape[0], self.dtype)
            found = np.empty(keys.shape[0], np.bool_)
            K.sparse_lookup(self.keys, self.vals, self.n, keys, out, found)
            if not found.all():
                values = values.copy()
                miss = ~found
                values[miss] += (
                    self.init.draw(self._global_index(keys[miss]), self.dtype) - self.default
                )
        self._merge(keys, values, add)
        self.version += 1

    def update(
        self, rows: np.ndarray | None, cols: np.ndarray | None, values: np.ndarray, add: bool
    ) -> None:
        self._apply(self._keys(rows, cols), values, add)

    def update_coo(self, rows: np.ndarray, cols: np.ndarray, values: np.ndarray, add: bool) -> None:
        keys = rows.astype(np.int64) * self.shape[1] + cols.astype(np.int64)
        self._apply(keys, values, add)

    def fill(self, value: Any) -> None:
        """Every entry reads ``value``: stored keys are dropped, lazy init is off."""
        self.keys = np.empty(0, np.int64)
        self.vals = np.empty(0, self.dtype)
        self.n = 0
        self.default = self.dtype.type(value)
        self.init = None
        self.version += 1

    def copy(self) -> SparseBlock:
        out = SparseBlock(
            self.shape, self.dtype, self.default.item(), None, self.row0, self.col0, self.n_cols
        )
        out.init = self.init
        out.keys = self.keys[: self.n].copy()
        out.vals = self.vals[: self.n].copy()
        out.n = self.n
        out.version = self.version
        return out

    def load(self, keys: np.ndarray, vals: np.ndarray) -> None:
        """Replace the stored entries with sorted unique ``keys`` and ``vals``."""
        self.keys = np.ascontiguousarray(keys, dtype=np.int64)
        self.vals = np.ascontiguousarray(vals, dtype=self.dtype)
        self.n = int(self.keys.shape[0])
        self.version += 1

    def entries(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(rows, cols, values)`` of the stored entries (local indices)."""
        r, c = np.divmod(self.keys[: self.n], self.shape[1])
        return r, c, self.vals[: self.n].copy()


def make_block(
    kind: str,
    shape: tuple[int, int],
    dtype: np.dtype,
    init: InitSpec,
    row0: int,
    col0: int,
    n_cols: int,
    col_index: np.ndarray | None = None,
) -> DenseBlock | SparseBlock:
    """Create a block and fill it as ``init`` says (dense random values are drawn now)."""
    dtype = np.dtype(dtype)
    if kind == "sparse":
        default = init.a if init.kind == "const" else 0.0
        return SparseBlock(shape, dtype, default, init, row0, col0, n_cols)
    if init.kind == "const":
        return DenseBlock(np.full(shape, init.a, dtype=dtype), row0, col0, n_cols)
    rows = np.arange(row0, row0 + shape[0], dtype=np.int64)
    cols = np.arange(col0, col0 + shape[1], dtype=np.int64) if col_index is None else col_index
    index = (rows[:, None] * n_cols + cols[None, :]).ravel()
    return DenseBlock(init.draw(index, dtype).reshape(shape), row0, col0, n_cols)
