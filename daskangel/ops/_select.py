"""Selections: argmax, top-k per row, rows by index, column get / update.

``Argmax`` and ``TopK`` break ties towards the smaller column (as NumPy's
``argmax`` and a stable sort do).  On sparse arrays unstored entries take part
with the default value they read as, at their true columns.

Example
-------
>>> TopK(k=2).k
2
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ..errors import InvalidArgumentError, InvalidTypeError
from ..psarray import ArrayMeta, Partition
from ..psarray._layout import hash_columns
from ..psarray._routing import check_size, normalize_index, plan_axis
from . import _kernels as K
from ._base import GetFunc, UpdateFunc
from ._maps import refuse_lazy

__all__ = ["Argmax", "GetCols", "GetRows", "TopK", "UpdateCols"]


def _candidates(p: Partition, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per local row, the block's ``k`` best ``(values, global cols)`` (ties: smaller col).

    Rows with fewer than ``k`` entries in the block are padded with column -1.
    """
    if not p.sparse:
        a = p.array
        kk = min(k, a.shape[1])
        order = np.argsort(
            -a if a.dtype.kind == "f" else -a.astype(np.int64), axis=1, kind="stable"
        )
        idx = order[:, :kk]
        vals = np.take_along_axis(a, idx, axis=1)
        cols = p.global_cols()[idx]
        if kk < k:
            vals = np.pad(vals, ((0, 0), (0, k - kk)))
            cols = np.pad(cols, ((0, 0), (0, k - kk)), constant_values=-1)
        return vals, cols
    refuse_lazy([p])
    r, c, v = p.entries()
    free = K.first_free(
        p.keys, p.shape[0], p.shape[1], p.hashed, p.n_col_blocks, p.block % p.n_col_blocks, k
    )
    fr, fk = np.nonzero(free >= 0)
    all_r = np.concatenate([r, fr])
    all_c = np.concatenate([c, free[fr, fk]])
    all_v = np.concatenate([v, np.full(fr.shape[0], p.default, p.dtype)])
    neg = -all_v if all_v.dtype.kind == "f" else -all_v.astype(np.int64)
    order = np.lexsort((all_c, neg, all_r))
    all_r, all_c, all_v = all_r[order], all_c[order], all_v[order]
    starts = np.searchsorted(all_r, np.arange(p.shape[0]))
    rank = np.arange(all_r.shape[0]) - starts[all_r]
    keep = rank < k
    vals = np.zeros((p.shape[0], k), p.dtype)
    cols = np.full((p.shape[0], k), -1, np.int64)
    vals[all_r[keep], rank[keep]] = all_v[keep]
    cols[all_r[keep], rank[keep]] = p.global_cols(all_c[keep])
    return vals, cols


