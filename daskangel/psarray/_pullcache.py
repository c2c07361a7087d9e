"""The agent's pull cache: rows (or vector entries) tagged with how fresh they are.

A *unit* is a whole row of a matrix, or one entry of a vector.  Every cached
unit remembers ``fresh``: the slowest clock of its job known when it was
fetched.  Every task flushes its updates before its clock advances, so a copy
fetched once the slowest task had reached clock ``m`` holds every update of
clocks ``< m``.  A read at clock ``c`` under staleness ``s`` needs every update
of clocks ``<= c - s - 1``, so it may use a copy with ``fresh >= c - s`` (its
*floor*).

:class:`UnitStore` keeps units as three sorted parallel arrays, so a lookup or
insert of a batch of units is a few vectorised numpy calls, never a loop per
unit; but an insert of new units moves the whole store (``np.insert``).  When an
index of every unit of the array is small (``daskangel.agent.direct-index-bytes``,
4 bytes a unit), :class:`DirectStore` is used instead: a slot per unit, so a
lookup or an insert costs the batch's size, whatever the store holds (a
minibatch SGD task pulls a batch's keys of a million-entry vector every clock).  A
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

from .. import config

__all__ = ["DirectStore", "Fetch", "UnitStore", "covered", "make_store", "positions"]


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


_ABSENT = np.iinfo(np.int64).min  # the freshness of a unit not cached


class DirectStore:
    """Cached units of one array indexed by unit id (not thread-safe: the agent locks).

    ``slot[unit]`` is the unit's row in ``vals`` / ``fresh`` / ``units`` (or -1);
    ``fresh`` has one more entry than the slots, always :data:`_ABSENT`, so that
    ``fresh[slot[want]]`` reads "absent" for units without a slot.  Lookups and
    inserts cost the batch, not the store; rows are appended and compacted only
    by :meth:`evict`.

    Example
    -------
    >>> s = DirectStore(n_units=10, width=1, dtype=np.dtype("float64"))
    >>> s.insert(np.array([2, 5]), np.ones((2, 1)), fresh=3)
    >>> s.lookup(np.array([2, 4, 5]), floor=3)[0].tolist()
    [True, False, True]
    """

    def __init__(self, n_units: int, width: int, dtype: np.dtype) -> None:
        self.width = width
        self.dtype = np.dtype(dtype)
        self.slot = np.full(n_units, -1, np.int32 if n_units < 2**31 else np.int64)
        self.n = 0  # slots in use
        self.units = np.empty(0, np.int64)  # unit of each slot
        self.vals = np.empty((0, width), self.dtype)
        self.fresh = np.full(1, _ABSENT, np.int64)  # per slot, then the "absent" entry
        self.inflight: list[Fetch] = []

    @property
    def nbytes(self) -> int:
        return int(self.slot.nbytes + self.units.nbytes + self.vals.nbytes + self.fresh.nbytes)

    @property
    def keys(self) -> np.ndarray:
        """The cached units, sorted (for inspection; not on the read path)."""
        return np.sort(self.units[: self.n])

    def lookup(self, want: np.ndarray, floor: int) -> tuple[np.ndarray, np.ndarray]:
        """``(hit mask, values of the hits)`` for unique ``want`` (sorted or not)."""
        s = self.slot[want]
        hit = self.fresh[s] >= floor
        return hit, self.vals[s[hit]]

    def insert(self, keys: np.ndarray, vals: np.ndarray, fresh: int) -> None:
        """Add or replace units (unique ``keys``) fetched at ``fresh``; a unit cached
        fresher than this fetch keeps its value."""
        if keys.shape[0] == 0:
            return
        s = self.slot[keys]
        found = s >= 0
        upd = found & (self.fresh[s] <= fresh)
        if upd.any():
            self.vals[s[upd]] = vals[upd]
            self.fresh[s[upd]] = fresh
        new = np.flatnonzero(~found)
        m = new.shape[0]
        if m == 0:
            return
        n = self.n
        if n + m > self.units.shape[0]:
            self._grow(max(n + m, 2 * self.units.shape[0], 1024))
        self.units[n : n + m] = keys[new]
        self.vals[n : n + m] = vals[new]
        self.fresh[n : n + m] = fresh
        self.slot[keys[new]] = np.arange(n, n + m)
        self.n = n + m

    def _grow(self, cap: int) -> None:
        n = self.n
        cap = min(cap, self.slot.shape[0])
        units = np.empty(cap, np.int64)
        units[:n] = self.units[:n]
        vals = np.empty((cap, self.width), self.dtype)
        vals[:n] = self.vals[:n]
        fresh = np.full(cap + 1, _ABSENT, np.int64)
        fresh[:n] = self.fresh[:n]
        self.units, self.vals, self.fresh = units, vals, fresh

    def evict(self, max_bytes: int) -> int:
        """Drop the least fresh units until the cached rows fit ``max_bytes``; return
        how many were dropped (the slot index itself is not counted)."""
        per = 16 + self.width * self.dtype.itemsize
        n = self.n
        if n * per <= max_bytes:
            return 0
        keep_n = max(0, max_bytes // per)
        order = np.argsort(self.fresh[:n], kind="stable")
        self.slot[self.units[order[: n - keep_n]]] = -1
        keep = np.sort(order[n - keep_n :])
        self._compact(keep)
        return n - keep_n

    def _compact(self, keep: np.ndarray) -> None:
        k = keep.shape[0]
        self.units[:k] = self.units[keep]
        self.vals[:k] = self.vals[keep]
        self.fresh[:k] = self.fresh[keep]
        self.fresh[k:] = _ABSENT
        self.slot[self.units[:k]] = np.arange(k)
        self.n = k

    def clear(self) -> None:
        self.slot[self.units[: self.n]] = -1
        self.fresh[: self.n] = _ABSENT
        self.n = 0

    def __repr__(self) -> str:
        return f"DirectStore<{self.n} of {self.slot.shape[0]} units x {self.width}>"


def make_store(n_units: int, width: int, dtype: np.dtype) -> UnitStore | DirectStore:
    """A :class:`DirectStore` when its slot index fits
    ``daskangel.agent.direct-index-bytes``, else a :class:`UnitStore`."""
    limit = config.get_bytes("daskangel.agent.direct-index-bytes")
    if n_units * (4 if n_units < 2**31 else 8) <= limit:
        return DirectStore(n_units, width, dtype)
    return UnitStore(width, dtype)


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
