"""Which subscribed units each write changed, so an eager refresh round compares
only those (:mod:`._refresh_ops`).

A server's refresh state keeps, per block with subscribers and per subscriber,
a :class:`Changed` record: the local units (rows, or a vector's columns) written
since that subscriber's last round, and the block ``version`` the record
accounts for.  The increment and set handlers (``update``) note their units
here (:func:`note_write`) as they write.  Any other write (a psf, a fill, a
restore) bumps the block's version without a note: the record then no longer
matches the block, and the next round compares every subscribed unit, as
without a record, and starts a new one.

Example
-------
>>> import numpy as np
>>> c = Changed(version=3, limit=8)
>>> c.note(3, 4, np.array([5, 1, 5]))
>>> c.version, c.take().tolist()
(4, [1, 5])
>>> c.note(2, 5, np.array([0]))  # a write this record did not see came first
>>> c.version
-1
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._packed import PACK_SHIFT

__all__ = ["Changed", "note_write", "written_units"]


class Changed:
    """Local units written since one subscriber's last refresh of one block."""

    __slots__ = ("limit", "n", "parts", "version")

    def __init__(self, version: int, limit: int) -> None:
        self.version = version  # the block version this record accounts for; -1: lost track
        self.limit = max(1024, int(limit))  # units held before compacting
        self.parts: list[np.ndarray] = []
        self.n = 0

    def note(self, before: int, after: int, units: np.ndarray | None) -> None:
        """A write took the block from version ``before`` to ``after``, touching
        ``units`` (``None``: every unit, or not known)."""
        if self.version != before or units is None:
            self.lose()
            return
        self.version = after
        self.add(units)

    def add(self, units: np.ndarray) -> None:
        """Units to compare in the next round (written, or held back by the budget)."""
        if not units.shape[0]:
            return
        self.parts.append(np.asarray(units, np.int64))
        self.n += int(units.shape[0])
        if self.n > self.limit:
            kept = self.take()
            if kept.shape[0] > self.limit:
                self.lose()
            else:
                self.parts, self.n = [kept], int(kept.shape[0])

    def take(self) -> np.ndarray:
        """The distinct units noted, sorted; the record is then empty."""
        out = np.unique(np.concatenate(self.parts)) if self.parts else np.empty(0, np.int64)
        self.parts, self.n = [], 0
        return out

    def lose(self) -> None:
        self.version, self.parts, self.n = -1, [], 0


def written_units(part: dict[str, Any], mode: str) -> np.ndarray | None:
    """The local rows (``mode="rows"``) or columns (``"cols"``) an ``update`` part
    writes; ``None`` for all of them."""
    if mode == "rows":
        for k in ("coo_rows", "csr_rows", "rows"):
            if k in part:
                return None if part[k] is None else np.asarray(part[k], np.int64)
        return None
    if "packed" in part:
        return np.asarray(part["packed"], np.int64) >> PACK_SHIFT
    for k in ("coo_cols", "csr_cols", "cols"):
        if k in part:
            return None if part[k] is None else np.asarray(part[k], np.int64)
    return None


def note_write(server: Any, array: str, block: int, obj: Any, before: int, part: Any) -> None:
    """After an ``update`` part wrote block ``block`` (object ``obj``, version
    ``before`` until then): note its units for the block's subscribers, if any."""
    st = getattr(server, "refresh", None)
    watch = None if st is None else st.watch.get((array, block))
    if not watch:
        return
    for mode, rec in watch.values():
        rec.note(before, obj.version, written_units(part, mode))
