"""Initialisation psfs: fill, reset, random, Xavier / Kaiming, eye, diag.

Random psfs use the same counter-based generator as ``ps.random``: entry
``(r, c)`` depends only on the seed and its global flat index ``r * n_cols + c``,
so the values are identical whatever the partitioning, and
``ps.psf(ops.RandomUniform(0, 1, seed=3), a)`` equals ``ps.random(..., seed=3)``.
On sparse arrays they switch the blocks to lazy initialisation: stored entries
are dropped and each key draws its value when first touched.

Fan-in and fan-out of a ``(rows, cols)`` matrix are ``cols`` and ``rows`` (the
convention of a ``(out, in)`` weight matrix); pass ``fan_in`` / ``fan_out`` to
override.

Example
-------
>>> XavierUniform(seed=1).bound(fan_in=4, fan_out=2)
1.0
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import InvalidArgumentError, InvalidTypeError
from ..psarray import ArrayMeta, InitSpec, Partition
from ..psarray._layout import hash_columns
from ._base import UpdateFunc

__all__ = [
    "Diag",
    "Eye",
    "Fill",
    "KaimingNormal",
    "KaimingUniform",
    "RandomNormal",
    "RandomUniform",
    "Reset",
    "XavierNormal",
    "XavierUniform",
]


def _cast_scalar(p: Partition, value: float) -> Any:
    if p.dtype.kind in "iu" and float(value) != int(value):
        raise InvalidTypeError(f"value: {value!r} is not an integer, array {p.name!r} is {p.dtype}")
    return p.dtype.type(value)


@dataclass(frozen=True)
class Fill(UpdateFunc):
    """Set every entry to ``value`` (Angel ``Fill``); a sparse array drops its keys."""

    value: float = 0.0

    def partition_update(self, *parts: Partition, **params: Any) -> None:
        (p,) = parts
        v = _cast_scalar(p, self.value)
        if p.sparse:
            p.reset(v)
        else:
            p.assign(np.full(p.shape, v, dtype=p.dtype))


@dataclass(frozen=True)
class Reset(Fill):
    """Set every entry to zero (Angel ``Reset`` / ``Zero``)."""

    value: float = 0.0


def _draw(p: Partition, init: InitSpec) -> None:
    if p.sparse:
        p.reset(0.0, init=InitSpec(init.kind, init.a, init.b, init.seed, lazy=True))
        return
    index = (p.global_rows()[:, None] * p.n_cols + p.global_cols()[None, :]).ravel()
    p.assign(init.draw(index, p.dtype).reshape(p.shape))


@dataclass(frozen=True)
class RandomUniform(UpdateFunc):
    """Uniform on ``[low, high)`` (Angel ``RandomUniform``), partition-independent."""

    low: float = 0.0
    high: float = 1.0
    seed: int = 0

    def partition_update(self, *parts: Partition, **params: Any) -> None:
        _draw(parts[0], InitSpec("uniform", float(self.low), float(self.high), int(self.seed)))


@dataclass(frozen=True)
class RandomNormal(UpdateFunc):
    """Normal with ``mean`` and ``std`` (Angel ``RandomNormal``), partition-independent."""

    mean: float = 0.0
    std: float = 1.0
    seed: int = 0

    def partition_update(self, *parts: Partition, **params: Any) -> None:
        _draw(parts[0], InitSpec("normal", float(self.mean), float(self.std), int(self.seed)))


class _Fan(UpdateFunc):
    __slots__ = ()

    def fans(self, p: Partition) -> tuple[int, int]:
        fan_in = getattr(self, "fan_in", None) or p.n_cols
        fan_out = getattr(self, "fan_out", None) or p.n_rows
        return int(fan_in), int(fan_out)


@dataclass(frozen=True)
class _Xavier(_Fan):
    gain: float = 1.0
    seed: int = 0
    fan_in: int | None = None
    fan_out: int | None = None


@dataclass(frozen=True)
class XavierUniform(_Xavier):
    """Glorot uniform: ``U(-b, b)``, ``b = gain * sqrt(6 / (fan_in + fan_out))``."""

    def bound(self, fan_in: int, fan_out: int) -> float:
        return float(self.gain * math.sqrt(6.0 / (fan_in + fan_out)))

    def partition_update(self, *parts: Partition, **params: Any) -> None:
        b = self.bound(*self.fans(parts[0]))
        _draw(parts[0], InitSpec("uniform", -b, b, int(self.seed)))


@dataclass(frozen=True)
class XavierNormal(_Xavier):
    """Glorot normal: ``N(0, s)``, ``s = gain * sqrt(2 / (fan_in + fan_out))``."""

    def partition_update(self, *parts: Partition, **params: Any) -> None:
        fi, fo = self.fans(parts[0])
        s = self.gain * math.sqrt(2.0 / (fi + fo))
        _draw(parts[0], InitSpec("normal", 0.0, float(s), int(self.seed)))


@dataclass(frozen=True)
class _Kaiming(_Fan):
    gain: float = math.sqrt(2.0)
    mode: str = "fan_in"
    seed: int = 0
    fan_in: int | None = None
    fan_out: int | None = None

    def check(self, metas: list[ArrayMeta]) -> None:
        super().check(metas)
        if self.mode not in ("fan_in", "fan_out"):
            raise InvalidArgumentError(f"mode: expected 'fan_in' or 'fan_out', got {self.mode!r}")

    def fan(self, p: Partition) -> int:
        """The fan ``mode`` picks."""
        fi, fo = self.fans(p)
        return fi if self.mode == "fan_in" else fo


@dataclass(frozen=True)
class KaimingUniform(_Kaiming):
    """He uniform: ``U(-b, b)``, ``b = gain * sqrt(3 / fan)`` (``mode`` picks the fan)."""

    def partition_update(self, *parts: Partition, **params: Any) -> None:
        b = self.gain * math.sqrt(3.0 / self.fan(parts[0]))
        _draw(parts[0], InitSpec("uniform", -float(b), float(b), int(self.seed)))


@dataclass(frozen=True)
class KaimingNormal(_Kaiming):
    """He normal: ``N(0, gain / sqrt(fan))`` (``mode`` picks the fan)."""

    def partition_update(self, *parts: Partition, **params: Any) -> None:
        s = self.gain / math.sqrt(self.fan(parts[0]))
        _draw(parts[0], InitSpec("normal", 0.0, float(s), int(self.seed)))


def _diagonal(p: Partition, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Local ``(rows, cols)`` of the block's entries on global diagonal ``k``."""
    g_rows = p.global_rows()
    g_cols = g_rows + k
    ok = (g_cols >= 0) & (g_cols < p.n_cols)
    if p.hashed:
        ok &= hash_columns(np.where(ok, g_cols, 0), p.n_col_blocks) == p.block % p.n_col_blocks
        local_c = g_cols
    else:
        local_c = g_cols - p.col0
        ok &= (local_c >= 0) & (local_c < p.shape[1])
    rows = np.flatnonzero(ok)
    return rows, local_c[rows]


