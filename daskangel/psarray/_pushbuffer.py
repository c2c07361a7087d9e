"""The agent's update buffer: increments from every task on a worker, merged.

One :class:`MergeBuffer` holds the increments to one array at one clock, in one
of two shapes:

* ``rows``: whole rows of a matrix (a unit is a row; MF's item vectors), merged
  by row id with a dense add per row;
* ``entries``: single entries (a unit is ``row * n_cols + col``; a vector's
  keys, LDA's word-topic counts), hash-merged by key.

Increments are appended cheaply and merged in batches (sort the keys, sum equal
neighbours with ``np.add.reduceat``).  Once the merged form would be larger than
a dense accumulator of the whole array, the buffer switches to the dense
accumulator and adds into it directly.  When pushed, the buffer picks the wire
format that moves fewer bytes: the dense values of the whole array, or the
touched units with their indices.

Example
-------
>>> import numpy as np
>>> b = MergeBuffer(n_units=10, width=1, dtype=np.dtype("float32"), key_bytes=8)
>>> b.add(np.array([3, 1, 3]), np.ones((3, 1), "float32"))
>>> fmt, keys, vals = b.take()
>>> fmt, keys.tolist(), vals.ravel().tolist()
('sparse', [1, 3], [1.0, 2.0])
"""

from __future__ import annotations

import numpy as np

from . import _kernels as K

__all__ = ["MergeBuffer", "reduce_units"]


