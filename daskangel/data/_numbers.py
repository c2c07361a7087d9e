"""Compiled scanners shared by the text parsers: numbers, integers, UTF-8, hashing.

Every function here works on a ``uint8`` buffer and byte offsets, is compiled with
numba (``nogil=True``) and is inlined into the line parsers of :mod:`._kernels`.
Nothing here allocates.

Reason codes (:data:`REASONS`) are shared by every parser; the Python side turns a
code into the reason string users see in ``Dataset.skipped``.

Example
-------
>>> import numpy as np
>>> buf = np.frombuffer(b"-1.5e2 ", np.uint8)
>>> parse_float(buf, 0, buf.shape[0])[:3]
(-150.0, 6, 0)
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

__all__ = [
    "BAD_INDEX",
    "FIELD_COUNT",
    "F_BAD",
    "F_INEXACT",
    "F_NONFINITE",
    "F_OK",
    "INDEX_RANGE",
    "INVALID_UTF8",
    "LINE_TOO_LONG",
    "MISSING_COLON",
    "MISSING_LABEL",
    "NEGATIVE_INDEX",
    "NON_FINITE",
    "NON_NUMERIC",
    "REASONS",
    "hash_bytes",
    "is_space",
    "parse_float",
    "parse_uint",
    "valid_utf8",
]

# reason codes of a malformed line (index into REASONS)
BAD_INDEX = 1
NON_NUMERIC = 2
NON_FINITE = 3
INDEX_RANGE = 4
NEGATIVE_INDEX = 5
MISSING_COLON = 6
INVALID_UTF8 = 7
LINE_TOO_LONG = 8
FIELD_COUNT = 9
MISSING_LABEL = 10

REASONS = (
    "ok",
    "bad_index",
    "non_numeric",
    "non_finite",
    "index_out_of_range",
    "negative_index",
    "missing_colon",
    "invalid_utf8",
    "line_too_long",
    "field_count",
    "missing_label",
)

# status of parse_float
F_OK = 0
F_BAD = 1
F_NONFINITE = 2
F_INEXACT = 3  # finite, but the fast path may be 1 ulp off in float32: re-parse slowly

_POW10 = np.array([10.0**i for i in range(23)])
_F32_MAX = float(np.finfo(np.float32).max)
_F32_TINY = float(np.finfo(np.float32).tiny)


@njit(nogil=True, cache=True, inline="always")
def is_space(c):  # type: ignore[no-untyped-def]
    """Space, tab, CR, vertical tab or form feed (a newline ends the line earlier)."""
    return c == 32 or c == 9 or c == 13 or c == 11 or c == 12


@njit(nogil=True, cache=True, inline="always")
def _lower(c):  # type: ignore[no-untyped-def]
    return c | 32 if 65 <= c <= 90 else c


@njit(nogil=True, cache=True)
def _word(buf, i, end, w0, w1, w2):  # type: ignore[no-untyped-def]
    """True when buf[i:i+3] spells the three lower-case letters w0 w1 w2."""
    return (
        i + 2 < end
        and _lower(buf[i]) == w0
        and _lower(buf[i + 1]) == w1
        and _lower(buf[i + 2]) == w2
    )


@njit(nogil=True, cache=True)
def parse_float(buf, i, end):  # type: ignore[no-untyped-def]
    """Parse a decimal number starting at ``i``; return ``(value, next, status)``.

    ``status`` is ``F_OK``, ``F_BAD`` (not a number), ``F_NONFINITE`` (``nan``,
    ``inf`` or a value outside float32's range) or ``F_INEXACT`` (a long mantissa or
    a large exponent put the float64 result within a few ulps of a float32 rounding
    midpoint; the caller re-parses those few tokens exactly).  ``next`` is the
    offset after the number; the caller checks that a delimiter follows.
    """
    neg = False
    if i < end and (buf[i] == 45 or buf[i] == 43):
        neg = buf[i] == 45
        i += 1
    mant = np.int64(0)
    exp = 0
    digits = 0
    truncated = False
    while i < end and 48 <= buf[i] <= 57:
        digits += 1
        if mant < 100000000000000000:
            mant = mant * 10 + (buf[i] - 48)
        else:
            exp += 1
            truncated = truncated or buf[i] != 48
        i += 1
    if i < end and buf[i] == 46:
        i += 1
        while i < end and 48 <= buf[i] <= 57:
            digits += 1
            if mant < 100000000000000000:
                mant = mant * 10 + (buf[i] - 48)
                exp -= 1
            else:
                truncated = truncated or buf[i] != 48
            i += 1
    if digits == 0:
        if _word(buf, i, end, 110, 97, 110):  # nan
            return math.nan, i + 3, F_NONFINITE
        if _word(buf, i, end, 105, 110, 102):  # inf / infinity
            j = i + 3
            if (
                _word(buf, j, end, 105, 110, 105)
                and j + 4 < end
                and _lower(buf[j + 3]) == 116
                and _lower(buf[j + 4]) == 121
            ):
                j += 5
            return math.inf, j, F_NONFINITE
        return 0.0, i, F_BAD
    if i < end and (buf[i] == 101 or buf[i] == 69):
        i += 1
        eneg = False
        if i < end and (buf[i] == 45 or buf[i] == 43):
            eneg = buf[i] == 45
            i += 1
        if i >= end or not (48 <= buf[i] <= 57):
            return 0.0, i, F_BAD
        e = 0
        while i < end and 48 <= buf[i] <= 57:
            if e < 100000:
                e = e * 10 + (buf[i] - 48)
            i += 1
        exp += -e if eneg else e
    if mant == 0:
        return -0.0 if neg else 0.0, i, F_OK
    status = F_OK
    if not truncated and mant <= 9007199254740992 and -22 <= exp <= 22:
        # exact: one correctly rounded float64 operation
        v = float(mant) * _POW10[exp] if exp >= 0 else float(mant) / _POW10[-exp]
    else:
        if exp > 400:
            return math.inf, i, F_NONFINITE
        if exp < -400:
            v = 0.0
        else:
            v = float(mant) * 10.0**exp
        status = F_INEXACT
    if v > _F32_MAX:
        return math.inf, i, F_NONFINITE
    if status == F_INEXACT:
        status = F_OK if not _near_f32_midpoint(v) else F_INEXACT
    return -v if neg else v, i, status


@njit(nogil=True, cache=True)
def _near_f32_midpoint(x):  # type: ignore[no-untyped-def]
    """True if a float64 ``x`` (a few ulps off) might round to another float32."""
    if x < _F32_TINY:
        return x != 0.0
    y = float(np.float32(x))
    _m, e = math.frexp(y)
    ulp32 = math.ldexp(1.0, e - 24)
    d = abs(x - y)
    tol = x * 2.0**-48
    return abs(d - ulp32 / 2) <= tol or abs(d - ulp32 / 4) <= tol


@njit(nogil=True, cache=True)
def parse_uint(buf, i, end):  # type: ignore[no-untyped-def]
    """Parse decimal digits at ``i``; return ``(value, next, ok)`` (``ok`` False if none/overflow)."""
    v = np.int64(0)
    start = i
    while i < end and 48 <= buf[i] <= 57:
        if v > 460000000000000000:
            return v, i, False
        v = v * 10 + (buf[i] - 48)
        i += 1
    return v, i, i > start


@njit(nogil=True, cache=True)
def valid_utf8(buf, i, end):  # type: ignore[no-untyped-def]
    """True if ``buf[i:end]`` is valid UTF-8."""
    while i < end:
        c = buf[i]
        if c < 0x80:
            i += 1
            continue
        if 0xC2 <= c <= 0xDF:
            n = 1
        elif 0xE0 <= c <= 0xEF:
            n = 2
        elif 0xF0 <= c <= 0xF4:
            n = 3
        else:
            return False
        if i + n >= end:
            return False
        for k in range(1, n + 1):
            if (buf[i + k] & 0xC0) != 0x80:
                return False
        if n == 2:
            c1 = buf[i + 1]
            if (c == 0xE0 and c1 < 0xA0) or (c == 0xED and c1 > 0x9F):
                return False
        elif n == 3:
            c1 = buf[i + 1]
            if (c == 0xF0 and c1 < 0x90) or (c == 0xF4 and c1 > 0x8F):
                return False
        i += n + 1
    return True


@njit(nogil=True, cache=True)
def hash_bytes(buf, i, end, seed):  # type: ignore[no-untyped-def]
    """A 63-bit hash of ``buf[i:end]`` (FNV-1a then a splitmix64 finaliser)."""
    h = np.uint64(0xCBF29CE484222325) ^ np.uint64(seed)
    for k in range(i, end):
        h = (h ^ np.uint64(buf[k])) * np.uint64(0x100000001B3)
    h ^= h >> np.uint64(30)
    h *= np.uint64(0xBF58476D1CE4E5B9)
    h ^= h >> np.uint64(27)
    h *= np.uint64(0x94D049BB133111EB)
    h ^= h >> np.uint64(31)
    return np.int64(h & np.uint64(0x7FFFFFFFFFFFFFFF))
