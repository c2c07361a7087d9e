"""A CSR (or COO) increment packed straight into each server's follow frame, in one pass.

The lean push (:mod:`._rowpush`) first planned a ``scipy.sparse`` CSR write
(:func:`._csrplan.plan_csr`: a finiteness pass over the values, a range pass
over the columns, another over integer values, two passes over ``indptr``) and
then copied every part into its server's frame (:func:`daskangel._wire.split_follow`,
a numpy copy a field).  In the benchmark's task each of those passes runs right
after the task process woke from its previous call, on caches the two servers
just used: the caller's planning and packing of a 10,000-row x 20 increment took
0.45-0.66 ms there (0.2-0.36 ms warm), against ~0.07 ms for one compiled pass
that reads the columns and values once and writes them narrowed.

Here, for the common case (a canonical input: the array's own dtype, no
non-finite value, every column in range, every block on another process's
server), :func:`count_rows` walks ``indptr`` once for every block's touched rows
and :func:`pack_block` writes one block's local rows, entry counts, columns and
values where :func:`daskangel._wire.split_follow` would have put them, checking
the columns' range and the values (finite; for integers their range, the wire
type guessed narrowest and widened when a value does not fit) as it copies.
Anything else returns None and the caller plans as before, which raises the
same errors as ever; the servers see the same request either way.

Example
-------
>>> import numpy as np
>>> counts, lo, hi = count_rows(np.array([0, 2, 2, 3, 5]), np.array([0, 2, 4]))
>>> counts.tolist(), int(lo), int(hi)
([1, 2], 0, 2)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from numba import njit

from .. import config
from .._wire import _ALIGN
from ._csrplan import coo_rows, narrow_int
from ._meta import ArrayMeta, ServerId
from ._routing import check_size

__all__ = [
    "Packed", "count_rows", "pack_block", "pack_block_float", "pack_csr", "pack_share",
    "pack_share_float",
]  # fmt: skip

# one server's share: (server, parts, follow description, frame, cost, the parts
# as arrays (views of the frame, made for the general path when called), their costs)
Packed = tuple[
    ServerId, list[dict[str, Any]], dict[str, Any], np.ndarray, int,
    Callable[[], dict[int, dict[str, Any]]], dict[int, int],
]  # fmt: skip


@njit(nogil=True, cache=True)
def count_rows(indptr, bounds):  # type: ignore[no-untyped-def]
    """``(touched rows of each row range [bounds[g], bounds[g + 1]), shortest and
    longest row)`` in one pass over ``indptr`` (a negative length: a malformed
    matrix, which the caller leaves to the general planning)."""
    n_blocks = bounds.shape[0] - 1
    counts = np.zeros(n_blocks, np.int64)
    lo = np.int64(0)
    hi = np.int64(0)
    for g in range(n_blocks):
        p = indptr[bounds[g] : bounds[g + 1] + 1]
        n = np.int64(0)
        for r in range(p.shape[0] - 1):
            ln = np.int64(p[r + 1] - p[r])
            n += np.int64(ln != 0)
            lo = min(lo, ln)
            hi = max(hi, ln)
        counts[g] = n
    return counts, lo, hi


@njit(nogil=True, cache=True)
def _rows(indptr, r0, r1, out_rows, out_lens):  # type: ignore[no-untyped-def]
    j = 0
    for r in range(r0, r1):
        ln = indptr[r + 1] - indptr[r]
        if ln != 0:
            out_rows[j] = r - r0
            out_lens[j] = ln
            j += 1


@njit(nogil=True, cache=True)
def _extent_copy(src, k0, out):  # type: ignore[no-untyped-def]
    """Copy ``src[k0:]`` into ``out`` (cast to its type); the copied extent.  One
    reduction pair a loop: it vectorises (with a finiteness flag beside it too, it
    did not: 80 against 17 us for 50,000 entries)."""
    a = src[k0 : k0 + out.shape[0]]
    lo = a[0]
    hi = a[0]
    for i in range(a.shape[0]):
        x = a[i]
        lo = min(lo, x)
        hi = max(hi, x)
        out[i] = x
    return lo, hi


@njit(nogil=True, cache=True)
def _finite_copy(src, k0, out):  # type: ignore[no-untyped-def]
    """Copy floating ``src[k0:]`` into ``out``; True when every value is finite."""
    a = src[k0 : k0 + out.shape[0]]
    bad = np.int32(0)
    for i in range(a.shape[0]):
        x = a[i]
        bad |= np.int32(x - x != 0)  # NaN and +-inf
        out[i] = x
    return bad == 0


@njit(nogil=True, cache=True)
def pack_block(indptr, cols, data, r0, r1, out_rows, out_lens, out_cols, out_vals):  # type: ignore[no-untyped-def]
    """Rows ``[r0, r1)`` of a CSR matrix of integers as one compressed-row part:
    local rows and entry counts of the touched rows, then the columns and values
    cast to the outputs' types.  Returns ``(columns min, max, values min, max)``."""
    _rows(indptr, r0, r1, out_rows, out_lens)
    c_lo, c_hi = _extent_copy(cols, indptr[r0], out_cols)
    v_lo, v_hi = _extent_copy(data, indptr[r0], out_vals)
    return c_lo, c_hi, v_lo, v_hi


