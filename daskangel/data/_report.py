"""What a parse found wrong: per-reason counts and the first bad lines.

A worker never raises on bad data.  Each split's parse returns a
:class:`SplitReport` (lines seen, counts per reason, the first bad lines with
split-relative line numbers); the driver turns line numbers into file line numbers
(by adding the lines of the earlier splits of the same file) and, under
``errors='raise'``, raises :class:`~daskangel.errors.MalformedInputError` for the
first bad line of the input.

Example
-------
>>> r = SplitReport(("f.txt", 0, 0, 0), 3, {"bad_index": 1}, [(1, "bad_index", "x:1", "1 x:1")])
>>> bad = resolve_lines([r])
>>> bad[0].line, bad[0].message
(2, "f.txt, line 2: bad index (not a non-negative integer) in 'x:1': '1 x:1'")
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ._numbers import REASONS

__all__ = ["ERROR_MODES", "BadLine", "SplitReport", "describe", "resolve_lines"]

ERROR_MODES = ("raise", "skip", "collect")

_TEXT = {
    "bad_index": "bad index (not a non-negative integer)",
    "non_numeric": "non-numeric value",
    "non_finite": "non-finite value (nan, inf, or outside float32's range)",
    "index_out_of_range": "index >= the declared n_features",
    "negative_index": "negative index (or 0 in a 1-based file)",
    "missing_colon": "missing ':' between index and value",
    "invalid_utf8": "invalid UTF-8",
    "line_too_long": "line longer than daskangel.data.max-line-bytes",
    "field_count": "wrong number of fields",
    "missing_label": "missing label (the line starts with an index:value pair)",
}


@dataclass(frozen=True, slots=True)
class BadLine:
    """One malformed input line: file, 1-based line number, reason and message."""

    file: str
    line: int
    reason: str
    message: str


@dataclass(slots=True)
class SplitReport:
    """What the parse of one split saw.

    ``key`` is ``(file, file order, split start, share)``; ``details`` holds
    ``(line_in_split, reason, token, text)`` for the first bad lines (0-based).
    """

    key: tuple[str, int, int, int]
    n_lines: int
    counts: dict[str, int] = field(default_factory=dict)
    details: list[tuple[int, str, str, str]] = field(default_factory=list)
    stopped: bool = False
    plain: bool = True  # a byte range of an uncompressed file (else the whole stream)
    at_limit: tuple[int, int] = (0, -1)  # rows with index == n_features (auto base), first line

    def add_counts(self, counts: np.ndarray) -> None:
        for code in np.flatnonzero(counts):
            name = REASONS[int(code)]
            self.counts[name] = self.counts.get(name, 0) + int(counts[code])


def describe(reason: str, token: str, text: str) -> str:
    """The human part of a message: what was wrong, the token, the line."""
    what = _TEXT.get(reason, reason)
    tok = f" in {token!r}" if token and token != text else ""
    return f"{what}{tok}: {text!r}"


def resolve_lines(reports: list[SplitReport], limit: int | None = None) -> list[BadLine]:
    """Bad lines of all splits with file line numbers, in input order."""
    reports = sorted(reports, key=lambda r: r.key[1:])
    offset: dict[str, int] = {}
    found: list[tuple[int, int, BadLine]] = []
    for r in reports:
        file = r.key[0]
        base = offset.get(file, 0) if r.plain else 0
        for line, reason, token, text in r.details:
            n = base + line + 1
            msg = f"{file}, line {n}: {describe(reason, token, text)}"
            found.append((r.key[1], n, BadLine(file, n, reason, msg)))
        if r.plain:
            offset[file] = base + r.n_lines
    found.sort(key=lambda t: (t[0], t[1]))
    return [b for _, _, b in found[:limit]]


def total_counts(reports: list[SplitReport]) -> dict[str, int]:
    """Counts per reason over all splits (shares of one compressed file are disjoint)."""
    out: dict[str, int] = {}
    for r in reports:
        for k, v in r.counts.items():
            out[k] = out.get(k, 0) + v
    return dict(sorted(out.items()))
