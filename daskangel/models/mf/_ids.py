"""Raw user and item ids (any integer or string type) and the model's row numbers.

A factorisation model stores user ``u`` in row ``k`` of its user matrix and item
``i`` in row ``k'`` of its item matrix.  :class:`IdMap` keeps the raw id of every
row (``ids[k]``) and maps raw ids to rows through a hash index, so ids may be
integers, strings or anything hashable and orderable.  A first fit numbers the
distinct ids in sorted order; ``partial_fit`` with new users or items *appends*
them (rows already trained keep their numbers).

Example
-------
>>> m = IdMap.of(np.array(["b", "a", "b"]), "user")
>>> m.ids.tolist(), m.encode(np.array(["a", "zz"])).tolist()
(['a', 'b'], [0, -1])
>>> m2, new = m.extend(np.array(["c", "a"]))
>>> m2.ids.tolist(), new
(['a', 'b', 'c'], 1)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ...errors import InvalidArgumentError, InvalidTypeError

__all__ = ["IdMap", "check_ids", "distinct"]


def check_ids(raw: Any, what: str) -> np.ndarray:
    """``raw`` as a 1-D numpy array of usable ids; missing (NaN / None) ids raise."""
    a = np.asarray(raw)
    if a.ndim != 1:
        a = a.reshape(-1)
    if a.dtype.kind == "f":
        bad = ~np.isfinite(a)
        if bad.any():
            raise InvalidArgumentError(
                f"{what}: {int(bad.sum())} missing or non-finite ids (first at position "
                f"{int(np.flatnonzero(bad)[0])}); every rating needs a {what} id"
            )
        if (a != np.floor(a)).any():
            raise InvalidTypeError(
                f"{what}: ids must be integers or strings, got fractional floats"
            )
        a = a.astype(np.int64)
    elif a.dtype.kind == "O":
        missing = pd.isna(a)
        if missing.any():
            raise InvalidArgumentError(
                f"{what}: {int(missing.sum())} missing ids (first at position "
                f"{int(np.flatnonzero(missing)[0])}); every rating needs a {what} id"
            )
    elif a.dtype.kind not in "iuUSb":
        raise InvalidTypeError(f"{what}: ids must be integers or strings, got dtype {a.dtype}")
    return a


def distinct(a: np.ndarray) -> np.ndarray:
    """The distinct values of ``a``, sorted when they can be compared."""
    u = pd.unique(a)
    u = np.asarray(u)
    try:
        return np.sort(u, kind="stable")
    except TypeError:  # mixed types: keep first appearance
        return u


@dataclass(frozen=True, slots=True)
class IdMap:
    """Raw ids of the rows of one factor matrix (see the module docstring)."""

    ids: np.ndarray  # raw id of row k
    what: str = "user"  # "user" or "item", for messages

    @classmethod
    def of(cls, raw: Any, what: str) -> IdMap:
        """The sorted distinct ids of ``raw``."""
        return cls(distinct(check_ids(raw, what)), what)

    @classmethod
    def range(cls, n: int, what: str) -> IdMap:
        """Ids ``0 .. n-1`` (rows and columns of a matrix)."""
        return cls(np.arange(int(n), dtype=np.int64), what)

    def __len__(self) -> int:
        return int(self.ids.shape[0])

    def index(self) -> pd.Index:
        return pd.Index(self.ids)

    def encode(self, raw: Any) -> np.ndarray:
        """Row numbers (int64) of ``raw`` ids; ``-1`` for ids this map does not know."""
        a = check_ids(raw, self.what)
        if a.shape[0] == 0:
            return np.zeros(0, np.int64)
        if self.ids.dtype.kind in "iu" and a.dtype.kind in "iu":
            ids = self.ids
            if ids.shape[0] and ids[0] == 0 and ids[-1] == ids.shape[0] - 1:
                # ids 0 .. n-1 in order (matrices, re-numbered data): no hashing
                out = a.astype(np.int64, copy=True)
                out[(out < 0) | (out >= ids.shape[0])] = -1
                return out
        try:
            return np.asarray(self.index().get_indexer(a), dtype=np.int64)
        except TypeError:
            return np.full(a.shape[0], -1, np.int64)

    def decode(self, rows: np.ndarray) -> np.ndarray:
        """Raw ids of row numbers."""
        return self.ids[np.asarray(rows, np.int64)]

    def extend(self, raw: Any) -> tuple[IdMap, int]:
        """This map with the ids of ``raw`` it lacks appended (sorted); ``(map, n_new)``."""
        a = check_ids(raw, self.what)
        known = self.encode(a) >= 0
        new = distinct(a[~known])
        if new.shape[0] == 0:
            return self, 0
        ids = self.ids
        if ids.dtype.kind != new.dtype.kind:
            ids = np.concatenate([ids.astype(object), new.astype(object)])
        else:
            ids = np.concatenate([ids, new])
        return IdMap(ids, self.what), int(new.shape[0])
