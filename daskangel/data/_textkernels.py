"""Compiled line parsers for dense rows, numeric fields (ratings, docword) and
tokenised text.

They follow the conventions of :mod:`._kernels` (whole-line blocks in, bad lines
rolled back and described by ``err`` rows, per-reason ``counts``).

Example
-------
>>> import numpy as np
>>> seps = np.zeros(256, np.bool_); seps[ord(",")] = True
>>> out = parse_fields(np.frombuffer(b"1,2,3.5\\n", np.uint8), np.array([0, 0, 1], np.int8),
...                    3, seps, False, 1 << 20, 10)
>>> out[0].tolist()
[[1.0, 2.0, 3.5]]
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ._kernels import (
    _csr_buffers,
    _ends_token,
    _grow,
    _next_line,
    _reject,
    _skipped,
    _token_end,
)
from ._numbers import (
    BAD_INDEX,
    F_BAD,
    F_INEXACT,
    F_NONFINITE,
    FIELD_COUNT,
    INVALID_UTF8,
    LINE_TOO_LONG,
    NEGATIVE_INDEX,
    NON_FINITE,
    NON_NUMERIC,
    hash_bytes,
    is_space,
    parse_float,
    parse_uint,
    valid_utf8,
)

__all__ = ["parse_dense", "parse_fields", "parse_tokens"]


@njit(nogil=True, cache=True)
def parse_dense(buf, has_label, n_values, stop_first, max_line, line0, keep_k, keep_n, max_detail):  # type: ignore[no-untyped-def]
    """Parse dense ``[label] v1 v2 ...`` lines (``n_values`` numbers each) into CSR.

    Zeros are dropped (CSR keeps non-zeros only).  Returns the same tuple as
    :func:`parse_libsvm`.
    """
    n = buf.shape[0]
    indptr, labels, indices, values, err, counts, inexact, stats = _csr_buffers(
        buf, True, max_detail
    )
    n_err = n_inexact = nrow = nnz = pos = line = 0
    stopped = False
    while pos < n:
        ls, le, pos = _next_line(buf, pos, n)
        cur = line
        line += 1
        if _skipped(line0, cur, keep_k, keep_n):
            continue
        reason = 0
        ts = ls
        te = ls
        nnz0 = nnz
        inexact0 = n_inexact
        label = 0.0
        if le - ls > max_line:
            reason = LINE_TOO_LONG
            te = le
        else:
            i = ls
            while i < le and is_space(buf[i]):
                i += 1
            if i == le or buf[i] == 35:
                continue
            k = -1 if has_label else 0
            while True:
                while i < le and is_space(buf[i]):
                    i += 1
                if i >= le or buf[i] == 35:
                    break
                ts = i
                v, j, st = parse_float(buf, i, le)
                if st == F_BAD or not _ends_token(buf, j, le):
                    reason = NON_NUMERIC
                    break
                if st == F_NONFINITE:
                    reason = NON_FINITE
                    break
                if k >= n_values:
                    reason = FIELD_COUNT
                    break
                if st == F_INEXACT:
                    inexact = _grow(inexact, n_inexact)
                    inexact[n_inexact, 0] = -1 - nrow if k < 0 else nnz
                    inexact[n_inexact, 1] = i
                    inexact[n_inexact, 2] = j
                    n_inexact += 1
                if k < 0:
                    label = v
                elif v != 0.0 or st == F_INEXACT:
                    indices[nnz] = k
                    values[nnz] = v
                    nnz += 1
                k += 1
                i = j
            if reason == 0 and k != n_values:
                reason = FIELD_COUNT
                ts = ls
                te = le
        if reason != 0:
            if te <= ts:
                te = _token_end(buf, ts, le)
            if reason != LINE_TOO_LONG and not valid_utf8(buf, ls, le):
                reason = INVALID_UTF8
            n_err = _reject(counts, err, n_err, max_detail, reason, cur, ls, ts, te)
            nnz = nnz0
            n_inexact = inexact0
            if stop_first:
                stopped = True
                break
            continue
        if nnz > nnz0:
            stats[0] = min(stats[0], indices[nnz0])
            stats[1] = max(stats[1], indices[nnz - 1])
        labels[nrow] = label
        nrow += 1
        indptr[nrow] = nnz
    return (
        indptr[: nrow + 1],
        indices[:nnz],
        values[:nnz],
        labels[:nrow],
        err[:n_err],
        counts,
        inexact[:n_inexact],
        stats,
        line,
        stopped,
    )


@njit(nogil=True, cache=True)
def parse_fields(buf, kinds, n_required, seps, stop_first, max_line, max_detail):  # type: ignore[no-untyped-def]
    """Parse lines of numeric fields separated by any byte with ``seps[byte]`` set.

    ``kinds[f]`` is 0 for an id field (a non-negative integer) or 1 for a value (a
    finite number); the first ``n_required`` fields must be present, at most
    ``len(kinds)``.  Returns ``(fields float64 (rows, len(kinds)), n_fields per
    row, line per row, err, counts, n_lines, stopped)``.
    """
    n = buf.shape[0]
    n_nl = 0
    for k in range(n):
        if buf[k] == 10:
            n_nl += 1
    nf = kinds.shape[0]
    out = np.zeros((n_nl + 1, nf), np.float64)
    got = np.empty(n_nl + 1, np.int32)
    rline = np.empty(n_nl + 1, np.int64)
    err = np.zeros((max(max_detail, 1), 5), np.int64)
    counts = np.zeros(16, np.int64)
    n_err = 0
    nrow = 0
    pos = 0
    line = 0
    stopped = False
    while pos < n:
        ls, le, pos = _next_line(buf, pos, n)
        cur = line
        line += 1
        reason = 0
        ts = ls
        te = ls
        if le - ls > max_line:
            reason = LINE_TOO_LONG
            te = le
        else:
            i = ls
            while i < le and (seps[buf[i]] or is_space(buf[i])):
                i += 1
            if i == le or buf[i] == 35:
                continue
            k = 0
            while i < le:
                ts = i
                if k >= nf:
                    reason = FIELD_COUNT
                    break
                if kinds[k] == 0:
                    neg = buf[i] == 45
                    v, j, ok = parse_uint(buf, i + 1 if neg else i, le)
                    fv = float(v)
                    if not ok or not (j >= le or seps[buf[j]] or is_space(buf[j])):
                        reason = BAD_INDEX
                        break
                    if neg:
                        reason = NEGATIVE_INDEX
                        break
                else:
                    fv, j, st = parse_float(buf, i, le)
                    if st == F_BAD or not (j >= le or seps[buf[j]] or is_space(buf[j])):
                        reason = NON_NUMERIC
                        break
                    if st == F_NONFINITE:
                        reason = NON_FINITE
                        break
                out[nrow, k] = fv
                k += 1
                i = j
                while i < le and (seps[buf[i]] or is_space(buf[i])):
                    i += 1
            if reason == 0 and k < n_required:
                reason = FIELD_COUNT
                ts = ls
                te = le
            got[nrow] = k
        if reason != 0:
            if te <= ts:
                te = ts
                while te < le and not (seps[buf[te]] or is_space(buf[te])):
                    te += 1
            if reason != LINE_TOO_LONG and not valid_utf8(buf, ls, le):
                reason = INVALID_UTF8
            n_err = _reject(counts, err, n_err, max_detail, reason, cur, ls, ts, te)
            if stop_first:
                stopped = True
                break
            continue
        rline[nrow] = cur
        nrow += 1
    return out[:nrow], got[:nrow], rline[:nrow], err[:n_err], counts, line, stopped


@njit(nogil=True, cache=True)
def parse_tokens(buf, lowercase, seed, stop_first, max_line, line0, keep_k, keep_n, max_detail):  # type: ignore[no-untyped-def]
    """Tokenise lines on whitespace into bags of hashed tokens (one row per line).

    Each token's key is a 63-bit hash of its bytes (ASCII lower-cased when
    ``lowercase``); a row holds each distinct key once with its count as value,
    keys sorted.  Blank lines are skipped.  Returns the tuple of
    :func:`parse_libsvm` (labels are zeros).
    """
    n = buf.shape[0]
    indptr, labels, indices, values, err, counts, _, stats = _csr_buffers(buf, True, max_detail)
    scratch = np.empty(256, np.uint8)
    n_err = nrow = nnz = pos = line = 0
    stopped = False
    while pos < n:
        ls, le, pos = _next_line(buf, pos, n)
        cur = line
        line += 1
        if _skipped(line0, cur, keep_k, keep_n):
            continue
        reason = 0
        nnz0 = nnz
        high = False
        if le - ls > max_line:
            reason = LINE_TOO_LONG
        else:
            i = ls
            while i < le:
                while i < le and is_space(buf[i]):
                    i += 1
                if i >= le:
                    break
                ts = i
                while i < le and not is_space(buf[i]):
                    if buf[i] >= 128:
                        high = True
                    i += 1
                if lowercase:
                    if i - ts > scratch.shape[0]:
                        scratch = np.empty(2 * (i - ts), np.uint8)
                    for k in range(ts, i):
                        c = buf[k]
                        scratch[k - ts] = c | 32 if 65 <= c <= 90 else c
                    indices[nnz] = hash_bytes(scratch, 0, i - ts, seed)
                else:
                    indices[nnz] = hash_bytes(buf, ts, i, seed)
                nnz += 1
            if high and not valid_utf8(buf, ls, le):
                reason = INVALID_UTF8
        if reason != 0:
            n_err = _reject(counts, err, n_err, max_detail, reason, cur, ls, ls, le)
            nnz = nnz0
            if stop_first:
                stopped = True
                break
            continue
        if nnz == nnz0:
            continue  # blank line
        srt = np.sort(indices[nnz0:nnz])
        w = nnz0
        for k in range(srt.shape[0]):
            if k > 0 and srt[k] == srt[k - 1]:
                values[w - 1] += 1.0
            else:
                indices[w] = srt[k]
                values[w] = 1.0
                w += 1
        nnz = w
        stats[0] = min(stats[0], indices[nnz0])
        stats[1] = max(stats[1], indices[nnz - 1])
        nrow += 1
        indptr[nrow] = nnz
    return (
        indptr[: nrow + 1],
        indices[:nnz],
        values[:nnz],
        labels[:nrow],
        err[:n_err],
        counts,
        np.empty((0, 3), np.int64),
        stats,
        line,
        stopped,
    )