@njit(nogil=True, cache=True)
def pack_block_float(indptr, cols, data, r0, r1, out_rows, out_lens, out_cols, out_vals):  # type: ignore[no-untyped-def]
    """:func:`pack_block` of floating values: ``(columns min, max, all finite)``."""
    _rows(indptr, r0, r1, out_rows, out_lens)
    c_lo, c_hi = _extent_copy(cols, indptr[r0], out_cols)
    return c_lo, c_hi, _finite_copy(data, indptr[r0], out_vals)


@njit(nogil=True, cache=True)
def share_layout(indptr, bounds, counts, blocks, sizes):  # type: ignore[no-untyped-def]
    """One server's share of blocks ``blocks`` laid out in one frame: each block's
    touched rows (from :func:`count_rows`' ``counts``) and entries, the byte
    offsets of its four fields (rows, counts, columns, values of ``sizes`` bytes
    an item, each on a 64-byte boundary) and the frame's bytes."""
    n = blocks.shape[0]
    nrow = np.empty(n, np.int64)
    keys = np.empty(n, np.int64)
    offs = np.empty((n, 4), np.int64)
    pos = np.int64(0)
    for i in range(n):
        g = blocks[i]
        nrow[i] = counts[g]
        keys[i] = indptr[bounds[g + 1]] - indptr[bounds[g]]
        for f in range(4):
            offs[i, f] = pos
            nb = (nrow[i] if f < 2 else keys[i]) * sizes[f]
            pos += (nb + _ALIGN - 1) // _ALIGN * _ALIGN
    return nrow, keys, offs, pos


@njit(nogil=True, cache=True)
def _elements(offs, ro, rl, rc, rv):  # type: ignore[no-untyped-def]
    return (
        offs[0] // ro.itemsize, offs[1] // rl.itemsize, offs[2] // rc.itemsize,
        offs[3] // rv.itemsize,
    )  # fmt: skip


@njit(nogil=True, cache=True)
def pack_share(indptr, cols, data, bounds, blocks, nrow, keys, offs, ro, rl, rc, rv):  # type: ignore[no-untyped-def]
    """:func:`pack_block` for every block of one server's share: block
    ``blocks[i]`` (rows ``bounds[blocks[i]]`` up to the next bound, ``nrow[i]``
    touched rows, ``keys[i]`` entries) goes to its four fields at the byte
    offsets ``offs[i]`` (:func:`share_layout`) of the outputs ``ro, rl, rc, rv``
    (typed views of one frame: rows, counts, columns, values).
    ``(columns min, max, values min, max)`` over the share; every block has an
    entry."""
    c_lo = cols[indptr[bounds[blocks[0]]]]
    c_hi = c_lo
    v_lo = data[indptr[bounds[blocks[0]]]]
    v_hi = v_lo
    for i in range(blocks.shape[0]):
        o = _elements(offs[i], ro, rl, rc, rv)
        r0, r1, nr, nk = bounds[blocks[i]], bounds[blocks[i] + 1], nrow[i], keys[i]
        a, b, c, d = pack_block(
            indptr, cols, data, r0, r1, ro[o[0] : o[0] + nr], rl[o[1] : o[1] + nr],
            rc[o[2] : o[2] + nk], rv[o[3] : o[3] + nk],
        )  # fmt: skip
        c_lo = min(c_lo, a)
        c_hi = max(c_hi, b)
        v_lo = min(v_lo, c)
        v_hi = max(v_hi, d)
    return c_lo, c_hi, v_lo, v_hi