def reduce_units(keys: np.ndarray, vals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sort units by key and sum the values of equal keys (``vals`` is ``(n, width)``)."""
    if keys.shape[0] < 2:
        return keys, vals
    k, v = K.sort_pairs(keys.astype(np.int64, copy=False), vals)
    if v.shape[1] == 1:
        uk, uv = K.reduce_sorted(k, np.ascontiguousarray(v[:, 0]), True)
        return uk, uv.reshape(-1, 1)
    starts = np.flatnonzero(np.concatenate([[True], k[1:] != k[:-1]]))
    if starts.shape[0] == k.shape[0]:
        return k, v
    return k[starts], np.add.reduceat(v, starts, axis=0)


def _appends(merged: np.ndarray, keys: np.ndarray) -> bool:
    """Do ``keys`` extend the sorted unique ``merged`` as they are (increasing, all past
    its last key)?  Then merging is a concatenation (e.g. LDA's row-ordered deltas)."""
    if keys.shape[0] == 0 or (merged.shape[0] and keys[0] <= merged[-1]):
        return False
    return bool(K.is_strictly_sorted(keys))


class MergeBuffer:
    """Merged increments to one array at one clock (not thread-safe: the agent locks).

    ``n_units`` units of ``width`` values; ``key_bytes`` is what one unit's index
    costs on the wire (8 for a row id, 16 for a row and a column).  A dense
    accumulator is used only when ``dense_limit`` bytes allow it.
    """

    def __init__(
        self,
        n_units: int,
        width: int,
        dtype: np.dtype,
        key_bytes: int,
        dense_limit: int = 0,
        merge_bytes: int = 1 << 20,
    ) -> None:
        self.n_units = n_units
        self.width = width
        self.dtype = np.dtype(dtype)
        self.key_bytes = key_bytes
        self.dense_limit = dense_limit
        self.merge_bytes = merge_bytes
        self._keys: list[np.ndarray] = []  # unmerged increments ...
        self._vals: list[np.ndarray] = []  # ... and their (k, width) values
        self._pending = 0  # bytes unmerged
        self.keys = np.empty(0, np.int64)  # merged, sorted unique
        self.vals = np.empty((0, width), self.dtype)
        self.dense: np.ndarray | None = None  # (n_units, width) accumulator, once switched
        self.touched: np.ndarray | None = None  # bool per unit, with the accumulator
        self.increments = 0  # add() calls merged into this buffer

    @property
    def dense_bytes(self) -> int:
        return self.n_units * self.width * self.dtype.itemsize

    @property
    def nnz(self) -> int:
        """Distinct units touched (after merging)."""
        self.merge()
        if self.touched is not None:
            return int(self.touched.sum())
        return int(self.keys.shape[0])

    @property
    def nbytes(self) -> int:
        """Memory held: merged form plus unmerged increments."""
        if self.dense is not None:
            held = self.dense.nbytes
        else:
            held = self.keys.nbytes + self.vals.nbytes
        return int(held + self._pending)

    def add(self, keys: np.ndarray, vals: np.ndarray) -> None:
        """Buffer increments ``vals[i]`` to unit ``keys[i]`` (already validated)."""
        self._keys.append(keys)
        self._vals.append(vals)
        self._pending += keys.nbytes + vals.nbytes
        self.increments += 1
        if self._pending >= self.merge_bytes:
            self.merge()

    def merge(self) -> None:
        """Fold the unmerged increments into the merged form."""
        if not self._keys:
            return
        k = np.concatenate(self._keys) if len(self._keys) > 1 else self._keys[0]
        v = np.concatenate(self._vals) if len(self._vals) > 1 else self._vals[0]
        self._keys, self._vals, self._pending = [], [], 0
        if self.dense is None and _appends(self.keys, k):  # already merged: no sort, no sum
            uk = np.concatenate([self.keys, k.astype(np.int64, copy=False)])
            uv = np.concatenate([self.vals, v])
        else:
            if self.dense is None:
                k = np.concatenate([self.keys, k])
                v = np.concatenate([self.vals, v])
            uk, uv = reduce_units(k, v)
        if self.dense is not None:
            assert self.touched is not None
            self.dense[uk] += uv  # keys unique: fancy += is a dense add
            self.touched[uk] = True
            return
        self.keys, self.vals = uk, uv
        sparse = uk.shape[0] * (self.key_bytes + self.width * self.dtype.itemsize)
        if self.dense_bytes <= self.dense_limit and sparse >= self.dense_bytes:
            self.dense = np.zeros((self.n_units, self.width), self.dtype)
            self.touched = np.zeros(self.n_units, bool)
            self.dense[uk] = uv
            self.touched[uk] = True
            self.keys = self.keys[:0]
            self.vals = self.vals[:0]

    @property
    def unit_bytes(self) -> int:
        """Wire bytes of one unit sent sparse (its index and its values)."""
        return self.key_bytes + self.width * self.dtype.itemsize

    def units(self) -> tuple[np.ndarray, np.ndarray]:
        """The merged units: sorted keys and their ``(k, width)`` values (views)."""
        self.merge()
        if self.dense is not None:
            assert self.touched is not None
            keys = np.flatnonzero(self.touched)
            return keys, self.dense[keys]
        return self.keys, self.vals

    def split(self, at: np.ndarray) -> MergeBuffer:
        """Move the units at sorted positions ``at`` of :meth:`units` into a new buffer.

        What stays keeps merging; the new buffer holds the moved units merged, so
        its :meth:`take` sends exactly them (the two add up to the old buffer).
        """
        keys, vals = self.units()
        out = MergeBuffer(self.n_units, self.width, self.dtype, self.key_bytes, 0, self.merge_bytes)
        out.keys, out.vals = keys[at], np.array(vals[at], copy=True)
        if self.dense is not None:
            assert self.touched is not None
            self.dense[out.keys] = 0
            self.touched[out.keys] = False
        else:
            keep = np.ones(keys.shape[0], bool)
            keep[at] = False
            self.keys, self.vals = keys[keep], vals[keep]
        return out

    def take(self) -> tuple[str, np.ndarray | None, np.ndarray]:
        """The merged increments in the cheaper wire format.

        ``("dense", None, (n_units, width) values)`` or
        ``("sparse", keys, (k, width) values)``.
        """
        self.merge()
        if self.dense is not None:
            assert self.touched is not None
            nnz = int(self.touched.sum())
            if nnz * (self.key_bytes + self.width * self.dtype.itemsize) < self.dense_bytes:
                keys = np.flatnonzero(self.touched)
                return "sparse", keys, self.dense[keys]
            return "dense", None, self.dense
        sparse = self.keys.shape[0] * (self.key_bytes + self.width * self.dtype.itemsize)
        if self.dense_limit >= self.dense_bytes and sparse >= self.dense_bytes:
            dense = np.zeros((self.n_units, self.width), self.dtype)
            dense[self.keys] = self.vals
            return "dense", None, dense
        return "sparse", self.keys, self.vals
