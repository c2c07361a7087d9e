"""What psf partition code sees of one block: a :class:`Partition` view.

A PS server runs a psf by calling its ``partition_get(*parts, **params)`` or
``partition_update(*parts, **params)`` with one :class:`Partition` per array of
the call.  A view never lets partition code change a block directly: reads see
the committed block, and every change is *staged* on the view (a copy of the
dense data, coordinate writes, a replacement of the sparse entries).  The server
validates the staged changes of every block of the request, and only then
commits them (:meth:`Partition.commit`), so a psf that raises on one block
leaves every block unchanged.

Local coordinates are used throughout: row ``r`` of a block is global row
``row0 + r``; column ``c`` is global column ``col0 + c`` for range blocks, and the
global column itself for hash-partitioned blocks (``hashed``).  Sparse keys are
``local_row * shape[1] + local_col``.

Example
-------
>>> import numpy as np
>>> from daskangel.psarray._blocks import DenseBlock
>>> blk = DenseBlock(np.arange(6.0).reshape(2, 3))
>>> p = Partition("w", 0, blk, writable=True)
>>> p.assign(p.array * 2)
>>> p.validate(); p.commit()
>>> blk.data.tolist()
[[0.0, 2.0, 4.0], [6.0, 8.0, 10.0]]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .. import config
from ..errors import InvalidTypeError, PSIndexError, ShapeMismatchError
from . import _kernels as K
from ._blocks import DenseBlock, SparseBlock
from ._initspec import InitSpec

__all__ = ["Partition"]

_KEEP: Any = object()


def _cast(name: str, values: Any, dtype: np.dtype) -> np.ndarray:
    v = np.asarray(values)
    if v.dtype != dtype and not np.can_cast(v.dtype, dtype, casting="same_kind"):
        raise InvalidTypeError(f"{name}: psf produced {v.dtype} values for a {dtype} array")
    return v.astype(dtype, copy=False)


class Partition:
    """One block of one array, as partition code sees it (read-only unless ``writable``).

    Dense blocks: :attr:`array` (read-only view), :attr:`data` (a writable staged
    copy), :meth:`assign`.  Sparse blocks: :attr:`keys`, :attr:`values`,
    :attr:`default`, :meth:`entries`, :meth:`replace`, :meth:`reset`.  Both:
    :meth:`read` / :meth:`write` of coordinate lists, :meth:`dense`.
    """

    def __init__(
        self,
        array: str,
        block: int,
        blk: DenseBlock | SparseBlock,
        writable: bool = False,
        n_rows: int | None = None,
        hashed: bool = False,
        n_col_blocks: int = 1,
    ) -> None:
        self.name = array
        self.block = block
        self._blk = blk
        self.writable = writable
        self.shape: tuple[int, int] = tuple(blk.shape)  # type: ignore[assignment]
        self.dtype: np.dtype = np.dtype(blk.dtype)
        self.sparse = isinstance(blk, SparseBlock)
        self.hashed = hashed
        self.n_col_blocks = n_col_blocks
        self.row0, self.col0, self.n_cols = blk.row0, blk.col0, blk.n_cols
        self.n_rows = n_rows if n_rows is not None else blk.row0 + self.shape[0]
        # staged changes
        self._data: np.ndarray | None = None  # dense: staged copy or assigned array
        self._values: np.ndarray | None = None  # sparse: staged copy of values
        self._default: Any = _KEEP
        self._replace: tuple[np.ndarray, np.ndarray] | None = None
        self._reset: tuple[Any, InitSpec | None] | None = None
        self._writes: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []

    def __repr__(self) -> str:
        kind = "sparse" if self.sparse else "dense"
        return (
            f"Partition<{self.name!r} block {self.block}, {kind} {self.shape} {self.dtype}, "
            f"rows {self.row0}.., {'writable' if self.writable else 'read-only'}>"
        )

    def _need_write(self) -> None:
        if not self.writable:
            raise PermissionError(
                f"array {self.name!r} is read-only in this psf (not in its writes)"
            )

    def _need(self, sparse: bool) -> None:
        if self.sparse != sparse:
            want = "a sparse" if sparse else "a dense"
            raise InvalidTypeError(f"array {self.name!r}: this needs {want} block, it is not")

    # -- geometry ------------------------------------------------------------------

    def global_rows(self) -> np.ndarray:
        """Global row index of each local row."""
        return np.arange(self.row0, self.row0 + self.shape[0], dtype=np.int64)

    def global_cols(self, local: np.ndarray | None = None) -> np.ndarray:
        """Global column index of local columns (all of them by default)."""
        if local is None:
            local = np.arange(self.shape[1], dtype=np.int64)
        return local.astype(np.int64) if self.hashed else local.astype(np.int64) + self.col0

    @property
    def lazy(self) -> bool:
        """True for a sparse block whose missing keys read as lazily drawn random values."""
        return self.sparse and self._blk.init is not None  # type: ignore[union-attr]

    # -- dense ---------------------------------------------------------------------

    @property
    def array(self) -> np.ndarray:
        """The committed dense data, read-only (no copy)."""
        self._need(False)
        v = self._blk.data.view()  # type: ignore[union-attr]
        v.flags.writeable = False
        return v

    @property
    def data(self) -> np.ndarray:
        """A writable staged copy of the dense data (copied on first use)."""
        self._need(False)
        if not self.writable:
            return self.array
        if self._data is None:
            self._data = self._blk.data.copy()  # type: ignore[union-attr]
        return self._data

    def assign(self, new: Any) -> None:
        """Stage ``new`` (same shape; cast ``same_kind``) as the block's dense data."""
        self._need(False)
        self._need_write()
        arr = _cast(f"array {self.name!r}", new, self.dtype)
        if arr.shape != self.shape:
            raise ShapeMismatchError(
                f"array {self.name!r} block {self.block}: psf produced shape {arr.shape}, "
                f"the block is {self.shape}"
            )
        self._data = np.ascontiguousarray(arr)

    def dense(self) -> np.ndarray:
        """The block as a dense local array (sparse blocks are materialised)."""
        if not self.sparse:
            return self.array
        r, c = self.shape
        limit = config.get_bytes("daskangel.ops.max-densify-bytes")
        if r * c * self.dtype.itemsize > limit:
            raise MemoryError(
                f"array {self.name!r} block {self.block}: a dense copy of {self.shape} would "
                f"exceed daskangel.ops.max-densify-bytes = {limit:,}"
            )
        if self.lazy:
            rows = np.repeat(np.arange(r, dtype=np.int64), c)
            cols = np.tile(np.arange(c, dtype=np.int64), r)
            return self.read(rows, cols).reshape(r, c)
        out = np.full(self.shape, self.default, dtype=self.dtype)
        rr, cc, vv = self.entries()
        out[rr, cc] = vv
        return out

    # -- sparse --------------------------------------------------------------------

    @property
    def keys(self) -> np.ndarray:
        """Sorted local keys of the stored entries (read-only)."""
        self._need(True)
        blk: SparseBlock = self._blk  # type: ignore[assignment]
        v = blk.keys[: blk.n]
        v.flags.writeable = False
        return v

    @property
    def values(self) -> np.ndarray:
        """Values of the stored entries: a writable staged copy when writable."""
        self._need(True)
        blk: SparseBlock = self._blk  # type: ignore[assignment]
        if self.writable:
            if self._values is None:
                self._values = blk.vals[: blk.n].copy()
            return self._values
        v = blk.vals[: blk.n]
        v.flags.writeable = False
        return v

    @property
    def default(self) -> Any:
        """The value unstored sparse entries read as (staged value if set)."""
        self._need(True)
        if self._default is not _KEEP:
            return self._default
        return self._blk.default  # type: ignore[union-attr]

    @default.setter
    def default(self, value: Any) -> None:
        self._need(True)
        self._need_write()
        self._default = self.dtype.type(_cast("default", value, self.dtype))

    @property
    def nnz(self) -> int:
        """Number of stored entries of a sparse block."""
        self._need(True)
        return int(self._blk.n)  # type: ignore[union-attr]

    def entries(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(local_rows, local_cols, values)`` of the stored (committed) entries."""
        self._need(True)
        r, c = np.divmod(self.keys, self.shape[1])
        blk: SparseBlock = self._blk  # type: ignore[assignment]
        return r, c, blk.vals[: blk.n]

    def replace(self, keys: Any, values: Any, default: Any = _KEEP) -> None:
        """Stage new stored entries: sorted unique local ``keys`` and their ``values``."""
        self._need(True)
        self._need_write()
        k = np.asarray(keys, dtype=np.int64)
        v = _cast(f"array {self.name!r}", values, self.dtype)
        if k.ndim != 1 or v.shape != k.shape:
            raise ShapeMismatchError(
                f"replace: expected 1-D keys and values of one length, got {k.shape} and {v.shape}"
            )
        self._replace = (k.copy(), np.ascontiguousarray(v).copy())
        self._values = None
        if default is not _KEEP:
            self.default = default

    def reset(self, value: float = 0.0, init: InitSpec | None = None) -> None:
        """Stage dropping every stored entry; missing keys then read ``value``, or
        (with ``init``) a counter-based random value drawn on first touch."""
        self._need(True)
        self._need_write()
        self._reset = (self.dtype.type(value), init)
        self._replace = None
        self._values = None
        self._writes = []
        self._default = _KEEP

    # -- coordinates (dense and sparse) ----------------------------------------------

    def _check_coords(self, rows: Any, cols: Any) -> tuple[np.ndarray, np.ndarray]:
        r = np.asarray(rows, dtype=np.int64).ravel()
        c = np.asarray(cols, dtype=np.int64).ravel()
        if r.shape != c.shape:
            if r.shape[0] == 1:
                r = np.broadcast_to(r, c.shape)
            else:
                raise ShapeMismatchError(
                    f"rows, cols: expected one length, got {r.shape[0]} and {c.shape[0]}"
                )
        for name, idx, ext in (("rows", r, self.shape[0]), ("cols", c, self.shape[1])):
            if idx.shape[0] and (int(idx.min()) < 0 or int(idx.max()) >= ext):
                raise PSIndexError(
                    f"{name}: local index outside [0, {ext}) in block {self.block} of {self.name!r}"
                )
        return r, c

    def read(self, rows: Any, cols: Any) -> np.ndarray:
        """Committed values at local coordinates ``(rows[k], cols[k])``.

        Missing sparse keys read as the default, or as their lazily drawn value
        (not stored by a read).  Staged changes of this call are not visible.
        """
        r, c = self._check_coords(rows, cols)
        if not self.sparse:
            return self._blk.data[r, c]  # type: ignore[union-attr]
        blk: SparseBlock = self._blk  # type: ignore[assignment]
        keys = r * self.shape[1] + c
        return blk._lookup(keys, store_missing=False)

    def write(self, rows: Any, cols: Any, values: Any) -> None:
        """Stage setting ``(rows[k], cols[k])`` to ``values[k]`` (the last duplicate wins)."""
        self._need_write()
        r, c = self._check_coords(rows, cols)
        v = _cast(f"array {self.name!r}", values, self.dtype).ravel()
        if v.shape != r.shape:
            raise ShapeMismatchError(
                f"write: {r.shape[0]} coordinates but {v.shape[0]} values in block {self.block}"
            )
        self._writes.append((r, c, np.ascontiguousarray(v)))

    # -- validation and commit ---------------------------------------------------------

    @property
    def changed(self) -> bool:
        return (
            self._data is not None
            or self._values is not None
            or self._default is not _KEEP
            or self._replace is not None
            or self._reset is not None
            or bool(self._writes)
        )

    def validate(self) -> None:
        """Check the staged changes once more before anything is committed."""
        if self._replace is not None:
            k, _ = self._replace
            width = self.shape[0] * self.shape[1]
            if k.shape[0] and (
                int(k[0]) < 0 or int(k[-1]) >= width or not bool(np.all(k[1:] > k[:-1]))
            ):
                raise PSIndexError(
                    f"replace: keys of block {self.block} of {self.name!r} must be sorted, "
                    f"unique and in [0, {width})"
                )
        if self._values is not None:
            blk: SparseBlock = self._blk  # type: ignore[assignment]
            if self._values.shape[0] != blk.n or self._values.dtype != self.dtype:
                raise ShapeMismatchError(
                    f"values of block {self.block} of {self.name!r} changed length or dtype"
                )

    def commit(self, write: Callable[[Any, Callable[[Any], None]], None] | None = None) -> None:
        """Apply the staged changes (after every block of the request validated).

        ``write(block, fn)`` applies ``fn`` to the block and, during a pending
        snapshot cut, to the cut's copy too (``PSServer.write_block``).
        """
        if not self.changed:
            return
        if write is None:
            self.apply_to(self._blk)
        else:
            write(self._blk, self.apply_to)

    @property
    def source(self) -> DenseBlock | SparseBlock:
        """The block this view was made from."""
        return self._blk

    def apply_to(self, blk: DenseBlock | SparseBlock) -> None:
        """Apply the staged changes to ``blk``: the source block, or a copy of it
        (a snapshot cut's), which gets copies of any replaced arrays."""
        own = blk is self._blk
        if isinstance(blk, DenseBlock):
            if self._data is not None:
                blk.data = self._data if own else self._data.copy()
            for r, c, v in self._writes:
                K.scatter_coo(blk.own(), r, c, v, False)
            blk.version += 1
            return
        if self._reset is not None:
            value, init = self._reset
            blk.fill(value)
            if init is not None:
                blk.init = init
        if self._replace is not None:
            k, v = self._replace
            if not own:
                k, v = k.copy(), v.copy()
            blk.keys, blk.vals, blk.n = k, v, int(k.shape[0])
        elif self._values is not None:
            if own:
                blk.vals[: blk.n] = self._values
            else:  # the copy may hold other keys: set ours by key
                src: SparseBlock = self._blk  # type: ignore[assignment]
                r, c = np.divmod(src.keys[: src.n], src.shape[1])
                blk.update_coo(r, c, self._values, add=False)
        if self._default is not _KEEP:
            blk.default = self._default
        for r, c, v in self._writes:
            blk.update_coo(r, c, v, add=False)
        blk.version += 1