@njit(nogil=True, cache=True)
def pack_share_float(indptr, cols, data, bounds, blocks, nrow, keys, offs, ro, rl, rc, rv):  # type: ignore[no-untyped-def]
    """:func:`pack_share` of floating values: ``(columns min, max, all finite)``."""
    c_lo = cols[indptr[bounds[blocks[0]]]]
    c_hi = c_lo
    ok = True
    for i in range(blocks.shape[0]):
        o = _elements(offs[i], ro, rl, rc, rv)
        r0, r1, nr, nk = bounds[blocks[i]], bounds[blocks[i] + 1], nrow[i], keys[i]
        a, b, f = pack_block_float(
            indptr, cols, data, r0, r1, ro[o[0] : o[0] + nr], rl[o[1] : o[1] + nr],
            rc[o[2] : o[2] + nk], rv[o[3] : o[3] + nk],
        )  # fmt: skip
        c_lo = min(c_lo, a)
        c_hi = max(c_hi, b)
        ok = ok and f
    return c_lo, c_hi, ok


def pack_csr(
    m: ArrayMeta, values: Any, here: str | None, alloc: Callable[[int], np.ndarray]
) -> list[Packed] | None:
    """Each server's share of a ``scipy.sparse`` CSR increment of ``m`` packed into
    one frame from ``alloc`` (see the module docstring), or None: the caller
    plans it the general way (another input, dtype or layout; a block lost or on
    this process's own server at ``here``; a share under
    ``daskangel.client.follow-bytes``; a value or column the checks refuse)."""
    if (
        m.sparse
        or m.ndim != 2
        or m.layout.n_col_blocks != 1
        or type(values).__module__.split(".")[0] != "scipy"
        or getattr(values, "format", None) not in ("csr", "coo")
        or values.shape != m.shape
        or m.dtype.kind not in "iuf"
    ):
        return None
    if values.format == "coo":
        got = _coo_as_csr(m, values)
        if got is None:
            return None
        indptr, cols, data = got
    else:
        indptr, cols, data = values.indptr, values.indices, values.data
    if (
        not isinstance(indptr, np.ndarray) or indptr.shape != (m.shape[0] + 1,)
        or indptr.dtype.kind not in "iu" or cols.dtype.kind not in "iu"
        or data.dtype != m.dtype or cols.ndim != 1 or data.shape != cols.shape
    ):  # fmt: skip
        return None
    check_size("values", data.nbytes + cols.nbytes + indptr.nbytes)
    if not data.shape[0] or int(indptr[0]) != 0 or int(indptr[-1]) > data.shape[0]:
        return None
    bounds = np.asarray(m.layout.row_bounds, np.int64)
    counts, shortest, longest = count_rows(indptr, bounds)
    if shortest < 0:
        return None
    groups: dict[ServerId, list[int]] = {}
    lost = m.lost
    for g in np.flatnonzero(counts).tolist():
        s = m.servers[g]
        if s.address == here or (lost and g in lost):
            return None
        groups.setdefault(s, []).append(g)
    if not groups:
        return None
    narrow = bool(config.get("daskangel.client.narrow-csr"))
    col_t = (narrow_int(0, m.shape[1] - 1, np.dtype("i4")) if narrow else None) or "i4"
    len_t = "u2" if narrow and longest < 2**16 else "i4"
    val_t = data.dtype.str
    if narrow and data.dtype.kind in "iu" and data.dtype.itemsize > 1:
        val_t = "i1" if data.dtype.kind == "i" else "u1"  # widened below if one does not fit
    out = _pack(m, indptr, cols, data, bounds, counts, groups, (col_t, len_t, val_t), narrow, alloc)
    if isinstance(out, tuple):  # an integer value did not fit: again with their range
        if not narrow or data.dtype.kind not in "iu":
            return None
        lo, hi = out
        val_t = narrow_int(lo, hi, data.dtype) or data.dtype.str
        out = _pack(
            m, indptr, cols, data, bounds, counts, groups, (col_t, len_t, val_t), narrow, alloc
        )
    return out if isinstance(out, list) else None


