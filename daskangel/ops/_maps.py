"""Element-wise map helpers and Angel's function-taking maps (Map, Zip2Map, ...).

Helper bases to subclass (Angel's map and zip-map bases):

* :class:`ElementMap` - ``apply(x)`` on every element;
* :class:`ElementMapWithIndex` - ``apply(x, rows, cols)`` with global indices;
* :class:`ZipMap` - ``apply(x, y)`` or ``apply(x, y, z)`` over co-partitioned arrays;
* :class:`RowMap` - ``apply_rows(block, rows)`` on whole rows.

Operand rule: a map over ``n`` inputs called with ``n`` arrays writes the first
(``a.psf(ops.Add(), b)`` is ``a += b``); called with ``n + 1`` arrays it writes
the last (``ps.psf(ops.Add(), a, b, out)`` is ``out = a + b``).  The BLAS-1
psfs keep BLAS order: ``ps.psf(ops.Axpy(alpha), x, y)`` is ``y += alpha * x`` and
``ps.psf(ops.Copy(), x, y)`` is ``y = x``.

Sparse arrays: a map is applied to the stored entries and to the default that
unstored entries read as (over the union of the inputs' stored keys for zips).
A sparse output needs sparse inputs.  Sparse arrays with lazy random
initialisation are refused (their unstored entries are not one value).

Example
-------
>>> ZipMap.writes_rule(2, 2), ZipMap.writes_rule(2, 3)
((0,), (2,))
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ..errors import InvalidArgumentError, InvalidTypeError
from ..psarray import ArrayMeta, Partition
from ._base import UpdateFunc
from ._functions import get_function

__all__ = [
    "ElementMap",
    "ElementMapWithIndex",
    "Map",
    "MapWithIndex",
    "RowMap",
    "Zip2Map",
    "Zip2MapWithIndex",
    "Zip3Map",
    "Zip3MapWithIndex",
    "ZipMap",
    "refuse_lazy",
    "zip_apply",
]


def refuse_lazy(parts: list[Partition]) -> None:
    """Raise for sparse blocks with lazy random init (their unstored keys vary)."""
    for p in parts:
        if p.lazy:
            raise InvalidArgumentError(
                f"array {p.name!r} is sparse with lazy random initialisation: its unstored "
                "entries are not one value, so this psf is undefined on them; touch the "
                "keys first (get/increment) or use a dense array"
            )


def union_keys(parts: list[Partition]) -> np.ndarray:
    """Sorted union of the stored keys of sparse blocks."""
    keys = parts[0].keys
    for p in parts[1:]:
        keys = np.union1d(keys, p.keys)
    return np.asarray(keys, dtype=np.int64)


def zip_apply(
    fn: Callable[..., Any], ins: list[Partition], out: Partition, with_index: bool = False
) -> None:
    """Stage ``out = fn(*ins)`` element-wise (``fn(*ins, rows, cols)`` with indices)."""
    if not out.sparse:
        vals = [p.dense() if p.sparse else p.array for p in ins]
        if with_index:
            vals += [out.global_rows()[:, None], out.global_cols()[None, :]]
        out.assign(fn(*vals))
        return
    dense = [p.name for p in ins if not p.sparse]
    if dense:
        raise InvalidTypeError(
            f"array {out.name!r} is sparse but input {dense[0]!r} is dense; "
            "write the result into a dense array"
        )
    if with_index:
        raise InvalidTypeError(
            f"array {out.name!r} is sparse: a map with indices is undefined on its "
            "unstored entries; use a dense array"
        )
    refuse_lazy(ins)
    keys = union_keys(ins)
    rows, cols = np.divmod(keys, out.shape[1])
    new = np.asarray(fn(*[p.read(rows, cols) for p in ins]))
    default = np.asarray(fn(*[np.array([p.default], dtype=p.dtype) for p in ins]))
    out.reset()
    out.replace(keys, new, default=default.ravel()[0])


class _Apply(UpdateFunc):
    """Shared operand handling of the map helpers."""

    __slots__ = ()
    n_inputs: ClassVar[int] = 1
    with_index: ClassVar[bool] = False

    @classmethod
    def writes_rule(cls, n_inputs: int, n_arrays: int) -> tuple[int, ...]:
        return (0,) if n_arrays == n_inputs else (n_arrays - 1,)

    def check(self, metas: list[ArrayMeta]) -> None:
        n = self.n_inputs
        if len(metas) not in (n, n + 1):
            raise InvalidArgumentError(
                f"arrays: {type(self).__name__} takes {n} input arrays and optionally an "
                f"output array, got {len(metas)} arrays"
            )

    def writes_for(self, n_arrays: int) -> tuple[int, ...]:
        return self.writes_rule(self.n_inputs, n_arrays)

    def apply(self, *values: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must implement apply")

    def partition_update(self, *parts: Partition, **params: Any) -> None:
        ins = list(parts[: self.n_inputs])
        out = parts[-1] if len(parts) > self.n_inputs else parts[0]
        zip_apply(self.apply, ins, out, self.with_index)


class ElementMap(_Apply):
    """Helper base: ``apply(x)`` returns the new value of every element."""

    __slots__ = ()


class ElementMapWithIndex(_Apply):
    """Helper base: ``apply(x, rows, cols)`` with global row / column indices (dense only)."""

    __slots__ = ()
    with_index: ClassVar[bool] = True


class ZipMap(_Apply):
    """Helper base: ``apply(x, y)`` (``n_inputs = 2``) or ``apply(x, y, z)`` (3)."""

    __slots__ = ()
    n_inputs: ClassVar[int] = 2


class RowMap(UpdateFunc):
    """Helper base: ``apply_rows(block, rows)`` maps whole rows (dense arrays).

    ``block`` is ``(k, n_cols)`` and ``rows`` the ``k`` global row indices; the
    array must keep whole rows in each block (e.g. ``RangePartitioner``).  With
    two arrays the result goes to the second.
    """

    __slots__ = ()
    arity: ClassVar[tuple[int, int]] = (1, 2)

    def check(self, metas: list[ArrayMeta]) -> None:
        super().check(metas)
        lay = metas[0].layout
        if lay.col_mode != "range" or lay.n_col_blocks != 1:
            raise InvalidArgumentError(
                f"arrays: {type(self).__name__} maps whole rows, but {metas[0].name!r} cuts "
                f"rows into column blocks ({lay.describe()}); use RangePartitioner"
            )

    def writes_for(self, n_arrays: int) -> tuple[int, ...]:
        return (n_arrays - 1,)

    def apply_rows(self, block: np.ndarray, rows: np.ndarray) -> np.ndarray:
        raise NotImplementedError(f"{type(self).__name__} must implement apply_rows")

    def partition_update(self, *parts: Partition, **params: Any) -> None:
        x, out = parts[0], parts[-1]
        out.assign(self.apply_rows(x.dense(), x.global_rows()))


# -- maps with a registered function (Angel's Map / Zip2Map / ...) ------------------------


def _fn(func: Any) -> Callable[..., Any]:
    return func if callable(func) else get_function(str(func))


@dataclass(frozen=True)
class Map(ElementMap):
    """``x = func(x, *args)`` with a registered function name (Angel ``Map``)."""

    func: Any
    args: tuple[Any, ...] = ()

    def apply(self, x: Any) -> Any:  # type: ignore[override]
        return _fn(self.func)(x, *self.args)


@dataclass(frozen=True)
class MapWithIndex(ElementMapWithIndex):
    """``x = func(x, rows, cols, *args)`` (Angel ``MapWithIndex``; dense arrays)."""

    func: Any
    args: tuple[Any, ...] = ()

    def apply(self, x: Any, rows: Any, cols: Any) -> Any:  # type: ignore[override]
        return _fn(self.func)(x, rows, cols, *self.args)


@dataclass(frozen=True)
class Zip2Map(ZipMap):
    """``a = func(a, b, *args)`` or ``out = func(a, b, *args)`` (Angel ``Zip2Map``)."""

    func: Any
    args: tuple[Any, ...] = ()

    def apply(self, x: Any, y: Any) -> Any:  # type: ignore[override]
        return _fn(self.func)(x, y, *self.args)


@dataclass(frozen=True)
class Zip3Map(ZipMap):
    """``a = func(a, b, c, *args)`` or into a fourth array (Angel ``Zip3Map``)."""

    n_inputs: ClassVar[int] = 3
    func: Any
    args: tuple[Any, ...] = ()

    def apply(self, x: Any, y: Any, z: Any) -> Any:  # type: ignore[override]
        return _fn(self.func)(x, y, z, *self.args)


@dataclass(frozen=True)
class Zip2MapWithIndex(ZipMap):
    """``func(a, b, rows, cols, *args)`` (Angel ``Zip2MapWithIndex``; dense arrays)."""

    with_index: ClassVar[bool] = True
    func: Any
    args: tuple[Any, ...] = ()

    def apply(self, x: Any, y: Any, rows: Any, cols: Any) -> Any:  # type: ignore[override]
        return _fn(self.func)(x, y, rows, cols, *self.args)


@dataclass(frozen=True)
class Zip3MapWithIndex(ZipMap):
    """``func(a, b, c, rows, cols, *args)`` (Angel ``Zip3MapWithIndex``; dense arrays)."""

    n_inputs: ClassVar[int] = 3
    with_index: ClassVar[bool] = True
    func: Any
    args: tuple[Any, ...] = ()

    def apply(self, x: Any, y: Any, z: Any, rows: Any, cols: Any) -> Any:  # type: ignore[override]
        return _fn(self.func)(x, y, z, rows, cols, *self.args)