def _best(vals: np.ndarray, cols: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the ``k`` best of the candidates (padding -1 columns sort last)."""
    neg = -vals.astype(np.float64) if vals.dtype.kind == "f" else -vals.astype(np.int64)
    big = np.where(cols < 0, np.iinfo(np.int64).max, cols)
    pad = (cols < 0).astype(np.int8)
    order = np.lexsort((big, neg, pad), axis=-1)[:, :k]
    return np.take_along_axis(vals, order, axis=1), np.take_along_axis(cols, order, axis=1)


class _Ranked(GetFunc):
    __slots__ = ()

    def k_of(self) -> int:
        return 1

    def partition_get(self, *parts: Partition, **params: Any) -> dict[str, Any]:
        p = parts[0]
        vals, cols = _candidates(p, self.k_of())
        return {"row0": p.row0, "vals": vals, "cols": cols}

    def gather(self, partials: dict[int, Any], metas: list[ArrayMeta]) -> tuple[Any, Any]:
        m = metas[0]
        k = self.k_of()
        per_row: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {}
        for part in partials.values():
            per_row.setdefault(int(part["row0"]), []).append(
                (np.asarray(part["vals"]), np.asarray(part["cols"]))
            )
        vals = np.zeros((m.shape[0], k), m.dtype)
        cols = np.full((m.shape[0], k), -1, np.int64)
        for r0, cands in per_row.items():
            v = np.concatenate([c[0] for c in cands], axis=1).astype(m.dtype)
            c = np.concatenate([c[1] for c in cands], axis=1)
            bv, bc = _best(v, c, k)
            vals[r0 : r0 + bv.shape[0]] = bv
            cols[r0 : r0 + bc.shape[0]] = bc
        return vals, cols


@dataclass(frozen=True)
class Argmax(_Ranked):
    """Index of the largest value per row (``axis=1``) or of the whole array.

    For ``axis=None`` the index is flat (``row * n_cols + col``), as
    ``numpy.argmax``; a 1-D array gives its column.
    """

    axis: int | None = None

    def check(self, metas: list[ArrayMeta]) -> None:
        super().check(metas)
        ok = (None, 0, -1) if metas[0].ndim == 1 else (None, 1, -1)
        if self.axis not in ok:
            raise InvalidArgumentError(
                f"axis: expected one of {ok} for this array, got {self.axis!r}"
            )

    def merge(self, partials: dict[int, Any], metas: list[ArrayMeta]) -> Any:
        vals, cols = self.gather(partials, metas)
        m = metas[0]
        if self.axis is None or m.ndim == 1:
            flat = np.arange(m.shape[0]) * m.shape[1] + cols[:, 0]
            best = _best(vals[:, :1].T, flat[None, :], 1)[1]
            return np.int64(best[0, 0])
        return cols[:, 0]

    def output(self, metas: list[ArrayMeta]) -> Any:
        m = metas[0]
        if self.axis is None or m.ndim == 1:
            return (), np.int64
        return (m.shape[0],), np.int64


@dataclass(frozen=True)
class TopK(_Ranked):
    """The ``k`` largest values of each row and their columns, largest first.

    Returns ``(values, cols)`` of shape ``(n_rows, k)`` (``(k,)`` for a 1-D
    array); ``k`` larger than the row is cut to the row length.
    """

    k: int = 1

    def k_of(self) -> int:
        return int(self.k)

    def check(self, metas: list[ArrayMeta]) -> None:
        super().check(metas)
        if int(self.k) < 1:
            raise InvalidArgumentError(f"k: expected a positive integer, got {self.k!r}")
        check_size("TopK", metas[0].shape[0] * int(self.k) * 16)

    def merge(self, partials: dict[int, Any], metas: list[ArrayMeta]) -> Any:
        vals, cols = self.gather(partials, metas)
        kk = min(int(self.k), metas[0].shape[1])
        vals, cols = vals[:, :kk], cols[:, :kk]
        if metas[0].ndim == 1:
            return vals[0], cols[0]
        return vals, cols

    def output(self, metas: list[ArrayMeta]) -> Any:
        m = metas[0]
        kk = min(int(self.k), m.shape[1])
        shape = (kk,) if m.ndim == 1 else (m.shape[0], kk)
        return [(shape, m.dtype), (shape, np.int64)]


def _block_cols(p: Partition) -> np.ndarray:
    """Local columns of a block (for a hash block: the global columns hashing to it)."""
    if not p.hashed:
        return np.arange(p.shape[1], dtype=np.int64)
    allc = np.arange(p.n_cols, dtype=np.int64)
    return allc[hash_columns(allc, p.n_col_blocks) == p.block % p.n_col_blocks]


def _grid(p: Partition, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    if not p.sparse:
        return p.array[np.ix_(rows, cols)]
    rr = np.repeat(rows, cols.shape[0])
    cc = np.tile(cols, rows.shape[0])
    return p.read(rr, cc).reshape(rows.shape[0], cols.shape[0])


@dataclass(frozen=True)
class GetRows(GetFunc):
    """Pull rows by index: ``(len(rows), n_cols)`` (Angel ``GetRows``)."""

    rows: Any = None

    def _rows(self, metas: list[ArrayMeta]) -> np.ndarray:
        idx, _ = normalize_index("rows", self.rows, metas[0].shape[0])
        return np.arange(metas[0].shape[0]) if idx is None else idx

    def check(self, metas: list[ArrayMeta]) -> None:
        super().check(metas)
        check_size("GetRows", self._rows(metas).shape[0] * metas[0].shape[1] * metas[0].itemsize)

    def params(self) -> dict[str, Any]:
        return {}

    def split(self, metas: list[ArrayMeta]) -> dict[int, dict[str, Any]]:
        lay = metas[0].layout
        plan = plan_axis(lay, "rows", self._rows(metas), metas[0].shape[0])
        out = {}
        for rb, loc, pos in zip(plan.blocks, plan.local, plan.out, strict=True):
            rows = np.arange(*lay.block_rows(rb * lay.n_col_blocks)) - lay.row_bounds[rb]
            loc = rows if loc is None else loc
            p = np.arange(pos.start, pos.stop) if isinstance(pos, slice) else pos
            for c in range(lay.n_col_blocks):
                out[rb * lay.n_col_blocks + c] = {"rows": loc, "pos": p}
        return out

    def partition_get(self, *parts: Partition, **params: Any) -> dict[str, Any]:
        p = parts[0]
        cols = _block_cols(p)
        return {
            "pos": params["pos"],
            "cols": p.global_cols(cols),
            "vals": _grid(p, np.asarray(params["rows"], np.int64), cols),
        }

    def merge(self, partials: dict[int, Any], metas: list[ArrayMeta]) -> Any:
        m = metas[0]
        out = np.zeros((self._rows(metas).shape[0], m.shape[1]), m.dtype)
        for part in partials.values():
            out[np.ix_(np.asarray(part["pos"]), np.asarray(part["cols"]))] = part["vals"]
        return out

    def output(self, metas: list[ArrayMeta]) -> Any:
        return (self._rows(metas).shape[0], metas[0].shape[1]), metas[0].dtype


class _Cols:
    """Routing of a column selection to column blocks (shared by get and update)."""

    __slots__ = ()

    def _cols(self, metas: list[ArrayMeta]) -> np.ndarray:
        idx, _ = normalize_index("cols", getattr(self, "cols", None), metas[0].shape[1])
        return np.arange(metas[0].shape[1]) if idx is None else idx

    def _plan(self, metas: list[ArrayMeta]) -> dict[int, dict[str, Any]]:
        lay = metas[0].layout
        plan = plan_axis(lay, "cols", self._cols(metas), metas[0].shape[1])
        out = {}
        for cb, loc, pos in zip(plan.blocks, plan.local, plan.out, strict=True):
            p = np.arange(pos.start, pos.stop) if isinstance(pos, slice) else pos
            if loc is None:
                loc = np.arange(*lay.block_cols(cb)) - lay.col_bounds[cb]
            for r in range(lay.n_row_blocks):
                out[r * lay.n_col_blocks + cb] = {"cols": loc, "pos": p}
        return out


@dataclass(frozen=True)
class GetCols(_Cols, GetFunc):
    """Pull columns by index: ``(n_rows, len(cols))`` (Angel ``GetColsFunc``)."""

    cols: Any = None

    def check(self, metas: list[ArrayMeta]) -> None:
        super().check(metas)
        check_size("GetCols", self._cols(metas).shape[0] * metas[0].shape[0] * metas[0].itemsize)

    def params(self) -> dict[str, Any]:
        return {}

    def split(self, metas: list[ArrayMeta]) -> dict[int, dict[str, Any]]:
        return self._plan(metas)

    def partition_get(self, *parts: Partition, **params: Any) -> dict[str, Any]:
        p = parts[0]
        rows = np.arange(p.shape[0], dtype=np.int64)
        return {"row0": p.row0, "pos": params["pos"], "vals": _grid(p, rows, params["cols"])}

    def merge(self, partials: dict[int, Any], metas: list[ArrayMeta]) -> Any:
        m = metas[0]
        out = np.zeros((m.shape[0], self._cols(metas).shape[0]), m.dtype)
        for part in partials.values():
            v = np.asarray(part["vals"])
            r0 = int(part["row0"])
            out[r0 : r0 + v.shape[0], np.asarray(part["pos"])] = v
        return out[0] if m.ndim == 1 else out

    def output(self, metas: list[ArrayMeta]) -> Any:
        m = metas[0]
        n = self._cols(metas).shape[0]
        return ((n,) if m.ndim == 1 else (m.shape[0], n)), m.dtype


@dataclass(frozen=True)
class UpdateCols(_Cols, UpdateFunc):
    """Set (or with ``add=True`` add to) whole columns (Angel ``UpdateColsFunc``).

    ``values`` has shape ``(n_rows, len(cols))`` (``(len(cols),)`` for a 1-D array).
    Duplicate columns: the last wins when setting, all are summed when adding.
    """

    arity: ClassVar[tuple[int, int]] = (1, 1)
    cols: Any = None
    values: Any = None
    add: bool = False

    def params(self) -> dict[str, Any]:
        return {"add": self.add}

    def _values(self, metas: list[ArrayMeta]) -> np.ndarray:
        m = metas[0]
        n = self._cols(metas).shape[0]
        want = (n,) if m.ndim == 1 else (m.shape[0], n)
        v = np.asarray(self.values)
        if v.shape != want:
            raise InvalidArgumentError(
                f"values: expected shape {want} (rows x cols), got {v.shape}"
            )
        if v.dtype.kind not in "biuf" or not np.can_cast(v.dtype, m.dtype, "same_kind"):
            raise InvalidTypeError(f"values: cannot cast {v.dtype} to the array's {m.dtype}")
        return v.reshape(m.shape[0], n)

    def check(self, metas: list[ArrayMeta]) -> None:
        super().check(metas)
        self._values(metas)

    def split(self, metas: list[ArrayMeta]) -> dict[int, dict[str, Any]]:
        v = self._values(metas)
        lay = metas[0].layout
        out = self._plan(metas)
        for b, part in out.items():
            r0, r1 = lay.block_rows(b)
            part["values"] = np.ascontiguousarray(v[r0:r1][:, part.pop("pos")])
        return out

    def partition_update(self, *parts: Partition, **params: Any) -> None:
        p = parts[0]
        cols = np.asarray(params["cols"], np.int64)
        vals = np.asarray(params["values"])
        rr = np.repeat(np.arange(p.shape[0], dtype=np.int64), cols.shape[0])
        cc = np.tile(cols, p.shape[0])
        flat = vals.reshape(-1)
        if self.add:
            keys = rr * p.shape[1] + cc
            uniq, inv = np.unique(keys, return_inverse=True)
            summed = np.zeros(uniq.shape[0], np.result_type(vals.dtype, p.dtype))
            np.add.at(summed, inv, flat)
            ur, uc = np.divmod(uniq, p.shape[1])
            p.write(ur, uc, p.read(ur, uc) + summed)
        else:
            p.write(rr, cc, flat)
