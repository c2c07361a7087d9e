"""Compiled line parser for libsvm / dummy rows: one pass over a block of whole
lines, CSR out.  :mod:`._textkernels` has the parsers of dense rows, fields and
tokens, built the same way.

Each parser takes a ``uint8`` block holding whole lines and returns the CSR arrays
of the good lines plus a record of the bad ones.  A bad line is rolled back (none
of its tokens is kept) and described by a row of ``err``:
``(line, line_start, token_start, token_end, reason)``, line relative to the block,
offsets into it; only the first ``max_detail`` are described, all are counted in
``counts[reason]``.  With ``stop_first`` a parser stops at the first bad line.

Numbers whose fast float64 parse might round to a different float32 are listed
in ``inexact`` as ``(position, start, end)`` (a negative position ``-1 - row``
names a label) and re-parsed exactly by the caller; on ordinary data there are
none.

Example
-------
>>> import numpy as np
>>> buf = np.frombuffer(b"1 1:0.5 3:2\\n-1 2:1\\n", np.uint8)
>>> out = parse_libsvm(buf, False, -1, -1, False, 1 << 20, 0, 0, 1, 10)
>>> out[0].tolist(), out[1].tolist(), out[3].tolist()
([0, 2, 3], [1, 3, 2], [1.0, -1.0])
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ._numbers import (
    BAD_INDEX,
    F_BAD,
    F_INEXACT,
    F_NONFINITE,
    INDEX_RANGE,
    INVALID_UTF8,
    LINE_TOO_LONG,
    MISSING_COLON,
    MISSING_LABEL,
    NEGATIVE_INDEX,
    NON_FINITE,
    NON_NUMERIC,
    is_space,
    parse_float,
    valid_utf8,
)

__all__ = ["parse_libsvm"]


@njit(nogil=True, cache=True, inline="always")
def _ends_token(buf, j, le):  # type: ignore[no-untyped-def]
    return j >= le or is_space(buf[j]) or buf[j] == 35


_POW10 = np.array([10.0**i for i in range(23)])


@njit(nogil=True, cache=True, inline="always")
def _token_end(buf, i, le):  # type: ignore[no-untyped-def]
    while i < le and not is_space(buf[i]):
        i += 1
    return i


@njit(nogil=True, cache=True)
def _has_colon(buf, i, le):  # type: ignore[no-untyped-def]
    """Whether the token starting at ``i`` holds a ':' (bad lines only)."""
    while i < le and not is_space(buf[i]) and buf[i] != 35:
        if buf[i] == 58:
            return True
        i += 1
    return False


@njit(nogil=True, cache=True)
def _grow(a, n):  # type: ignore[no-untyped-def]
    if n < a.shape[0]:
        return a
    b = np.empty((a.shape[0] * 2, a.shape[1]), a.dtype)
    b[: a.shape[0]] = a
    return b


@njit(nogil=True, cache=True)
def _count(buf, dummy):  # type: ignore[no-untyped-def]
    """(newlines, token upper bound) of a block: ':' count, or word count for dummy."""
    n_nl = 0
    n_tok = 0
    prev_space = True
    for k in range(buf.shape[0]):
        c = buf[k]
        if c == 10:
            n_nl += 1
            prev_space = True
        elif dummy:
            sp = is_space(c)
            if not sp and prev_space:
                n_tok += 1
            prev_space = sp
        elif c == 58:
            n_tok += 1
    return n_nl, n_tok


@njit(nogil=True, cache=True)
def _line_end(buf, pos, n):  # type: ignore[no-untyped-def]
    e = pos
    while e < n and buf[e] != 10:
        e += 1
    return e


@njit(nogil=True, cache=True)
def _reject(counts, err, n_err, max_detail, reason, line, ls, ts, te):  # type: ignore[no-untyped-def]
    """Count a rejected line under ``reason`` and keep its detail (line number,
    line start, offending token's start and end, reason) while fewer than
    ``max_detail`` are kept; the number kept now.  Every parser's reject path."""
    counts[reason] += 1
    if n_err < max_detail:
        err[n_err, 0] = line
        err[n_err, 1] = ls
        err[n_err, 2] = ts
        err[n_err, 3] = te
        err[n_err, 4] = reason
        return n_err + 1
    return n_err


@njit(nogil=True, cache=True)
def _csr_buffers(buf, dummy, max_detail):  # type: ignore[no-untyped-def]
    """A line parser's outputs, sized for ``buf``: ``(indptr, labels, indices, values,
    err, counts, inexact, stats)`` (labels zeroed; ``stats`` as :func:`parse_libsvm`
    describes)."""
    n_nl, n_tok = _count(buf, dummy)
    return (
        np.zeros(n_nl + 2, np.int64),
        np.zeros(n_nl + 1, np.float32),
        np.empty(max(n_tok, 1), np.int64),
        np.empty(max(n_tok, 1), np.float32),
        np.zeros((max(max_detail, 1), 5), np.int64),
        np.zeros(16, np.int64),
        np.empty((8, 3), np.int64),
        np.array([np.iinfo(np.int64).max, -1, 0, -1], np.int64),
    )


@njit(nogil=True, cache=True, inline="always")
def _next_line(buf, pos, n):  # type: ignore[no-untyped-def]
    """``(start, end, next start)`` of the line starting at ``pos`` (``end``: its
    newline, or ``n``)."""
    le = _line_end(buf, pos, n)
    return pos, le, le + 1


@njit(nogil=True, cache=True, inline="always")
def _skipped(line0, line, keep_k, keep_n):  # type: ignore[no-untyped-def]
    """Whether line ``line`` of a block starting at file line ``line0`` is another
    share's (every ``keep_n``-th line from ``keep_k`` is this share's)."""
    return keep_n > 1 and (line0 + line) % keep_n != keep_k


@njit(nogil=True, cache=True)
def parse_libsvm(buf, dummy, base, limit, stop_first, max_line, line0, keep_k, keep_n, max_detail):  # type: ignore[no-untyped-def]
    """Parse libsvm ``label idx:val ...`` (or Angel dummy ``label idx idx ...``) lines.

    ``base`` is 0 or 1 (indices are shifted to 0-based here) or -1 (auto: kept raw,
    decided later).  ``limit`` is the declared n_features (-1: none).  Lines whose
    index ``(line0 + line) % keep_n != keep_k`` are skipped (a share of a compressed
    file).  Returns ``(indptr, indices, values, labels, err, counts, inexact, stats,
    n_lines, stopped)``; ``stats`` is ``[min_index, max_index, n_rows_at_limit,
    first_line_at_limit]``.
    """
    n = buf.shape[0]
    indptr, labels, indices, values, err, counts, inexact, stats = _csr_buffers(
        buf, dummy, max_detail
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
        at_limit = False
        label = 0.0
        if le - ls > max_line:
            reason = LINE_TOO_LONG
            te = le
        else:
            i = ls
            while i < le and is_space(buf[i]):
                i += 1
            if i == le or buf[i] == 35:
                continue  # blank line or comment
            ts = i
            v, j, st = parse_float(buf, i, le)
            if st == F_BAD or not _ends_token(buf, j, le):
                # "3:1 5:2": the line starts with a feature, its label is missing
                reason = MISSING_LABEL if _has_colon(buf, i, le) else NON_NUMERIC
            elif st == F_NONFINITE:
                reason = NON_FINITE
            else:
                label = v
                if st == F_INEXACT:
                    inexact = _grow(inexact, n_inexact)
                    inexact[n_inexact, 0] = -1 - nrow
                    inexact[n_inexact, 1] = ts
                    inexact[n_inexact, 2] = j
                    n_inexact += 1
                i = j
                while True:
                    while i < le and is_space(buf[i]):
                        i += 1
                    if i >= le or buf[i] == 35:
                        break
                    ts = i
                    if (
                        buf[i] == 113
                        and i + 3 < le
                        and buf[i + 1] == 105
                        and buf[i + 2] == 100
                        and buf[i + 3] == 58
                    ):
                        i = _token_end(buf, i, le)  # qid:N is accepted and ignored
                        continue
                    # the hot path is written out here: calls to compiled helpers
                    # (not inlined by numba) measured 2-3x slower on short tokens
                    neg = buf[i] == 45
                    j = i + 1 if neg else i
                    d0 = j
                    idx = 0
                    while j < le:
                        c = buf[j]
                        if c < 48 or c > 57:
                            break
                        idx = idx * 10 + (c - 48)
                        j += 1
                    if j == d0 or j - d0 > 18:
                        # "abc": not an index:value pair at all, vs "x7:1"
                        colon = dummy or _has_colon(buf, i, le)
                        reason = BAD_INDEX if colon else MISSING_COLON
                        break
                    val = 1.0
                    st = 0
                    j2 = j
                    if dummy:
                        if not _ends_token(buf, j, le):
                            reason = BAD_INDEX
                            break
                    else:
                        if j >= le or buf[j] != 58:
                            # "3x:1" is a bad index, "3" or "3x" lacks its colon
                            reason = BAD_INDEX if _has_colon(buf, j, le) else MISSING_COLON
                            break
                        # fast path: [-]digits[.digits], at most 15 digits, then a delimiter
                        k = j + 1
                        vneg = k < le and buf[k] == 45
                        if vneg:
                            k += 1
                        m = 0
                        nd = 0
                        frac = 0
                        while k < le:
                            c = buf[k]
                            if c < 48 or c > 57:
                                break
                            m = m * 10 + (c - 48)
                            nd += 1
                            k += 1
                        if k < le and buf[k] == 46:
                            k += 1
                            while k < le:
                                c = buf[k]
                                if c < 48 or c > 57:
                                    break
                                m = m * 10 + (c - 48)
                                nd += 1
                                frac += 1
                                k += 1
                        c = buf[k] if k < le else 32
                        if 0 < nd <= 15 and (c == 32 or 9 <= c <= 13 or c == 35):
                            val = m / _POW10[frac]
                            if vneg:
                                val = -val
                            j2 = k
                        else:
                            val, j2, st = parse_float(buf, j + 1, le)
                            if st == F_BAD or not _ends_token(buf, j2, le):
                                reason = NON_NUMERIC
                                break
                            if st == F_NONFINITE:
                                reason = NON_FINITE
                                break
                    if neg:
                        reason = NEGATIVE_INDEX
                        break
                    if base == 1:
                        if idx == 0:
                            reason = NEGATIVE_INDEX
                            break
                        idx -= 1
                    if limit >= 0:
                        if base == -1:
                            if idx > limit:
                                reason = INDEX_RANGE
                                break
                            if idx == limit:
                                at_limit = True
                        elif idx >= limit:
                            reason = INDEX_RANGE
                            break
                    indices[nnz] = idx
                    values[nnz] = val
                    if st == F_INEXACT:
                        inexact = _grow(inexact, n_inexact)
                        inexact[n_inexact, 0] = nnz
                        inexact[n_inexact, 1] = j + 1
                        inexact[n_inexact, 2] = j2
                        n_inexact += 1
                    nnz += 1
                    i = j2
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
        for k in range(nnz0, nnz):
            if indices[k] < stats[0]:
                stats[0] = indices[k]
            if indices[k] > stats[1]:
                stats[1] = indices[k]
        if at_limit:
            stats[2] += 1
            if stats[3] < 0:
                stats[3] = line0 + cur
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
