"""The centre update of Lloyd's algorithm, run by the servers next to the centres.

The centres array ``C`` and the accumulator ``S`` are co-partitioned
``(k, d + 1)`` arrays (columns ``0 .. d-1``: the centres / the per-cluster sums
the tasks pushed; column ``d``: the cluster sizes / the counts).  With every
task's sums and counts in ``S``, one task runs ``ps.psf(Recenter(...), C, S)``
and each server, on its own columns, sets ``C = S / n`` for the clusters that
got rows, keeps the old centre of an empty one unless it is re-seeded (its new
row given, cut per block by :meth:`Recenter.split`), writes the counts into
column ``d`` and zeroes ``S`` for the next iteration.  Only the ``k`` counts and
the re-seeded rows travel; the sums never leave the servers.

Example
-------
>>> import numpy as np
>>> C = np.array([[0.0, 0.0, 5.0], [1.0, 1.0, 5.0]])
>>> S = np.array([[4.0, 2.0, 2.0], [0.0, 0.0, 0.0]])
>>> recentred(C, S, np.array([2.0, 0.0]), np.array([0, 1, 2]), 2).tolist()
[[2.0, 1.0, 2.0], [1.0, 1.0, 0.0]]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from ...ops import GetFunc, UpdateFunc

__all__ = ["Recenter", "Shift", "recentred"]


def recentred(
    C: np.ndarray, S: np.ndarray, counts: np.ndarray, cols: np.ndarray, d: int
) -> np.ndarray:
    """New values of a block of ``C`` (global columns ``cols``) from its sums ``S``."""
    n = counts[:, None]
    new = np.where(n > 0, S / np.where(n > 0, n, 1.0), C)
    is_count = cols == d
    if is_count.any():
        new[:, is_count] = n
    return new


def _split_rows(
    rows: np.ndarray | None, reseed: np.ndarray, d: int, metas: list[Any]
) -> dict[int, dict[str, Any]]:
    """Each block's columns of the re-seeded rows."""
    lay = metas[0].layout
    out: dict[int, dict[str, Any]] = {}
    for b in range(lay.n_blocks):
        c0, c1 = lay.block_cols(b)
        c1 = max(c0, min(c1, d))
        part = np.zeros((0, 0)) if rows is None or not len(reseed) else rows[:, c0:c1]
        out[b] = {"reseed_rows": np.asarray(part, np.float64)}
    return out


def _new_block(
    Cp: Any, Sp: Any, counts: np.ndarray, d: int, reseed: np.ndarray, params: dict[str, Any]
) -> np.ndarray:
    """New values of one block of the centres (module docstring)."""
    r0, k_b = Cp.row0, Cp.shape[0]
    cols = Cp.global_cols()
    n = np.asarray(counts, np.float64)[r0 : r0 + k_b]
    new = recentred(np.asarray(Cp.array, np.float64), np.asarray(Sp.array, np.float64),
                    n, cols, int(d))  # fmt: skip
    reseed = np.asarray(reseed, np.int64)
    vals = np.asarray(params.get("reseed_rows", np.zeros((0, 0))), np.float64)
    if reseed.size and vals.size:
        mine = np.flatnonzero((reseed >= r0) & (reseed < r0 + k_b))
        centre = np.flatnonzero(cols < d)
        new[np.ix_(reseed[mine] - r0, centre)] = vals[mine][:, : centre.size]
    return new


@dataclass(frozen=True, eq=False)
class Recenter(UpdateFunc):
    """``C = S / counts`` on every server, re-seeded rows set, ``S = 0`` (module docstring).

    ``counts``: ``(k,)`` rows per cluster this iteration; ``reseed``: the
    clusters to move; ``rows``: their new centres ``(len(reseed), d)``, sent to
    each server as its columns only.
    """

    counts: np.ndarray
    n_features: int
    reseed: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    rows: np.ndarray | None = field(default=None, repr=False)

    arity: ClassVar[tuple[int, int]] = (2, 2)
    _local: ClassVar[tuple[str, ...]] = ("rows",)

    def params(self) -> dict[str, Any]:
        return {k: v for k, v in super().params().items() if k not in self._local}

    def writes_for(self, n_arrays: int) -> tuple[int, ...]:
        return (0, 1)

    def split(self, metas: list[Any]) -> dict[int, dict[str, Any]]:
        return _split_rows(self.rows, self.reseed, self.n_features, metas)

    def partition_update(self, *parts: Any, **params: Any) -> None:
        Cp, Sp = parts
        Cp.assign(_new_block(Cp, Sp, self.counts, self.n_features, self.reseed, params))
        Sp.assign(np.zeros(Sp.shape, Sp.dtype))


@dataclass(frozen=True, eq=False)
class Shift(GetFunc):
    """Squared distance the centres would move under :class:`Recenter` with the same
    arguments (summed over servers); run before it."""

    counts: np.ndarray
    n_features: int
    reseed: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    rows: np.ndarray | None = field(default=None, repr=False)

    arity: ClassVar[tuple[int, int]] = (2, 2)
    _local: ClassVar[tuple[str, ...]] = ("rows",)

    def params(self) -> dict[str, Any]:
        return {k: v for k, v in super().params().items() if k not in self._local}

    def split(self, metas: list[Any]) -> dict[int, dict[str, Any]]:
        return _split_rows(self.rows, self.reseed, self.n_features, metas)

    def partition_get(self, *parts: Any, **params: Any) -> float:
        Cp, Sp = parts
        new = _new_block(Cp, Sp, self.counts, self.n_features, self.reseed, params)
        centre = Cp.global_cols() < self.n_features
        diff = new[:, centre] - np.asarray(Cp.array, np.float64)[:, centre]
        return float((diff * diff).sum())

    def merge(self, partials: dict[int, Any], metas: list[Any]) -> float:
        return float(sum(partials.values()))
