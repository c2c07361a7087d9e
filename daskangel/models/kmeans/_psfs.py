"""Lloyd's centre update, computed by the servers when the tasks pull the centres.

Each iteration ``t`` every task *sets* its own rows of the accumulator
``S_t`` (one of three rotating PS arrays, ``t % 3``): per-cluster sums and
counts of its rows, its rows farthest from their centres (candidates to
re-seed empty clusters) and its inertia.  Tasks never add into rows another
task writes, so nothing has to be zeroed between iterations and a task that
runs a clock again (after a failure) simply writes its rows again.

The centres of iteration ``t + 1`` are not stored: the :class:`Centres` psf,
run on ``(S_t, S_{t-1})`` when a task pulls, computes them next to the
blocks (``sum over tasks / count``; empty clusters get the farthest
candidates) and returns the columns the task asked for, with the centre
shift of update ``t`` (summed over the servers), the counts and the
iteration's inertia.  Every task reads the same figures, so all stop at the
same iteration; three arrays rotate so that a task already writing ``S_{t+1}``
never overwrites rows another task is still reading.

**Layout** (:class:`Geometry`): ``S`` is ``(rows, d + B)`` in ``B`` column
blocks of ``w`` features plus one count column each, so that every server sees
the counts of its own blocks (feature ``j`` is physical column ``j + j // w``).
``w`` depends only on the data and ``daskangel.kmeans.block-bytes``, never on
the number of servers: a snapshot of a fit resumes on a cluster of another size
with the same arrays (the blocks are spread over whatever servers there are),
and one block's centre update needs a bounded amount of memory.  The dtype is
float64, or float32 when the three arrays would exceed
``daskangel.kmeans.float32-above`` and every partition has fewer than 2**24
rows (each task's sums are taken in float64 and rounded once; counts stay
exact).  Rows: task ``i``'s ``k`` cluster rows, then its ``m`` candidate rows
(their squared distance in every count column, so every server picks the same
winners), then its metrics row (inertia and rows in physical columns 0 and 1).

Example
-------
>>> import numpy as np
>>> g = Geometry(n_features=3, width=2, n_tasks=1, n_clusters=2, n_cand=1)
>>> g.phys(np.array([0, 1, 2])).tolist(), g.count_cols().tolist(), g.n_phys
([0, 1, 3], [2, 4], 5)
>>> A = np.zeros((g.n_rows, 3))                     # block 0: features 0, 1 + counts
>>> A[0] = [4.0, 2.0, 2.0]                          # cluster 0: 2 rows summing to (4, 2)
>>> A[2] = [9.0, 9.0, 7.0]                          # a candidate at squared distance 7
>>> C, counts, moved = centres_of(A, g)
>>> C.tolist(), counts.tolist(), moved
([[2.0, 1.0], [9.0, 9.0]], [2.0, 0.0], 1)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
from dask.utils import parse_bytes

from ... import config
from ...ops import GetFunc
from ._kernels import top_rows

__all__ = ["CentreNorms", "Centres", "Geometry", "centres_of", "farthest"]


def farthest(dist: np.ndarray, m: int) -> np.ndarray:
    """Indices of the ``m`` largest distances, largest first (ties: lower index)."""
    m = min(m, dist.shape[0])
    if m <= 0:
        return np.zeros(0, np.int64)
    return top_rows(np.ascontiguousarray(dist, np.float64), int(m))  # type: ignore[no-any-return]


@dataclass(frozen=True, slots=True)
class Geometry:
    """Where everything sits in an accumulator array (module docstring)."""

    n_features: int  # d
    width: int  # w: features per column block
    n_tasks: int  # T
    n_clusters: int  # k
    n_cand: int  # m: candidate rows per task

    @staticmethod
    def for_data(n_features: int, n_tasks: int, k: int, m: int) -> Geometry:
        """Blocks of at most ``daskangel.kmeans.block-bytes`` (as float64), whatever
        the number of servers."""
        rows = int(n_tasks) * (int(k) + int(m) + 1)
        most = int(parse_bytes(config.get("daskangel.kmeans.block-bytes")))
        width = max(1, min(int(n_features), most // (8 * rows) - 1))
        return Geometry(int(n_features), width, int(n_tasks), int(k), int(m))

    def dtype(self, most_rows: int) -> str:
        """The accumulators' dtype for partitions of at most ``most_rows`` rows."""
        big = 3 * self.n_rows * self.n_phys * 8 > parse_bytes(
            config.get("daskangel.kmeans.float32-above")
        )
        return "float32" if big and most_rows < 2**24 else "float64"

    @property
    def n_blocks(self) -> int:
        return max(1, math.ceil(self.n_features / self.width))

    @property
    def n_phys(self) -> int:
        return self.n_features + self.n_blocks

    @property
    def n_rows(self) -> int:
        return self.n_tasks * (self.n_clusters + self.n_cand + 1)

    @property
    def block_shape(self) -> tuple[int, int]:
        return (self.n_rows, self.width + 1)

    def phys(self, features: np.ndarray) -> np.ndarray:
        """Physical columns of the features ``features``."""
        f = np.asarray(features, np.int64)
        return f + f // self.width

    def count_cols(self) -> np.ndarray:
        """The count column of every block (each block's last)."""
        b = np.arange(self.n_blocks, dtype=np.int64)
        return np.minimum((b + 1) * (self.width + 1), self.n_phys) - 1

    def cluster_rows(self, task: int) -> np.ndarray:
        return task * self.n_clusters + np.arange(self.n_clusters, dtype=np.int64)

    def cand_rows(self, task: int) -> np.ndarray:
        base = self.n_tasks * self.n_clusters + task * self.n_cand
        return base + np.arange(self.n_cand, dtype=np.int64)

    def metrics_row(self, task: int) -> int:
        return self.n_tasks * (self.n_clusters + self.n_cand) + task


