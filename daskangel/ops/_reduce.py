"""Reductions: the :class:`Reduce` helper and Angel's aggregate psfs.

Each block reduces to a partial per row (``axis=1``), per column (``axis=0``) or
in whole (``axis=None``), and the caller merges the partials.  Only the
partials cross the wire: a sum of a 10**8 vector moves a few numbers per block.

Float reductions accumulate in float64 and return float64; integer sums return
int64; ``Max`` / ``Min`` / ``Amax`` / ``Amin`` keep the array's dtype.  On sparse
arrays the unstored entries count as the default value they read as.  A 1-D
array reduces to a scalar (``axis`` must be ``None`` or 0).

Example
-------
>>> Sum(axis=1).combine, Max().combine
('sum', 'max')
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ..errors import InvalidArgumentError
from ..psarray import ArrayMeta, Partition
from . import _kernels as K
from ._base import GetFunc
from ._maps import refuse_lazy, union_keys

__all__ = ["Amax", "Amin", "Asum", "Max", "Min", "Nnz", "Norm", "Nrm2", "Reduce", "Sum"]


def _identity(combine: str, dtype: np.dtype) -> Any:
    if combine == "sum":
        return dtype.type(0)
    if dtype.kind == "f":
        return dtype.type(-np.inf if combine == "max" else np.inf)
    info = np.iinfo(dtype)
    return dtype.type(info.min if combine == "max" else info.max)


def _combine(combine: str, a: Any, b: Any) -> Any:
    if combine == "sum":
        return a + b
    return np.maximum(a, b) if combine == "max" else np.minimum(a, b)


def _slot_reduce(combine: str, t: np.ndarray, slots: np.ndarray, n: int, dtype: np.dtype) -> Any:
    if combine == "sum":
        if dtype.kind == "f":
            return np.bincount(slots, weights=t, minlength=n)
        out = np.zeros(n, dtype)
        np.add.at(out, slots, t.astype(dtype))
        return out
    out = np.full(n, _identity(combine, dtype), dtype)
    (np.maximum if combine == "max" else np.minimum).at(out, slots, t.astype(dtype))
    return out


class Reduce(GetFunc):
    """Helper base: reduce co-partitioned arrays element-wise, then along ``axis``.

    Subclasses set ``combine`` (``"sum"``, ``"max"`` or ``"min"``), ``n_inputs``,
    and implement ``transform(*values)`` (element-wise, e.g. ``abs`` or ``x * y``)
    and ``result_dtype(dtype)``; ``finish(result)`` post-processes (e.g. ``sqrt``).
    ``dense_rows(*blocks)`` may give a compiled per-row reduction for ``axis=1``
    and ``None`` on dense blocks.
    """

    __slots__ = ()
    combine: ClassVar[str] = "sum"
    n_inputs: ClassVar[int] = 1

    def transform(self, *values: np.ndarray) -> np.ndarray:
        return values[0]

    def result_dtype(self, dtype: np.dtype) -> np.dtype:
        if self.combine == "sum":
            return np.dtype(np.float64 if dtype.kind == "f" else np.int64)
        return dtype

    def finish(self, result: Any) -> Any:
        return result

    def dense_rows(self, *blocks: np.ndarray) -> np.ndarray | None:
        return None

    # -- caller -------------------------------------------------------------------

    def _axis(self, metas: list[ArrayMeta]) -> int | None:
        axis = getattr(self, "axis", None)
        if metas[0].ndim == 1:
            if axis not in (None, 0, -1):
                raise InvalidArgumentError(
                    f"axis: a 1-D array reduces with axis None or 0, got {axis!r}"
                )
            return None
        if axis is None:
            return None
        if axis not in (0, 1, -1, -2):
            raise InvalidArgumentError(f"axis: expected None, 0 or 1, got {axis!r}")
        return int(axis) % 2

    def check(self, metas: list[ArrayMeta]) -> None:
        if len(metas) != self.n_inputs:
            raise InvalidArgumentError(
                f"arrays: {type(self).__name__} takes {self.n_inputs} arrays, got {len(metas)}"
            )
        if self._axis(metas) == 0 and metas[0].layout.col_mode == "hash":
            raise InvalidArgumentError(
                f"axis: per-column reductions of hash-partitioned {metas[0].name!r} would "
                "return one partial per global column; reduce with axis=1 or None"
            )

    def split(self, metas: list[ArrayMeta]) -> dict[int, dict[str, Any]]:
        ax = self._axis(metas)
        return {b: {"axis": ax} for b in range(metas[0].layout.n_blocks)}

    def _dtype(self, metas: list[ArrayMeta]) -> np.dtype:
        return self.result_dtype(np.result_type(*[m.dtype for m in metas]))

    def output(self, metas: list[ArrayMeta]) -> Any:
        ax = self._axis(metas)
        shape: tuple[int, ...] = () if ax is None else (metas[0].shape[1 - ax],)
        return shape, self._dtype(metas)

    # -- server -------------------------------------------------------------------

    def partition_get(self, *parts: Partition, **params: Any) -> dict[str, Any]:
        axis = params.get("axis")
        p0 = parts[0]
        dtype = self.result_dtype(np.result_type(*[p.dtype for p in parts]))
        off = 0 if axis is None else (p0.row0 if axis == 1 else p0.col0)
        sparse = all(p.sparse for p in parts)
        if not sparse:
            blocks = [p.dense() if p.sparse else p.array for p in parts]
            acc = self.dense_rows(*blocks) if axis != 0 else None
            if acc is not None:
                acc = acc.sum() if axis is None else acc
            else:
                t = self.transform(*blocks)
                if self.combine == "sum":
                    acc = np.sum(t, axis=axis, dtype=dtype)
                else:
                    acc = (np.max if self.combine == "max" else np.min)(t, axis=axis)
            acc = np.asarray(acc).astype(dtype)
            return {"off": off, "acc": acc[()] if acc.ndim == 0 else acc}
        refuse_lazy(list(parts))
        keys = union_keys(list(parts))
        rows, cols = np.divmod(keys, p0.shape[1])
        t = self.transform(*[p.read(rows, cols) for p in parts])
        d = self.transform(*[np.array([p.default], dtype=p.dtype) for p in parts])[0]
        d = np.asarray(d).astype(dtype)
        if axis is None:
            slots, n, width = np.zeros(keys.shape[0], np.int64), 1, p0.shape[0] * p0.shape[1]
        elif axis == 1:
            slots, n, width = rows, p0.shape[0], p0.shape[1]
        else:
            slots, n, width = cols, p0.shape[1], p0.shape[0]
        acc = _slot_reduce(self.combine, t, slots, n, dtype)
        cnt = np.bincount(slots, minlength=n)
        if p0.hashed:  # the block's share of the columns is unknown here: merge adds defaults
            return {"off": off, "acc": acc, "cnt": cnt, "d": d}
        missing = width - cnt
        if self.combine == "sum":
            acc = acc + (missing * d).astype(dtype)
        else:
            acc = np.where(missing > 0, _combine(self.combine, acc, d), acc).astype(dtype)
        return {"off": off, "acc": acc if axis is not None else acc[0]}

    # -- caller again ---------------------------------------------------------------

    def merge(self, partials: dict[int, Any], metas: list[ArrayMeta]) -> Any:
        m = metas[0]
        ax = self._axis(metas)
        dtype = self._dtype(metas)
        n = 1 if ax is None else m.shape[1 - ax]
        out = np.full(n, _identity(self.combine, dtype), dtype)
        cnt = np.zeros(n, np.int64)
        d = None
        for part in partials.values():
            acc = np.asarray(part["acc"], dtype=dtype).reshape(-1)
            o = int(part["off"]) if ax is not None else 0
            out[o : o + acc.shape[0]] = _combine(self.combine, out[o : o + acc.shape[0]], acc)
            if part.get("cnt") is not None:
                c = np.asarray(part["cnt"], dtype=np.int64).reshape(-1)
                cnt[o : o + c.shape[0]] += c
                d = dtype.type(part["d"])
        if d is not None:  # hash-partitioned sparse: unstored entries read as the default
            total = m.shape[0] * m.shape[1] if ax is None else m.shape[ax]
            missing = total - cnt
            if self.combine == "sum":
                out = out + (missing * d).astype(dtype)
            else:
                out = np.where(missing > 0, _combine(self.combine, out, d), out).astype(dtype)
        res = self.finish(out)
        return res[0] if ax is None else res


@dataclass(frozen=True)
class Sum(Reduce):
    """Sum per row (``axis=1``), per column (``axis=0``) or in whole (Angel ``Sum``)."""

    axis: int | None = None

    def dense_rows(self, *blocks: np.ndarray) -> np.ndarray | None:
        return K.row_sum(blocks[0]) if blocks[0].dtype.kind == "f" else None


@dataclass(frozen=True)
class Asum(Reduce):
    """Sum of absolute values, the L1 norm (Angel ``Asum``)."""

    axis: int | None = None

    def transform(self, *values: np.ndarray) -> np.ndarray:
        return np.abs(values[0])

    def dense_rows(self, *blocks: np.ndarray) -> np.ndarray | None:
        return K.row_asum(blocks[0]) if blocks[0].dtype.kind == "f" else None


@dataclass(frozen=True)
class Max(Reduce):
    """Largest value (Angel ``Max``)."""

    combine: ClassVar[str] = "max"
    axis: int | None = None


@dataclass(frozen=True)
class Min(Reduce):
    """Smallest value (Angel ``Min``)."""

    combine: ClassVar[str] = "min"
    axis: int | None = None


@dataclass(frozen=True)
class Amax(Reduce):
    """Largest absolute value (Angel ``Amax``)."""

    combine: ClassVar[str] = "max"
    axis: int | None = None

    def transform(self, *values: np.ndarray) -> np.ndarray:
        return np.abs(values[0])


@dataclass(frozen=True)
class Amin(Reduce):
    """Smallest absolute value (Angel ``Amin``)."""

    combine: ClassVar[str] = "min"
    axis: int | None = None

    def transform(self, *values: np.ndarray) -> np.ndarray:
        return np.abs(values[0])


@dataclass(frozen=True)
class Nnz(Reduce):
    """Number of non-zero entries (Angel ``Nnz``), as int64."""

    axis: int | None = None

    def transform(self, *values: np.ndarray) -> np.ndarray:
        return (values[0] != 0).astype(np.int64)

    def result_dtype(self, dtype: np.dtype) -> np.dtype:
        return np.dtype(np.int64)

    def dense_rows(self, *blocks: np.ndarray) -> np.ndarray | None:
        return K.row_nnz(blocks[0])


@dataclass(frozen=True)
class Nrm2(Reduce):
    """Euclidean (L2) norm (Angel ``Nrm2``), as float64."""

    axis: int | None = None

    def transform(self, *values: np.ndarray) -> np.ndarray:
        v = values[0].astype(np.float64)
        return v * v

    def result_dtype(self, dtype: np.dtype) -> np.dtype:
        return np.dtype(np.float64)

    def finish(self, result: Any) -> Any:
        return np.sqrt(result)

    def dense_rows(self, *blocks: np.ndarray) -> np.ndarray | None:
        return K.row_sumsq(blocks[0]) if blocks[0].dtype.kind == "f" else None


@dataclass(frozen=True)
class Norm(Reduce):
    """L1 (``ord=1``, as ``Asum``) or L2 (``ord=2``, as ``Nrm2``) norm, as float64."""

    ord: int = 2
    axis: int | None = None

    def check(self, metas: list[ArrayMeta]) -> None:
        super().check(metas)
        if self.ord not in (1, 2):
            raise InvalidArgumentError(f"ord: expected 1 or 2, got {self.ord!r}")

    def transform(self, *values: np.ndarray) -> np.ndarray:
        v = np.abs(values[0].astype(np.float64))
        return v if self.ord == 1 else v * v

    def result_dtype(self, dtype: np.dtype) -> np.dtype:
        return np.dtype(np.float64)

    def finish(self, result: Any) -> Any:
        return result if self.ord == 1 else np.sqrt(result)

    def dense_rows(self, *blocks: np.ndarray) -> np.ndarray | None:
        if blocks[0].dtype.kind != "f":
            return None
        return K.row_asum(blocks[0]) if self.ord == 1 else K.row_sumsq(blocks[0])
