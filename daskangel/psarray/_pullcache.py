"""The agent's pull cache: rows (or vector entries) tagged with how fresh they are.

A *unit* is a whole row of a matrix, or one entry of a vector.  Every cached
unit remembers ``fresh``: the slowest clock of its job known when it was
fetched.  Every task flushes its updates before its clock advances, so a copy
fetched once the slowest task had reached clock ``m`` holds every update of
clocks ``< m``.  A read at clock ``c`` under staleness ``s`` needs every update
of clocks ``<= c - s - 1``, so it may use a copy with ``fresh >= c - s`` (its
*floor*).

The store keeps units as three sorted parallel arrays, so a lookup or insert of
a batch of units is a few vectorised numpy calls, never a loop per unit.  A
fetch in flight is listed too, so a concurrent reader of the same units waits
for it instead of sending a second request (de-duplication).

Example
-------
>>> import numpy as np
>>> s = UnitStore(width=2, dtype=np.dtype("float32"))
>>> s.insert(np.array([3, 7]), np.ones((2, 2), "float32"), fresh=4)
>>> hit, vals = s.lookup(np.array([1, 3, 7]), floor=4)
>>> hit.tolist(), vals.shape
([False, True, True], (2, 2))
>>> s.lookup(np.array([3]), floor=5)[0].tolist()
[False]
"""

from __future__ import annotations

import concurrent.futures
from typing import Any

import numpy as np

__all__ = ["Fetch", "UnitStore", "covered", "positions"]


class Fetch:
    """A pull in flight: its sorted unique units, freshness and result future."""

    __slots__ = ("fresh", "future", "joined", "keys")

    def __init__(self, keys: np.ndarray, fresh: int | None) -> None:
        self.keys = keys
        self.fresh = fresh
        # readers that share this fetch besides the one that sent it (counted
        # under the agent's lock while it is in flight): with none, the sender
        # may take the fetched array itself instead of a copy
        self.joined = 0
        # resolves to the (len(keys), width) values, in key order
        self.future: concurrent.futures.Future[np.ndarray] = concurrent.futures.Future()

    def usable(self, floor: int | None) -> bool:
        """May a reader needing ``floor`` share this fetch?"""
        return floor is None or (self.fresh is not None and self.fresh >= floor)


class UnitStore:
    """Cached units of one array for one job (not thread-safe: the agent locks)."""

    def __init__(self, width: int, dtype: np.dtype) -> None:
        self.width = width
        self.dtype = np.dtype(dtype)
        self.keys = np.empty(0, np.int64)  # sorted unique unit ids
        self.vals = np.empty((0, width), self.dtype)  # values, one row per unit
        self.fresh = np.empty(0, np.int64)  # slowest clock known when fetched
        # fetches in flight (few at a time: scanned linearly)
        self.inflight: list[Fetch] = []

    @property
    def nbytes(self) -> int:
        return int(self.keys.nbytes + self.vals.nbytes + self.fresh.nbytes)

    def lookup(self, want: np.ndarray, floor: int) -> tuple[np.ndarray, np.ndarray]:
        """``(hit mask, values of the hits)`` for sorted unique ``want``."""
        n = self.keys.shape[0]
        if n == 0 or want.shape[0] == 0:
            return np.zeros(want.shape[0], bool), self.vals[:0]
        pos = np.searchsorted(self.keys, want)
        pos_c = np.minimum(pos, n - 1)
        hit = (pos < n) & (self.keys[pos_c] == want) & (self.fresh[pos_c] >= floor)
        return hit, self.vals[pos_c[hit]]

    def insert(self, keys: np.ndarray, vals: np.ndarray, fresh: int) -> None:
        """Add or replace units (sorted unique ``keys``) fetched at ``fresh``.

        A unit already cached fresher than this fetch keeps its cached value.
        Both key lists are sorted: cached units are replaced in place and new
        ones inserted in one pass (``np.insert``), never re-sorting the store
        (a re-sort per fetch cost ~0.3 s a pull once the store held a million
        entries: minibatch SGD pulls a batch's keys every clock).
        """
        if keys.shape[0] == 0:
            return
        n = self.keys.shape[0]
        if n == 0:
            self.keys = keys.astype(np.int64, copy=True)
            self.vals = np.array(vals, dtype=self.dtype, copy=True)
            self.fresh = np.full(keys.shape[0], fresh, np.int64)
            return
        pos = np.searchsorted(self.keys, keys)
        found = self.keys[np.minimum(pos, n - 1)] == keys
        at = pos[found]
        older = self.fresh[at] <= fresh
        self.vals[at[older]] = vals[found][older]
        self.fresh[at[older]] = fresh
        new = ~found
        if new.any():
            where = pos[new]
            self.keys = np.insert(self.keys, where, keys[new])
            self.vals = np.insert(
                self.vals, where, vals[new].astype(self.dtype, copy=False), axis=0
            )
            self.fresh = np.insert(self.fresh, where, fresh)

    def evict(self, max_bytes: int) -> int:
        """Drop the least fresh units until the store fits ``max_bytes``; return dropped."""
        per = 16 + self.width * self.dtype.itemsize
        n = self.keys.shape[0]
        if n * per <= max_bytes:
            return 0
        keep_n = max(0, max_bytes // per)
        order = np.argsort(self.fresh, kind="stable")[n - keep_n :]
        order.sort()
        self.keys, self.vals, self.fresh = self.keys[order], self.vals[order], self.fresh[order]
        return n - keep_n

    def clear(self) -> None:
        self.keys = self.keys[:0]
        self.vals = self.vals[:0]
        self.fresh = self.fresh[:0]

    def __repr__(self) -> str:
        return f"UnitStore<{self.keys.shape[0]} units x {self.width}>"


def covered(need: np.ndarray, fetch: Fetch) -> np.ndarray:
    """Mask of the sorted ``need`` units that ``fetch`` is already pulling."""
    k = fetch.keys
    if k.shape[0] == 0 or need.shape[0] == 0:
        return np.zeros(need.shape[0], bool)
    pos = np.minimum(np.searchsorted(k, need), k.shape[0] - 1)
    return k[pos] == need  # type: ignore[no-any-return]


def positions(keys: np.ndarray, sub: np.ndarray) -> Any:
    """Positions of the sorted subset ``sub`` inside sorted ``keys``."""
    return np.searchsorted(keys, sub)