def _set_diagonal(p: Partition, k: int, values: np.ndarray) -> None:
    """Array becomes zero except ``values`` (indexed by local row) on diagonal ``k``."""
    rows, cols = _diagonal(p, k)
    if p.sparse:
        p.reset(0.0)
        p.replace(rows * p.shape[1] + cols, values[rows])
    else:
        out = np.zeros(p.shape, dtype=p.dtype)
        out[rows, cols] = values[rows].astype(p.dtype)
        p.assign(out)


@dataclass(frozen=True)
class Eye(UpdateFunc):
    """Ones on diagonal ``k`` and zeros elsewhere, as ``numpy.eye(n, m, k)``."""

    k: int = 0

    def partition_update(self, *parts: Partition, **params: Any) -> None:
        p = parts[0]
        _set_diagonal(p, int(self.k), np.ones(p.shape[0], dtype=p.dtype))


@dataclass(frozen=True)
class Diag(UpdateFunc):
    """``values`` on diagonal ``k`` and zeros elsewhere, as ``numpy.diag(values, k)``
    cut to the array's shape (``values[i]`` goes to row ``i``)."""

    values: Any = None
    k: int = 0

    def check(self, metas: list[ArrayMeta]) -> None:
        super().check(metas)
        v = np.asarray(self.values)
        m = metas[0]
        n = m.shape[0]
        if v.ndim != 1 or v.shape[0] != n:
            raise InvalidArgumentError(
                f"values: expected {n} values (one per row), got shape {v.shape}"
            )

    def split(self, metas: list[ArrayMeta]) -> dict[int, dict[str, Any]]:
        v = np.asarray(self.values)
        lay = metas[0].layout
        out = {}
        for b in range(lay.n_blocks):
            r0, r1 = lay.block_rows(b)
            out[b] = {"values": np.ascontiguousarray(v[r0:r1])}
        return out

    def params(self) -> dict[str, Any]:
        return {"k": self.k}  # the values travel per block

    def partition_update(self, *parts: Partition, **params: Any) -> None:
        _set_diagonal(parts[0], int(self.k), np.asarray(params["values"]))
