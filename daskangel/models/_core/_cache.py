"""Data a model derives from a partition, kept on the worker while the partition lives.

A training task prepares its partition before it trains (a split, localised
keys, a family's own layout of the rows).  :data:`PREPARED` keeps that work per
``(kind, id(partition), ...)`` key, least recently used dropped past
``daskangel.models.prepared-cache`` bytes, each entry held by a weak reference
to its partition: ``partial_fit`` loops, refits and parameter searches prepare a
partition once, and a released partition takes its entries with it.

.. warning:: The cache is memory Dask counts as *unmanaged*: a worker holds a
   partition's rows twice while they are cached.

Example
-------
>>> class Part: pass
>>> class Rows:
...     nbytes = 8
>>> p, made = Part(), []
>>> d = PREPARED.get_or_make(p, ("doc", id(p)), lambda: made.append(1) or Rows())
>>> PREPARED.get_or_make(p, ("doc", id(p)), Rows) is d, len(made)
(True, 1)
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, TypeVar

from ... import config

__all__ = ["PREPARED", "PartitionCache"]

T = TypeVar("T")


class PartitionCache:
    """Prepared rows per (partition, split), LRU within a byte budget (thread-safe)."""

    def __init__(self) -> None:
        # {("prepared", id(partition), seed, fraction, n_features, bias, shuffle, hot):
        #  (weakref to the partition, TaskData, bytes)}, and ("in-place", id(partition),
        #  seed, fraction, n_features, bias) -> _inplace.InPlaceData
        self.entries: OrderedDict[tuple[Any, ...], tuple[Any, Any, int]] = OrderedDict()
        self.lock = threading.Lock()

    def get(self, part: Any, key: tuple[Any, ...]) -> Any:
        with self.lock:
            hit = self.entries.get(key)
            if hit is None or hit[0]() is not part:
                return None
            self.entries.move_to_end(key)
            return hit[1]

    def get_or_make(self, part: Any, key: tuple[Any, ...], make: Callable[[], T]) -> T:
        """The entry of ``key`` for ``part``, made (and kept) if missing.

        ``key[0]`` names the kind of entry, so one key never finds another kind.
        """
        d = self.get(part, key)
        if d is None:
            d = make()
            self.put(part, key, d)
        return d  # type: ignore[no-any-return]

    def put(self, part: Any, key: tuple[Any, ...], d: Any) -> None:
        """Keep ``d`` (with an ``nbytes``) while ``part`` lives, within the byte budget."""
        limit = config.get_bytes("daskangel.models.prepared-cache")
        size = int(d.nbytes)
        if size > limit:
            return
        try:
            ref = weakref.ref(part, functools.partial(self._dead, key))
        except TypeError:  # not weak-referenceable: not cached
            return
        with self.lock:
            self.entries[key] = (ref, d, size)
            total = sum(e[2] for e in self.entries.values())
            while total > limit:
                _k, (_r, _d, s) = self.entries.popitem(last=False)
                total -= s

    def _dead(self, key: tuple[Any, ...], _ref: Any) -> None:
        self.drop(key)

    def drop(self, key: tuple[Any, ...]) -> None:
        with self.lock:
            self.entries.pop(key, None)


PREPARED = PartitionCache()
