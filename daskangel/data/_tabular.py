"""Tables (CSV via pandas, pandas / dask DataFrames) to CSR rows; hashing raw keys.

A table becomes rows with a label column and features from numeric and
categorical columns:

* numeric columns only: an *indexed* dataset, column ``j`` of ``numeric`` is
  feature ``j`` (zeros dropped);
* with categorical columns or cross features: every feature is a raw 63-bit key
  (a numeric column's key is a hash of its name, with the value; a categorical
  value's key is a hash of column and value, with value 1; a cross feature hashes
  two columns' values together) awaiting the feature indexer, which turns raw
  categorical logs into dummy variables without a shuffle.

Example
-------
>>> import pandas as pd
>>> df = pd.DataFrame({"y": [1, 0], "age": [3.0, 0.0], "city": ["a", "b"]})
>>> b = Table("y", ("age",), ("city",)).frame_to_batch(df)
>>> b.labels.tolist(), b.indptr.tolist(), bool(b.indices[0] == b.indices[2])
([1.0, 0.0], [0, 2, 3], False)
>>> bool((hash_keys(["a", "b", "a"]) >= 0).all())
True
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from numba import njit

from ._batch import CSRBatch, index_dtype
from ._formats import HASH_SPACE, Parsed
from ._numbers import FIELD_COUNT, NON_FINITE, NON_NUMERIC, REASONS, valid_utf8
from ._source import Split

__all__ = ["Csv", "Table", "hash_keys", "mix64"]

_MASK = np.uint64(0x7FFFFFFFFFFFFFFF)


def mix64(h: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser on a uint64 array (vectorised)."""
    h = h.astype(np.uint64, copy=True)
    with np.errstate(over="ignore"):
        h ^= h >> np.uint64(30)
        h *= np.uint64(0xBF58476D1CE4E5B9)
        h ^= h >> np.uint64(27)
        h *= np.uint64(0x94D049BB133111EB)
        h ^= h >> np.uint64(31)
    return h


def _field_seed(field: str, seed: int) -> np.uint64:
    h = pd.util.hash_array(np.array([field], dtype=object), hash_key=_hash_key(seed))
    return np.uint64(h[0])


def _hash_key(seed: int) -> str:
    return f"daskangel{seed:07d}"[:16].ljust(16, "0")


def _raw_hash(values: Any, seed: int) -> np.ndarray:
    arr = np.asarray(values)
    if arr.dtype.kind in "iub":
        return mix64(arr.astype(np.int64).view(np.uint64) ^ np.uint64(seed))
    return pd.util.hash_array(arr.astype(object), hash_key=_hash_key(seed), categorize=True)


def hash_keys(values: Any, field: str | None = None, seed: int = 0) -> np.ndarray:
    """63-bit int64 keys for raw values (strings, numbers), optionally per ``field``.

    Without ``field``, non-negative integers are their own keys; everything else
    is hashed (vectorised).  The same value and field always give the same key.
    """
    arr = np.asarray(values)
    if field is None and arr.dtype.kind in "iu" and (arr.size == 0 or int(arr.min()) >= 0):
        return arr.astype(np.int64)
    h = _raw_hash(arr, seed)
    if field is not None:
        h = mix64(h ^ _field_seed(field, seed))
    return (h & _MASK).astype(np.int64)


