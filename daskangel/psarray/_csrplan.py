"""Planning a ``scipy.sparse`` CSR increment of a dense matrix cut only by rows.

Each row block gets its touched rows (local, int32), their entry counts and the
slices of the matrix's own columns and values, which need no routing: 4-byte
columns and values plus 8 bytes a row, where coordinates cost 8 + 8 + 4 bytes an
entry and a gather of each.  The touched rows of every block come from one
compiled pass over ``indptr`` (:func:`csr_runs`): the numpy version (an int64
copy of ``indptr``, ``np.diff``, ``np.flatnonzero``, ``np.searchsorted`` and a
cast a block) made five temporaries of up to 400 KB for a 50,000-row matrix,
fresh pages in a Dask worker (its nanny returns freed memory at once), and took
0.2 ms in one process and ~0.5 ms in the benchmark's task of a 10,000-row x 20
increment.

With ``daskangel.client.narrow-csr`` each part also says (``"narrow"``: field ->
dtype) which of its arrays fit a narrower integer type: columns below 256 /
65,536, a block's local rows and the entry counts likewise, and integer values
when every one fits int8 / int16 (:func:`._packkernels.min_max`, one compiled pass).  The
arrays themselves stay as planned: :func:`daskangel._wire.split_follow` casts
them while copying them into the request's follow frame (no extra copy), and the
servers' scatter widens each entry as it writes it.  An LDA-shaped increment
(1,000 columns, +-1 counts) then moves 3 bytes a key instead of 8.

Example
-------
>>> import numpy as np
>>> rows, lens, starts = csr_runs(np.array([0, 2, 2, 3, 5]), np.array([0, 2, 4]))
>>> rows.tolist(), lens.tolist(), starts.tolist()
([0, 0, 1], [2, 1, 2], [0, 1, 3])
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

from .. import config
from ..errors import PSIndexError, ShapeMismatchError
from ._meta import ArrayMeta
from ._packkernels import min_max
from ._routing import check_size, check_values

__all__ = ["coo_rows", "csr_runs", "narrow_int", "plan_csr"]


def narrow_int(lo: int, hi: int, dtype: np.dtype) -> str | None:
    """The narrowest integer dtype (``"u1"``, ``"i2"`` ...) narrower than the
    integer ``dtype`` holding every value in ``[lo, hi]`` (unsigned when ``lo >=
    0``; either casts safely to ``dtype``), or None.

    >>> narrow_int(0, 999, np.dtype("int32")), narrow_int(-1, 1, np.dtype("int32"))
    ('u2', 'i1')
    >>> narrow_int(0, 1, np.dtype("float32")), narrow_int(0, 2**20, np.dtype("int32"))
    (None, None)
    """
    if dtype.kind not in "iu" or (dtype.kind == "u" and lo < 0):
        return None
    for size in (1, 2):
        if size >= dtype.itemsize:
            return None
        if lo >= 0 and hi < 256**size:
            return f"u{size}"
        if lo >= -(256**size // 2) and hi < 256**size // 2:
            return f"i{size}"
    return None


@njit(nogil=True, cache=True)
def csr_runs(indptr, bounds):  # type: ignore[no-untyped-def]
    """The rows with entries (``indptr[r + 1] != indptr[r]``) of each row range
    ``[bounds[g], bounds[g + 1])``: ``(rows, lens, starts)``, where
    ``rows[starts[g]:starts[g + 1]]`` are range ``g``'s rows less ``bounds[g]``
    (int32) and ``lens`` their entry counts (int32).  Each pass walks a slice of
    ``indptr`` from 0 (the counting pass then vectorises: 50,000 rows in ~3 us,
    ~40 us indexed from ``bounds[g]``)."""
    n_blocks = bounds.shape[0] - 1
    a = indptr[bounds[0] : bounds[n_blocks] + 1]
    n = np.int64(0)
    for r in range(a.shape[0] - 1):
        n += np.int64(a[r + 1] != a[r])
    rows = np.empty(n, np.int32)
    lens = np.empty(n, np.int32)
    starts = np.empty(n_blocks + 1, np.int64)
    j = 0
    for g in range(n_blocks):
        starts[g] = j
        p = indptr[bounds[g] : bounds[g + 1] + 1]
        for r in range(p.shape[0] - 1):
            ln = p[r + 1] - p[r]
            if ln != 0:
                rows[j] = r
                lens[j] = ln
                j += 1
    starts[n_blocks] = j
    return rows, lens, starts


def plan_csr(
    m: ArrayMeta, values: Any, casting: str | None, on_nonfinite: str | None
) -> tuple[dict[int, dict[str, Any]], dict[int, int]] | None:
    """Compressed-row parts ``{block: {block, csr_rows, csr_len, csr_cols, values}}``
    and their costs for a ``scipy.sparse`` CSR or COO write into a dense matrix cut
    only by rows, or None (another input or layout, or entries to drop: the
    coordinate path plans it)."""
    if (
        m.sparse
        or m.ndim != 2
        or m.layout.n_col_blocks != 1
        or type(values).__module__.split(".")[0] != "scipy"
        or values.format not in ("csr", "coo")
        or values.shape != m.shape
    ):
        return None
    if values.format == "coo":
        return _plan_coo_rows(m, values, casting, on_nonfinite)
    indptr = np.asarray(values.indptr)
    if indptr.shape != (m.shape[0] + 1,) or indptr.dtype.kind not in "iu":
        # (csr_runs reads indptr unchecked: a matrix changed after it was made)
        raise ShapeMismatchError(
            f"values: expected a CSR indptr of {m.shape[0] + 1} integers, got "
            f"{indptr.shape} {indptr.dtype}"
        )
    cols, data = np.asarray(values.indices), np.asarray(values.data)
    check_size("values", data.nbytes + cols.nbytes + indptr.nbytes)
    data, keep = check_values(data, m.dtype, casting, on_nonfinite)
    if keep is not None:
        return None  # entries to drop: the coordinate path picks them
    return _plan_rows(m, indptr, cols, data)


def _plan_coo_rows(
    m: ArrayMeta, values: Any, casting: str | None, on_nonfinite: str | None
) -> tuple[dict[int, dict[str, Any]], dict[int, int]] | None:
    """A ``scipy.sparse`` COO write, sorted by row on the caller (:func:`coo_rows`)
    and planned as compressed rows: the servers then walk their blocks in row
    order, and 20 bytes of coordinates and value an entry become ~3-5."""
    rows, cols = np.asarray(values.row), np.asarray(values.col)
    data = np.asarray(values.data)
    if rows.dtype.kind not in "iu" or cols.dtype.kind not in "iu":
        return None  # (scipy keeps integer coordinates; anything else: the general path)
    if m.shape[0] > float(config.get("daskangel.client.coo-rows-per-entry")) * data.shape[0]:
        return None  # the sort's one slot a row would cost more than the entries
    check_size("values", data.nbytes + cols.nbytes + rows.nbytes)
    data, keep = check_values(data, m.dtype, casting, on_nonfinite)
    if keep is not None:
        return None  # entries to drop: the coordinate path picks them
    nr, nc = m.shape
    indptr, cols32, sorted_data, bad = coo_rows(rows, cols, data, nr, nc)
    if bad >= 0:
        r, c = int(rows[bad]), int(cols[bad])
        what, i, n = ("row", r, nr) if not 0 <= r < nr else ("column", c, nc)
        raise PSIndexError(f"values: {what} {i} out of range [0, {n})")
    return _plan_rows(m, indptr, cols32, sorted_data)


@njit(nogil=True, cache=True)
def coo_rows(rows, cols, data, n_rows, n_cols):  # type: ignore[no-untyped-def]
    """Coordinates sorted by row, stably (a counting sort: entries of a row keep
    their order, so duplicates add up in the same order as entry by entry):
    ``(indptr, cols int32, data, bad)``, ``bad`` the first entry out of
    ``[0, n_rows) x [0, n_cols)`` or -1 (then nothing else is valid)."""
    n = rows.shape[0]
    indptr = np.zeros(n_rows + 1, np.int64)
    out_c = np.empty(n, np.int32)
    out_d = np.empty(n, data.dtype)
    for i in range(n):
        r = rows[i]
        c = cols[i]
        if r < 0 or r >= n_rows or c < 0 or c >= n_cols:
            return indptr, out_c, out_d, i
        indptr[r + 1] += 1
    for r in range(n_rows):
        indptr[r + 1] += indptr[r]
    for i in range(n):  # indptr[r] is row r's cursor, ending at row r + 1's start
        r = rows[i]
        j = indptr[r]
        out_c[j] = cols[i]
        out_d[j] = data[i]
        indptr[r] = j + 1
    for r in range(n_rows, 0, -1):
        indptr[r] = indptr[r - 1]
    indptr[0] = 0
    return indptr, out_c, out_d, -1


def _plan_rows(
    m: ArrayMeta, indptr: np.ndarray, cols: np.ndarray, data: np.ndarray
) -> tuple[dict[int, dict[str, Any]], dict[int, int]]:
    """Parts of checked compressed rows (``data`` already of the array's dtype)."""
    hi = 0
    if cols.shape[0]:
        lo, hi = (int(x) for x in min_max(cols))
        if lo < 0 or hi >= m.shape[1]:
            raise PSIndexError(
                f"values: column {lo if lo < 0 else hi} out of range [0, {m.shape[1]})"
            )
    cols = cols.astype(np.int32, copy=False)
    bounds = np.asarray(m.layout.row_bounds, np.int64)
    rows, lens, starts = csr_runs(indptr, bounds)
    narrow: dict[str, str] = {}
    if cols.shape[0] and config.get("daskangel.client.narrow-csr"):
        narrow = _narrowed(m, data, lens, hi)
    itemsizes = {k: np.dtype(narrow.get(k, d)).itemsize for k, d in _WIRE.items()}
    itemsizes["values"] = np.dtype(narrow.get("values", data.dtype)).itemsize
    parts: dict[int, dict[str, Any]] = {}
    cost: dict[int, int] = {}
    for g in range(m.layout.n_row_blocks):
        s, e = int(starts[g]), int(starts[g + 1])
        if s == e:
            continue
        r0, r1 = int(rows[s]) + int(bounds[g]), int(rows[e - 1]) + int(bounds[g])
        k0, k1 = int(indptr[r0]), int(indptr[r1 + 1])
        parts[g] = {
            "block": g,
            "csr_rows": rows[s:e],
            "csr_len": lens[s:e],
            "csr_cols": cols[k0:k1],
            "values": data[k0:k1],
        }
        if narrow:
            # the block's local rows are below its height
            tall = int(bounds[g + 1] - bounds[g]) > 2**16
            parts[g]["narrow"] = narrow if tall else {**narrow, "csr_rows": "u2"}
        cost[g] = (k1 - k0) * (itemsizes["values"] + itemsizes["csr_cols"])
    return parts, cost


# the index fields of a compressed-row part as planned
_WIRE = {"csr_rows": "i4", "csr_len": "i4", "csr_cols": "i4"}


def _narrowed(m: ArrayMeta, data: np.ndarray, lens: np.ndarray, col_max: int) -> dict[str, str]:
    """``{field: dtype}`` for the fields of every part that fit a narrower integer
    type (``csr_rows`` is decided per block)."""
    # columns by the matrix's width (cols < width: uint8 or uint16), entry counts as
    # uint16 when they fit (fewer kernel variants to compile; 1 byte a row is noise)
    out = {"csr_cols": narrow_int(0, max(col_max, m.shape[1] - 1), np.dtype(np.int32))}
    out["csr_len"] = "u2" if lens.shape[0] and int(lens.max()) < 2**16 else None
    if data.dtype.kind in "iu" and data.dtype.itemsize > 1:
        lo, hi = (int(x) for x in min_max(data))
        out["values"] = narrow_int(lo, hi, data.dtype)
    return {k: v for k, v in out.items() if v is not None}
