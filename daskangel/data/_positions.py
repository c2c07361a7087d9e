"""Where each row of a persisted Dataset stood in its input (file order, array order).

A partition joins the rows of its pieces one after the other.  Each piece
records its row count and its *stride*: 1 for a contiguous run of the input (a
byte range of a file, a range of an array's rows, a whole compressed stream),
``n`` for share ``k`` of ``n`` of a compressed file, which holds the lines
``L`` with ``L % n == k``.  With the pieces' report keys ``(file, file order,
start, share)`` the driver sorts the pieces into input order and numbers the
rows, without moving them.

Interleaved shares are numbered by line: exact when every line after the
header gave one row.  Otherwise (bad lines skipped in a compressed file read by
several tasks) the order is unknown and :func:`positions` refuses, naming the
file, rather than guess.

Example
-------
>>> from daskangel.data._report import SplitReport
>>> a, b = SplitReport(("f", 0, 0, 0), 3), SplitReport(("f", 0, 100, 0), 2)
>>> [p.tolist() for p in positions([([b], ((2, 1),)), ([a], ((3, 1),))])]
[[3, 4], [0, 1, 2]]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import InvalidStateError

__all__ = ["positions"]

# one partition: its pieces' reports and ((rows, stride) per piece), or None if unknown
PartOrigin = tuple[list[Any], "tuple[tuple[int, int], ...] | None"]


def positions(parts: list[PartOrigin], header_lines: int = 0) -> list[np.ndarray]:
    """The input position (int64, 0-based) of every row of every partition.

    Raises :class:`~daskangel.errors.InvalidStateError` when the partitions do not
    record where their rows came from (a dataset rewritten without it) or when
    interleaved shares cannot be numbered exactly (see the module docstring).
    """
    pieces: list[tuple[tuple[int, int], int, int, int, int, str]] = []
    for i, (reports, origin) in enumerate(parts):
        if origin is None or len(origin) != len(reports):
            raise InvalidStateError(
                f"partition {i} does not record where its rows stood in the input, so "
                "rows cannot be put back in input order"
            )
        for j, (rep, (_n, stride)) in enumerate(zip(reports, origin, strict=True)):
            key = rep.key
            pieces.append(((int(key[1]), int(key[2])), int(key[3]), int(stride), i, j, str(key[0])))
    # runs of the input in order: (file order, start); within a run, shares
    pieces.sort(key=lambda p: (p[0], p[1] if p[2] == 1 else 0))
    rows = {(i, j): int(n) for i, (_r, o) in enumerate(parts) for j, (n, _s) in enumerate(o or ())}
    place: dict[tuple[int, int], np.ndarray] = {}
    offset = 0
    k = 0
    while k < len(pieces):
        run, _share, stride, i, j, name = pieces[k]
        if stride == 1:
            n = rows[(i, j)]
            place[(i, j)] = np.arange(offset, offset + n, dtype=np.int64)
            offset += n
            k += 1
            continue
        group = [p for p in pieces[k:] if p[0] == run]
        k += len(group)
        total = sum(rows[(p[3], p[4])] for p in group)
        seen = np.zeros(total, np.int64)
        for _run, sh, st, gi, gj, _name in group:
            first = header_lines + (sh - header_lines) % st
            pos = first - header_lines + st * np.arange(rows[(gi, gj)], dtype=np.int64)
            if pos.size and pos[-1] >= total:
                seen[:] = 2
                break
            np.add.at(seen, pos, 1)
            place[(gi, gj)] = offset + pos
        if not (seen == 1).all():
            raise InvalidStateError(
                f"{name}: this compressed file was read by several tasks and some of its "
                "lines gave no row (skipped or empty), so its rows' input order is "
                "unknown; read it with one task per file or without errors='skip'"
            )
        offset += total
    out = []
    for i, (_reports, origin) in enumerate(parts):
        got = [place[(i, j)] for j in range(len(origin or ()))]
        out.append(np.concatenate(got) if got else np.zeros(0, np.int64))
    return out
