"""Text formats: how one block of whole lines becomes CSR rows and an error record.

Each format is a frozen value object (it travels to the workers inside the parse
tasks) with ``parse(data, line0, split, stop_first, max_detail) -> Parsed``.  The
compiled parsers live in :mod:`._kernels`; this module slices their
over-allocated outputs to compact arrays (int32 indices when they fit), re-parses
the rare numbers the fast path could not round exactly, and applies label
transforms.

Example
-------
>>> import numpy as np
>>> from daskangel.data._source import FileInfo, Split
>>> s = Split(FileInfo("f", 12, None, 0), 0, 12)
>>> p = Libsvm().parse(np.frombuffer(b"1 0:2\\n-1 3:1\\n", np.uint8), 0, s, False, 10, 1024)
>>> p.batch.indices.tolist(), p.batch.labels.tolist(), p.batch.indices.dtype.name
([0, 3], [1.0, -1.0], 'int32')
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import InvalidArgumentError
from ._batch import CSRBatch, index_dtype
from ._kernels import parse_libsvm
from ._numbers import INDEX_RANGE, NEGATIVE_INDEX
from ._source import Split
from ._textkernels import parse_dense, parse_fields, parse_tokens

__all__ = [
    "HASH_SPACE",
    "LABEL_TRANSFORMS",
    "Dense",
    "Docword",
    "Libsvm",
    "Parsed",
    "Ratings",
    "Tokens",
    "transform_labels",
]

# feature space of hashed (not yet indexed) keys: 63-bit
HASH_SPACE = 2**63 - 1

LABEL_TRANSFORMS = (None, "zeroone", "posneg", "add1", "sub1")


def transform_labels(y: np.ndarray, how: str | None) -> np.ndarray:
    """Angel's label transforms.

    ``"zeroone"``: {-1, 1} -> {0, 1} (``y > 0``); ``"posneg"``: {0, 1} -> {-1, 1}
    (``y > 0`` -> 1 else -1); ``"add1"`` / ``"sub1"``: shift by one; ``None``: as read.
    """
    if how is None or y.size == 0:
        return y
    if how == "zeroone":
        return (y > 0).astype(np.float32)
    if how == "posneg":
        return np.where(y > 0, 1.0, -1.0).astype(np.float32)
    if how == "add1":
        return (y + 1).astype(np.float32)
    if how == "sub1":
        return (y - 1).astype(np.float32)
    raise InvalidArgumentError(f"label_transform: expected one of {LABEL_TRANSFORMS}, got {how!r}")


@dataclass(slots=True)
class Parsed:
    """One block's rows (``None`` if none), its bad lines and index statistics."""

    batch: CSRBatch | None
    err: np.ndarray  # (n, 5): line, line_start, token_start, token_end, reason
    counts: np.ndarray  # (16,) per reason code
    n_lines: int
    stopped: bool
    stats: np.ndarray = field(default_factory=lambda: np.array([2**62, -1, 0, -1], np.int64))


def _exact(data: np.ndarray, inexact: np.ndarray, values: np.ndarray, labels: np.ndarray) -> None:
    """Re-parse the few numbers the compiled fast path could not round exactly."""
    raw = data.tobytes() if inexact.shape[0] else b""
    for pos, s, e in inexact.tolist():
        v = np.float32(float(raw[s:e]))
        if pos >= 0:
            values[pos] = v
        else:
            labels[-1 - pos] = v


def _csr_out(out: tuple[Any, ...], data: np.ndarray, n_features: int) -> Parsed:
    indptr, indices, values, labels, err, counts, inexact, stats, n_lines, stopped = out
    nrow = indptr.shape[0] - 1
    if nrow == 0:
        return Parsed(None, err.copy(), counts, n_lines, stopped, stats)
    hi = int(stats[1])
    values = values.copy()
    labels = labels.copy()
    _exact(data, inexact, values, labels)
    batch = CSRBatch(
        indptr.copy(),
        indices.astype(index_dtype(max(hi, 0))),
        values,
        labels,
        n_features if n_features > 0 else hi + 1,
    )
    return Parsed(batch, err.copy(), counts, n_lines, stopped, stats)


def _run(
    kernel: Any,
    data: np.ndarray,
    args: tuple[Any, ...],
    line0: int,
    split: Split,
    stop: bool,
    detail: int,
    max_line: int,
) -> tuple[Any, ...]:
    """``kernel(data, *args, stop, max_line, line0, share, shares, detail)``: the
    compiled line parsers' common call (``args``: the format's own settings)."""
    return kernel(data, *args, stop, max_line, line0, split.share, split.shares, detail)  # type: ignore[no-any-return]


@dataclass(frozen=True, slots=True)
class Libsvm:
    """``label idx:val ...`` (``dummy``: ``label idx idx ...``, values 1).

    ``base``: 0, 1, or -1 to auto-detect (indices kept raw until every split is
    read; a dataset with no index 0 is 1-based, as sklearn decides).
    """

    dummy: bool = False
    base: int = -1
    n_features: int = -1

    row_ids = False
    indexed = True

    def parse(
        self, data: np.ndarray, line0: int, split: Split, stop: bool, detail: int, max_line: int
    ) -> Parsed:
        args = (self.dummy, self.base, self.n_features)
        out = _run(parse_libsvm, data, args, line0, split, stop, detail, max_line)
        return _csr_out(out, data, self.n_features)