def _coo_as_csr(m: ArrayMeta, values: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """A COO write sorted into compressed rows (:func:`._csrplan.coo_rows`, as the
    planner does), or None: the planner takes it (another dtype, too few entries
    for the sort's slot a row, a coordinate out of range: it names the entry)."""
    rows, cols, data = values.row, values.col, values.data
    if (
        not isinstance(data, np.ndarray) or data.dtype != m.dtype
        or rows.dtype.kind not in "iu" or cols.dtype.kind not in "iu"
        or m.shape[0] > float(config.get("daskangel.client.coo-rows-per-entry")) * data.shape[0]
    ):  # fmt: skip
        return None
    check_size("values", data.nbytes + cols.nbytes + rows.nbytes)
    indptr, cols32, ordered, bad = coo_rows(rows, cols, data, m.shape[0], m.shape[1])
    return None if bad >= 0 else (indptr, cols32, ordered)


def _pack(
    m: ArrayMeta, indptr: np.ndarray, cols: np.ndarray, data: np.ndarray, bounds: np.ndarray,
    counts: np.ndarray, groups: dict[ServerId, list[int]], types: tuple[str, str, str],
    narrow: bool, alloc: Callable[[int], np.ndarray],
) -> list[Packed] | tuple[int, int] | None:  # fmt: skip
    """:func:`pack_csr`'s frames for the wire types ``types`` (columns, counts,
    values); ``(lo, hi)`` of the integer values when one did not fit its type,
    None when a check refused the input.  A server's share is laid out
    (:func:`share_layout`) and written (:func:`pack_share`) by one kernel call
    each: in the benchmark's task, where the caller runs on cold caches, the
    Python and numpy calls a share (and a block) that did this were 0.3 of a
    0.6 ms pack."""
    rd = "u2" if narrow and int(np.diff(bounds).max()) <= 2**16 else "i4"
    col_t, len_t, val_t = types
    dts = tuple(np.dtype(t) for t in (rd, len_t, col_t, val_t))  # the fields' order
    strs = [d.str for d in dts]
    sizes = np.array([d.itemsize for d in dts], np.int64)
    floating = data.dtype.kind == "f"
    kernel = pack_share_float if floating else pack_share
    limit = config.get_bytes("daskangel.client.follow-bytes")
    wide = cols.itemsize + data.itemsize  # (the size rule of the planned path)
    out: list[Packed] = []
    v_range: tuple[int, int] | None = None
    for s, blocks in groups.items():
        g = np.array(blocks, np.int64)
        nrow, keys, offs, nbytes = share_layout(indptr, bounds, counts, g, sizes)
        if int(keys.sum()) * wide + 8 * int(nrow.sum()) < limit:
            return None  # small: one message on the general path
        frame = alloc(nbytes)
        views = [frame.view(d) for d in dts]
        got = kernel(indptr, cols, data, bounds, g, nrow, keys, offs, *views)
        if got[0] < 0 or got[1] >= m.shape[1] or (floating and not got[2]):
            return None  # the general planning names the entry
        if dts[3].kind in "iu" and dts[3] != data.dtype:
            lo, hi = int(got[2]), int(got[3])
            v_range = (lo, hi) if v_range is None else (min(lo, v_range[0]), max(hi, v_range[1]))
        nr, nk = nrow.tolist(), keys.tolist()
        fields = [
            [i, name, 0, o[f], strs[f], [(nr if f < 2 else nk)[i]]]
            for i, o in enumerate(offs.tolist())
            for f, name in enumerate(_FIELDS)
        ]
        cost = dict(zip(blocks, (keys * (dts[2].itemsize + dts[3].itemsize)).tolist(), strict=True))
        follow = {"frames": [int(frame.nbytes)], "fields": fields}
        parts = [{"block": b} for b in blocks]
        share = _views(blocks, fields, frame)
        out.append((s, parts, follow, frame, sum(cost.values()), share, cost))
    if v_range is not None and not _fits(v_range, dts[3]):
        # (the whole pass again, rarely: LDA's +-1 counts fit the first guess)
        return v_range
    return out


_FIELDS = ("csr_rows", "csr_len", "csr_cols", "values")


def _views(
    blocks: list[int], fields: list[list[Any]], frame: np.ndarray
) -> Callable[[], dict[int, dict[str, Any]]]:
    """The general path's parts ``{block: part}`` of a packed share, views of its
    frame, made only if that path must answer (:func:`._rowpush.push_csr`)."""

    def parts() -> dict[int, dict[str, Any]]:
        out = {b: {"block": b} for b in blocks}
        for i, name, _, off, dt, shape in fields:
            d = np.dtype(dt)
            out[blocks[i]][name] = frame[off : off + shape[0] * d.itemsize].view(d)
        return out

    return parts


def _fits(rng: tuple[int, int], dt: np.dtype) -> bool:
    info = np.iinfo(dt)
    return info.min <= rng[0] and rng[1] <= info.max