@dataclass(frozen=True, slots=True)
class Table:
    """Which columns are the label, numeric features, categorical features, crosses."""

    label: Any = None
    numeric: tuple[Any, ...] = ()
    categorical: tuple[Any, ...] = ()
    cross: tuple[tuple[Any, Any], ...] = ()
    seed: int = 0

    @property
    def indexed(self) -> bool:
        return not self.categorical and not self.cross

    @property
    def n_features(self) -> int:
        return len(self.numeric) if self.indexed else HASH_SPACE

    def numeric_columns(self) -> list[Any]:
        return ([self.label] if self.label is not None else []) + list(self.numeric)

    def frame_to_batch(self, df: pd.DataFrame) -> CSRBatch:
        """Rows of a (validated) DataFrame as CSR."""
        n = len(df)
        y = (
            np.zeros(n, np.float32)
            if self.label is None
            else df[self.label].to_numpy(np.float32, na_value=np.nan)
        )
        cols: list[np.ndarray] = []
        vals: list[np.ndarray] = []
        for j, c in enumerate(self.numeric):
            v = df[c].to_numpy(np.float32, na_value=np.nan)
            if self.indexed:
                key = np.full(n, j, np.int64)
            else:
                key = np.full(n, int(hash_keys([str(c)], "__numeric__", self.seed)[0]), np.int64)
            cols.append(key)
            vals.append(v)
        ones = np.ones(n, np.float32)
        for c in self.categorical:
            cols.append(hash_keys(df[c].astype(str).to_numpy(object), str(c), self.seed))
            vals.append(ones)
        for a, b in self.cross:
            ha = _raw_hash(df[a].astype(str).to_numpy(object), self.seed)
            hb = _raw_hash(df[b].astype(str).to_numpy(object), self.seed)
            with np.errstate(over="ignore"):
                h = mix64(mix64(ha ^ _field_seed(f"{a}\x00{b}", self.seed)) + hb)
            cols.append((h & _MASK).astype(np.int64))
            vals.append(ones)
        if not cols:
            return CSRBatch(
                np.zeros(n + 1, np.int64),
                np.empty(0, np.int32),
                np.empty(0, np.float32),
                y,
                self.n_features,
            )
        k = np.stack(cols, axis=1)
        v = np.stack(vals, axis=1)
        keep = v != 0
        indptr = np.concatenate([[0], np.cumsum(keep.sum(axis=1))]).astype(np.int64)
        idx = k[keep]
        return CSRBatch(
            indptr,
            idx.astype(index_dtype(int(idx.max()) if idx.size else 0)) if self.indexed else idx,
            v[keep].astype(np.float32),
            y,
            self.n_features,
        )


@njit(nogil=True, cache=True)
def _field_counts(buf, sep, quote):  # type: ignore[no-untyped-def]
    """Per line: (start, end, fields); blank lines get fields = 0 (quote-aware)."""
    n = buf.shape[0]
    n_nl = 0
    for k in range(n):
        if buf[k] == 10:
            n_nl += 1
    out = np.empty((n_nl + 1, 3), np.int64)
    m = 0
    pos = 0
    while pos < n:
        f = 1
        inq = False
        e = pos
        blank = True
        while e < n and buf[e] != 10:  # one record per line: quotes end there too
            c = buf[e]
            if c == quote:
                inq = not inq
            elif c == sep and not inq:
                f += 1
            if c != 32 and c != 9 and c != 13:
                blank = False
            e += 1
        out[m, 0] = pos
        out[m, 1] = e
        out[m, 2] = 0 if blank else f
        m += 1
        pos = e + 1
    return out[:m]