@dataclass(frozen=True, slots=True)
class Dense:
    """``[label] v1 v2 ... v_n`` with exactly ``n_values`` numbers after the label."""

    n_values: int
    has_label: bool = True

    row_ids = False
    indexed = True

    def parse(
        self, data: np.ndarray, line0: int, split: Split, stop: bool, detail: int, max_line: int
    ) -> Parsed:
        args = (self.has_label, self.n_values)
        out = _run(parse_dense, data, args, line0, split, stop, detail, max_line)
        return _csr_out(out, data, self.n_values)


@dataclass(frozen=True, slots=True)
class Tokens:
    """Whitespace-tokenised text, one document per line, tokens as hashed keys."""

    lowercase: bool = True
    seed: int = 0

    row_ids = False
    indexed = False

    def parse(
        self, data: np.ndarray, line0: int, split: Split, stop: bool, detail: int, max_line: int
    ) -> Parsed:
        args = (self.lowercase, self.seed)
        out = _run(parse_tokens, data, args, line0, split, stop, detail, max_line)
        p = _csr_out(out, data, HASH_SPACE)
        if p.batch is not None:
            b = p.batch
            p.batch = CSRBatch(b.indptr, b.indices.astype(np.int64), b.data, b.labels, HASH_SPACE)
        return p


def _group(keys: np.ndarray, cols: np.ndarray, vals: np.ndarray, n_features: int) -> CSRBatch:
    """Rows grouped by ``keys`` (sorted), one CSR row per distinct key."""
    order = np.argsort(keys, kind="stable")
    k = keys[order]
    uniq, starts = np.unique(k, return_index=True)
    indptr = np.append(starts, k.shape[0]).astype(np.int64)
    c = cols[order]
    return CSRBatch(
        indptr,
        c.astype(index_dtype(int(c.max()) if c.size else 0)),
        vals[order].astype(np.float32),
        np.zeros(uniq.shape[0], np.float32),
        n_features,
        uniq.astype(np.int64),
    )


@dataclass(frozen=True, slots=True)
class _Fields:
    """Lines of numeric fields ``row col value [extra]``, grouped into rows by ``row``."""

    separators: str = " \t,;:|"
    n_features: int = -1  # declared column count (docword's W), -1: from the data
    one_based: bool = False
    extra: int = 0  # optional trailing value fields (a timestamp)

    row_ids = True
    indexed = True

    def group_key(self, line: bytes) -> int | None:
        """The row key (first field) of a raw line, ``None`` if it has none."""
        seps = set(self.separators.encode()) | {9, 13, 32}
        line = line.lstrip()
        for i, ch in enumerate(line):
            if ch in seps:
                line = line[:i]
                break
        try:
            return int(line)
        except ValueError:
            return None

    def parse(
        self, data: np.ndarray, line0: int, split: Split, stop: bool, detail: int, max_line: int
    ) -> Parsed:
        seps = np.zeros(256, np.bool_)
        for ch in self.separators.encode():
            seps[ch] = True
        kinds = np.array([0, 0, 1] + [1] * self.extra, np.int8)
        fields, _, rline, err, counts, n_lines, stopped = parse_fields(
            data, kinds, 3, seps, stop, max_line, detail
        )
        rows = fields[:, 0].astype(np.int64)
        cols = fields[:, 1].astype(np.int64)
        checks = []
        if self.one_based:
            checks.append(((rows < 1) | (cols < 1), NEGATIVE_INDEX))
            rows, cols = rows - 1, cols - 1
        if self.n_features > 0:
            checks.append((cols >= self.n_features, INDEX_RANGE))
        for k in range(len(checks)):
            bad, reason = checks[k]
            if bad.any():
                err, counts = _add_errors(data, err, counts, rline[bad], reason, detail)
                keep = ~bad
                rows, cols, fields, rline = rows[keep], cols[keep], fields[keep], rline[keep]
                checks = [(b[keep], r) for b, r in checks]
        if split.shares > 1:
            mine = rows % split.shares == split.share
            rows, cols, fields = rows[mine], cols[mine], fields[mine]
            if err.shape[0]:
                err = err[(line0 + err[:, 0]) % split.shares == split.share]
        stats = np.array(
            [cols.min() if cols.size else 2**62, cols.max() if cols.size else -1, 0, -1]
        )
        if rows.shape[0] == 0:
            return Parsed(None, err, counts, n_lines, stopped, stats)
        nf = self.n_features if self.n_features > 0 else int(cols.max()) + 1
        return Parsed(_group(rows, cols, fields[:, 2], nf), err, counts, n_lines, stopped, stats)


def _add_errors(
    data: np.ndarray,
    err: np.ndarray,
    counts: np.ndarray,
    lines: np.ndarray,
    reason: int,
    detail: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Add errors found after parsing (by line number) to a kernel's record."""
    counts = counts.copy()
    counts[reason] += lines.shape[0]
    room = max(0, detail - err.shape[0])
    if room:
        nl = np.flatnonzero(data == 10)
        starts = np.concatenate([[0], nl + 1])
        ends = np.concatenate([nl, [data.shape[0]]])
        ln = lines[:room]
        extra = np.stack([ln, starts[ln], starts[ln], ends[ln], np.full_like(ln, reason)], 1)
        err = np.concatenate([err, extra])
        err = err[np.argsort(err[:, 0], kind="stable")][:detail]
    return err, counts


@dataclass(frozen=True, slots=True)
class Docword(_Fields):
    """UCI bag-of-words ``docID wordID count`` lines (1-based; header of 3 lines)."""

    separators: str = " \t"
    one_based: bool = True


@dataclass(frozen=True, slots=True)
class Ratings(_Fields):
    """``user item rating [time]`` triples, any separator; ids kept as given."""

    extra: int = 1
