"""Dot products: of two co-partitioned arrays, per row pair, or of two rows.

Example
-------
>>> Dot(rows=(0, 3)).n_inputs
2
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ..errors import InvalidArgumentError
from ..psarray import ArrayMeta, Partition
from . import _kernels as K
from ._maps import refuse_lazy
from ._reduce import Reduce

__all__ = ["Dot"]


@dataclass(frozen=True)
class Dot(Reduce):
    """Dot product of two co-partitioned arrays (Angel ``Dot``), as float64 for floats.

    ``axis=None`` (default) sums over everything; ``axis=1`` gives one dot per
    row pair.  ``rows=(i, j)`` gives the dot of row ``i`` of the first array and
    row ``j`` of the second (pass the same array twice for two rows of one
    array); both rows must be in the same row block.
    """

    n_inputs: ClassVar[int] = 2
    axis: int | None = None
    rows: tuple[int, int] | None = None

    def transform(self, *values: np.ndarray) -> np.ndarray:
        x, y = values
        if x.dtype.kind == "f" or y.dtype.kind == "f":
            return x.astype(np.float64) * y
        return x.astype(np.int64) * y

    def dense_rows(self, *blocks: np.ndarray) -> np.ndarray | None:
        x, y = blocks
        if x.dtype.kind == "f" and x.dtype == y.dtype:
            return K.row_dot(x, y)
        return None

    def check(self, metas: list[ArrayMeta]) -> None:
        super().check(metas)
        if self.rows is None:
            return
        if self.axis is not None:
            raise InvalidArgumentError("rows, axis: pass one or the other")
        i, j = (int(r) for r in self.rows)
        lay, n = metas[0].layout, metas[0].shape[0]
        for r in (i, j):
            if not 0 <= r < n:
                raise IndexError(f"rows: row {r} is out of range [0, {n})")
        bi, bj = lay.row_block_of(np.array([i, j]))
        if bi != bj:
            raise InvalidArgumentError(
                f"rows: rows {i} and {j} are in different row blocks ({lay.describe()}); "
                "a row dot needs both in one block"
            )

    def split(self, metas: list[ArrayMeta]) -> dict[int, dict[str, Any]]:
        if self.rows is None:
            return super().split(metas)
        lay = metas[0].layout
        i, j = (int(r) for r in self.rows)
        rb = int(lay.row_block_of(np.array([i]))[0])
        r0 = lay.row_bounds[rb]
        nc = lay.n_col_blocks
        return {rb * nc + c: {"axis": None, "pair": [i - r0, j - r0]} for c in range(nc)}

    def output(self, metas: list[ArrayMeta]) -> Any:
        if self.rows is not None:
            return (), self._dtype(metas)
        return super().output(metas)

    def partition_get(self, *parts: Partition, **params: Any) -> dict[str, Any]:
        pair = params.get("pair")
        if pair is None:
            return super().partition_get(*parts, **params)
        x, y = parts
        i, j = int(pair[0]), int(pair[1])
        dtype = self.result_dtype(np.result_type(x.dtype, y.dtype))
        if not (x.sparse and y.sparse):
            xr = (x.dense() if x.sparse else x.array)[i]
            yr = (y.dense() if y.sparse else y.array)[j]
            return {"off": 0, "acc": np.asarray(self.transform(xr, yr).sum(dtype=dtype))}
        refuse_lazy([x, y])
        w = x.shape[1]
        cols = np.union1d(_row_cols(x, i), _row_cols(y, j)).astype(np.int64)
        t = self.transform(x.read(np.full_like(cols, i), cols), y.read(np.full_like(cols, j), cols))
        acc = np.asarray(t.sum(dtype=dtype))
        d = np.asarray(self.transform(np.array([x.default]), np.array([y.default]))[0]).astype(
            dtype
        )
        if x.hashed:
            return {"off": 0, "acc": acc, "cnt": np.array([cols.shape[0]]), "d": d}
        return {"off": 0, "acc": acc + (w - cols.shape[0]) * d}

    def merge(self, partials: dict[int, Any], metas: list[ArrayMeta]) -> Any:
        if self.rows is None:
            return super().merge(partials, metas)
        dtype = self._dtype(metas)
        total = dtype.type(0)
        cnt, d = 0, None
        for part in partials.values():
            total = total + dtype.type(np.asarray(part["acc"]).reshape(-1)[0])
            if part.get("cnt") is not None:
                cnt += int(np.asarray(part["cnt"]).reshape(-1)[0])
                d = dtype.type(part["d"])
        if d is not None:
            total = total + (metas[0].shape[1] - cnt) * d
        return dtype.type(total)


def _row_cols(p: Partition, r: int) -> np.ndarray:
    keys = p.keys
    w = p.shape[1]
    lo, hi = np.searchsorted(keys, [r * w, (r + 1) * w])
    return keys[lo:hi] - r * w