@dataclass(frozen=True, slots=True)
class Csv:
    """CSV lines parsed by pandas into a :class:`Table` (one record per line)."""

    names: tuple[str, ...]
    table: Table
    sep: str = ","

    row_ids = False

    @property
    def indexed(self) -> bool:
        return self.table.indexed

    def parse(
        self, data: np.ndarray, line0: int, split: Split, stop: bool, detail: int, max_line: int
    ) -> Parsed:
        lines = _field_counts(data, ord(self.sep), ord('"'))
        line_no = np.arange(lines.shape[0])
        if split.shares > 1:
            mine = (line0 + line_no) % split.shares == split.share
            lines, line_no = lines[mine], line_no[mine]
        counts = np.zeros(16, np.int64)
        errs: list[tuple[int, int]] = []  # (index into lines, reason)
        ln = np.arange(lines.shape[0])
        blank = lines[:, 2] == 0
        bad_count = ~blank & (lines[:, 2] != len(self.names))
        good = ~blank & ~bad_count
        errs += [(int(i), FIELD_COUNT) for i in ln[bad_count]]
        rows_at = ln[good]
        try:
            df = self._frame(data, lines[good], bool(good.all()) and split.shares == 1)
        except (pd.errors.ParserError, ValueError):
            # rare (e.g. an unbalanced quote): find the lines pandas rejects one by one
            ok = np.array([self._parses(data, lines[i]) for i in rows_at], np.bool_)
            errs += [(int(i), FIELD_COUNT) for i in rows_at[~ok]]
            rows_at = rows_at[ok]
            df = self._frame(data, lines[rows_at], False)
        bad_row = np.zeros(len(df), np.bool_)
        reason = np.zeros(len(df), np.int64)
        for c in self.table.numeric_columns():
            col = df[c]
            if col.dtype.kind not in "iuf":  # some cell is not a number: find which
                col = pd.to_numeric(col, errors="coerce")
            num = col.to_numpy(np.float64, na_value=np.nan)
            nonnum = np.isnan(num)
            inf = np.isinf(num)
            new = (nonnum | inf) & ~bad_row
            reason[new & nonnum] = NON_NUMERIC
            reason[new & inf] = NON_FINITE
            bad_row |= new
            df[c] = num
        errs += [(int(rows_at[i]), int(reason[i])) for i in np.flatnonzero(bad_row)]
        errs.sort()
        stopped = bool(stop and errs)
        if stopped:
            keep_rows = rows_at < errs[0][0]
            df, bad_row = df[keep_rows], bad_row[keep_rows]
            errs = errs[:1]
        err = np.zeros((min(len(errs), detail), 5), np.int64)
        for k, (i, r) in enumerate(errs):
            s, e = int(lines[i, 0]), int(lines[i, 1])
            r = r if valid_utf8(data, s, e) else REASONS.index("invalid_utf8")
            counts[r] += 1
            if k < detail:
                err[k] = (line_no[i], s, s, e, r)
        ok = df[~bad_row]
        batch = self.table.frame_to_batch(ok) if len(ok) else None
        n_lines = int(np.count_nonzero(data == 10)) + int(data.shape[0] > 0 and data[-1] != 10)
        return Parsed(batch, err, counts, n_lines, stopped)

    def _frame(self, data: np.ndarray, lines: np.ndarray, whole: bool) -> pd.DataFrame:
        import io

        if lines.shape[0] == 0:
            return pd.DataFrame({c: pd.Series([], dtype=object) for c in self.names})
        if whole:
            return self._read(io.BytesIO(data.tobytes()))
        lens = lines[:, 1] - lines[:, 0] + 1
        starts = lines[:, 0]
        idx = np.repeat(starts - np.concatenate([[0], np.cumsum(lens)[:-1]]), lens) + np.arange(
            int(lens.sum())
        )
        idx = np.minimum(idx, data.shape[0] - 1)
        body = data[idx].copy()
        body[np.cumsum(lens) - 1] = 10
        return self._read(io.BytesIO(body.tobytes()))

    def _parses(self, data: np.ndarray, line: np.ndarray) -> bool:
        import io

        try:
            df = self._read(io.BytesIO(data[line[0] : line[1]].tobytes() + b"\n"))
        except (pd.errors.ParserError, ValueError):
            return False
        return len(df) == 1

    def _read(self, f: Any) -> pd.DataFrame:
        numeric = set(self.table.numeric_columns())
        return pd.read_csv(
            f,
            header=None,
            names=list(self.names),
            sep=self.sep,
            dtype={c: str for c in self.names if c not in numeric},
            na_values={c: [""] for c in numeric},
            keep_default_na=False,
            skip_blank_lines=False,
            engine="c",
        )