def centres_of(A: np.ndarray, g: Geometry) -> tuple[np.ndarray, np.ndarray, int]:
    """Centres ``(k, block features)`` of one block ``A`` of an accumulator, the
    counts, and how many empty clusters took a candidate.

    Empty clusters without a candidate (with a distance > 0) are NaN.
    """
    T, k, m = g.n_tasks, g.n_clusters, g.n_cand
    sums = np.array(A[:k], np.float64)  # float64 sums of the tasks' (float32) rows
    for t in range(1, T):
        sums += A[t * k : (t + 1) * k]
    counts = sums[:, -1].copy()
    C = sums[:, :-1]
    with np.errstate(invalid="ignore", divide="ignore"):
        C /= counts[:, None]
    empty = np.flatnonzero(counts <= 0)
    moved = 0
    if empty.size:
        cand = np.asarray(A[T * k : T * (k + m)], np.float64)
        best = farthest(cand[:, -1], empty.size)
        best = best[cand[best, -1] > 0]
        moved = int(best.size)
        C[empty[:moved]] = cand[best, :-1]
        C[empty[moved:]] = np.nan
    return C, counts, moved


@dataclass(frozen=True, eq=False)
class Centres(GetFunc):
    """Pull of the centres of ``(S_t, S_{t-1})`` (module docstring).

    ``features``: the sorted features to return (``None``: all); ``dtype``: of the
    returned centres (``""``: the accumulators').  The result is a dict:
    ``centres_t`` ``(n, k)``, the centres transposed as the assignment kernels read
    them (NaN columns: empty clusters nothing re-seeded; the caller keeps their
    previous centres), ``norms`` ``(k,)`` (``||c||^2`` over every
    feature, whatever ``features`` asked: a task's distances need them), ``shift`` (summed squared move of update ``t``,
    clusters NaN on either side left out), ``counts`` ``(k,)``, ``inertia``,
    ``rows`` and ``reseeded`` of iteration ``t``.
    """

    geometry: tuple[int, int, int, int, int]  # Geometry's fields
    features: np.ndarray | None = field(default=None, repr=False)
    dtype: str = ""

    arity: ClassVar[tuple[int, int]] = (2, 2)

    def params(self) -> dict[str, Any]:
        return {"geometry": list(self.geometry), "dtype": self.dtype}

    @classmethod
    def from_params(cls, params: dict[str, Any]) -> Centres:
        geometry = tuple(int(v) for v in params["geometry"])
        return cls(geometry, None, str(params.get("dtype", "")))  # type: ignore[arg-type]

    def split(self, metas: list[Any]) -> dict[int, dict[str, Any]]:
        lay = metas[0].layout
        g = Geometry(*self.geometry)
        out: dict[int, dict[str, Any]] = {}
        phys = None if self.features is None else g.phys(self.features)
        for b in range(lay.n_blocks):
            if phys is None:
                out[b] = {}
                continue
            c0, c1 = lay.block_cols(b)
            a, z = np.searchsorted(phys, [c0, c1])
            out[b] = {"cols": (phys[a:z] - c0).astype(np.int64)}
        return out

    def partition_get(self, *parts: Any, **params: Any) -> dict[str, Any]:
        cur, prev = parts
        g = Geometry(*self.geometry)
        C, counts, moved = centres_of(cur.array, g)
        P, _c, _m = centres_of(prev.array, g)
        diff = C - P  # NaN rows (empty clusters on either side) are whole rows
        moves = np.einsum("ij,ij->i", diff, diff)
        del diff
        cols = params.get("cols")
        picked = C if cols is None else C[:, cols]
        out: dict[str, Any] = {
            "centres_t": np.ascontiguousarray(picked.T, self.dtype or cur.array.dtype),
            "norms": np.einsum("ij,ij->i", C, C),  # over the block's features (NaN: empty)
            "shift": float(moves[np.isfinite(moves)].sum()),
        }
        if cur.col0 == 0:
            met = np.asarray(cur.array[g.n_tasks * (g.n_clusters + g.n_cand) :], np.float64)
            out.update(counts=counts, moved=moved, inertia=float(met[:, 0].sum()),
                       rows=float(met[:, 1].sum()))  # fmt: skip
        return out

    def merge(self, partials: dict[int, Any], metas: list[Any]) -> dict[str, Any]:
        blocks = [partials[b] for b in sorted(partials)]
        first = blocks[0]
        return {
            "centres_t": np.concatenate([p.pop("centres_t") for p in blocks], axis=0),
            "norms": np.sum([p["norms"] for p in blocks], axis=0),
            "shift": float(sum(p["shift"] for p in blocks)),
            "counts": first["counts"],
            "inertia": first["inertia"],
            "rows": first["rows"],
            "reseeded": int(first["moved"]),
        }


@dataclass(frozen=True, eq=False)
class CentreNorms(GetFunc):
    """``||c||^2`` of every row of a ``(k, d + 1)`` centres array over its ``d``
    features (column ``d``, the counts, left out), summed over the servers:
    ``(k,)`` float64.  A mini-batch task pulls only its batch's columns and needs
    the rest of each centre's norm for its distances."""

    n_features: int

    def partition_get(self, *parts: Any, **params: Any) -> np.ndarray:
        (part,) = parts
        A = np.asarray(part.array, np.float64)
        keep = max(0, min(A.shape[1], self.n_features - int(part.col0)))
        return (A[:, :keep] ** 2).sum(axis=1)  # type: ignore[no-any-return]

    def merge(self, partials: dict[int, Any], metas: list[Any]) -> np.ndarray:
        return np.sum([partials[b] for b in sorted(partials)], axis=0)  # type: ignore[no-any-return]
