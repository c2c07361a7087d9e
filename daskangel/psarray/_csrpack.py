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
server), :func:`plan_shares` walks ``indptr`` once for every block's touched
rows and lays every server's share out in one buffer, and :func:`pack_share`
writes each block's local rows, entry counts, columns and values there (as
:func:`daskangel._wire.split_follow` would have put them: 64-byte aligned
fields), checking the columns' range and the values (finite; for integers their
range, the wire type guessed narrowest and widened when a value does not fit)
as it copies.  Two kernel calls a write: the Python and numpy calls a share and
a block that planned it before were half of a cold 0.6 ms pack.  Anything else
returns None and the caller plans as before, which raises the same errors as
ever; the servers see the same request either way.

Example
-------
>>> import numpy as np
>>> indptr, bounds = np.array([0, 2, 2, 3, 5]), np.array([0, 2, 4])
>>> owner, sizes = np.array([0, 1]), np.array([2, 2, 2, 1])
>>> status, blocks, nrow, keys, offs, starts, _ = plan_shares(indptr, bounds, owner, 2, sizes, True)
>>> status, nrow.tolist(), keys.tolist(), starts.tolist()
(0, [1, 2], [2, 3], [0, 256, 512])
"""

from __future__ import annotations

import functools
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
    "Packed", "pack_block", "pack_block_float", "pack_csr", "pack_share", "pack_share_float",
    "plan_shares",
]  # fmt: skip

# one server's share: (server, parts, follow description, frame, cost, the parts
# as arrays (views of the frame, made for the general path when called), their costs)
Packed = tuple[
    ServerId, list[dict[str, Any]], dict[str, Any], np.ndarray, int,
    Callable[[], dict[int, dict[str, Any]]], dict[int, int],
]  # fmt: skip


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
def plan_shares(indptr, bounds, owner, n_shares, sizes, narrow_len):  # type: ignore[no-untyped-def]
    """Every block's touched rows and entries in one pass over ``indptr``, and the
    touched blocks laid out share by share in one buffer: block ``g`` belongs to
    share ``owner[g]`` (-1: it may not be packed).  Each block's four fields
    (rows, counts, columns, values; ``sizes`` bytes an item, the counts' 2 when
    ``narrow_len`` and every row is shorter than 2**16, else 4) start on a
    64-byte boundary.  Returns ``(status, blocks, nrow, keys, offs, starts,
    count bytes)``: status 0, or 1 for a negative row length (a malformed
    matrix), 2 for a touched block that may not be packed; ``blocks`` the touched
    blocks in share order, ``offs`` their fields' byte offsets in the buffer,
    ``starts[s]`` where share ``s`` begins (``starts[-1]``: the buffer's bytes)."""
    n_blocks = bounds.shape[0] - 1
    rows = np.zeros(n_blocks, np.int64)
    lo = np.int64(0)
    hi = np.int64(0)
    for g in range(n_blocks):
        n = np.int64(0)
        for r in range(bounds[g], bounds[g + 1]):
            ln = np.int64(indptr[r + 1] - indptr[r])
            n += np.int64(ln != 0)
            lo = min(lo, ln)
            hi = max(hi, ln)
        rows[g] = n
    len_size = 2 if narrow_len and hi < 2**16 else 4
    touched = 0
    for g in range(n_blocks):
        if rows[g]:
            touched += 1
    blocks = np.empty(touched, np.int64)
    nrow = np.empty(touched, np.int64)
    keys = np.empty(touched, np.int64)
    offs = np.empty((touched, 4), np.int64)
    starts = np.zeros(n_shares + 1, np.int64)
    status = 1 if lo < 0 else 0  # (a malformed matrix first: its blocks mean nothing)
    for g in range(n_blocks):
        if status == 0 and rows[g] and owner[g] < 0:
            status = 2
    if status:
        return status, blocks, nrow, keys, offs, starts, len_size
    pos = np.int64(0)
    i = 0
    for s in range(n_shares):
        starts[s] = pos
        for g in range(n_blocks):
            if rows[g] == 0 or owner[g] != s:
                continue
            blocks[i] = g
            nrow[i] = rows[g]
            keys[i] = indptr[bounds[g + 1]] - indptr[bounds[g]]
            for f in range(4):
                offs[i, f] = pos
                size = len_size if f == 1 else sizes[f]
                nb = (nrow[i] if f < 2 else keys[i]) * size
                pos += (nb + _ALIGN - 1) // _ALIGN * _ALIGN
            i += 1
    starts[n_shares] = pos
    return status, blocks, nrow, keys, offs, starts, len_size


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
    offsets ``offs[i]`` (:func:`plan_shares`) of the outputs ``ro, rl, rc, rv``
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
    narrow = bool(config.get("daskangel.client.narrow-csr"))
    bounds, owner, servers, rd = _static(m.layout.row_bounds, m.servers, m.lost, here, narrow)
    col_t = (narrow_int(0, m.shape[1] - 1, np.dtype("i4")) if narrow else None) or "i4"
    val_t = data.dtype.str
    if narrow and data.dtype.kind in "iu" and data.dtype.itemsize > 1:
        val_t = "i1" if data.dtype.kind == "i" else "u1"  # widened below if one does not fit
    static = (bounds, owner, servers)
    out = _pack(m, indptr, cols, data, static, (rd, col_t, val_t), narrow, alloc)
    if isinstance(out, tuple):  # an integer value did not fit: again with their range
        if not narrow or data.dtype.kind not in "iu":
            return None
        lo, hi = out
        val_t = narrow_int(lo, hi, data.dtype) or data.dtype.str
        out = _pack(m, indptr, cols, data, static, (rd, col_t, val_t), narrow, alloc)
    return out if isinstance(out, list) else None


@functools.lru_cache(maxsize=64)
def _static(
    row_bounds: tuple[int, ...], servers: tuple[ServerId, ...], lost: frozenset[int],
    here: str | None, narrow: bool,
) -> tuple[np.ndarray, np.ndarray, list[ServerId], str]:  # fmt: skip
    """What a layout gives every pack: its row bounds, each block's share (the
    index of its server in the returned list; -1 for a lost block or one on this
    process's own server at ``here``) and the rows' wire type."""
    bounds = np.asarray(row_bounds, np.int64)
    order: dict[ServerId, int] = {}
    owner = np.full(len(servers), -1, np.int64)
    for g, s in enumerate(servers):
        if s.address != here and g not in lost:
            owner[g] = order.setdefault(s, len(order))
    rd = "u2" if narrow and int(np.diff(bounds).max()) <= 2**16 else "i4"
    bounds.flags.writeable = owner.flags.writeable = False
    return bounds, owner, list(order), rd


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
    m: ArrayMeta, indptr: np.ndarray, cols: np.ndarray, data: np.ndarray,
    static: tuple[np.ndarray, np.ndarray, list[ServerId]], types: tuple[str, str, str],
    narrow: bool, alloc: Callable[[int], np.ndarray],
) -> list[Packed] | tuple[int, int] | None:  # fmt: skip
    """:func:`pack_csr`'s frames for the wire types ``types`` (rows, columns,
    values; the counts' is chosen by :func:`plan_shares`), all in one buffer
    from ``alloc``; ``(lo, hi)`` of the integer values when one did not fit
    their type, None when a check refused the input.  Two kernel calls lay out
    and write every share: in the benchmark's task, on cold caches, the Python
    and numpy calls a share and a block that did this were half of a 0.6 ms
    pack."""
    bounds, owner, servers = static
    dts = [np.dtype(t) for t in (types[0], "u2", types[1], types[2])]
    sizes = np.array([d.itemsize for d in dts], np.int64)
    status, blocks, nrow, keys, offs, starts, len_size = plan_shares(
        indptr, bounds, owner, len(servers), sizes, narrow
    )
    if status or not blocks.shape[0]:
        return None  # a malformed matrix, a block lost or in this process: planned
    dts[1] = np.dtype("u2" if len_size == 2 else "i4")
    buf = alloc(int(starts[-1]))
    floating = data.dtype.kind == "f"
    kernel = pack_share_float if floating else pack_share
    got = kernel(indptr, cols, data, bounds, blocks, nrow, keys, offs, *(buf.view(d) for d in dts))
    if got[0] < 0 or got[1] >= m.shape[1] or (floating and not got[2]):
        return None  # the general planning names the entry
    if (
        dts[3].kind in "iu"
        and dts[3] != data.dtype
        and not _fits((int(got[2]), int(got[3])), dts[3])
    ):
        # (the whole pass again, rarely: LDA's +-1 counts fit the first guess)
        return int(got[2]), int(got[3])
    limit = config.get_bytes("daskangel.client.follow-bytes")
    wide = cols.itemsize + data.itemsize  # (the size rule of the planned path)
    strs = [d.str for d in dts]
    item = dts[2].itemsize + dts[3].itemsize
    bl, nr, nk, of, st = (
        blocks.tolist(),
        nrow.tolist(),
        keys.tolist(),
        offs.tolist(),
        starts.tolist(),
    )
    out: list[Packed] = []
    i = 0
    for k, s in enumerate(servers):
        j = i
        while j < len(bl) and of[j][0] < st[k + 1]:
            j += 1
        if j == i:
            continue  # none of this server's blocks is touched
        if sum(nk[i:j]) * wide + 8 * sum(nr[i:j]) < limit:
            return None  # small: one message on the general path
        frame = buf[st[k] : st[k + 1]]
        fields = [
            [p, name, 0, of[i + p][f] - st[k], strs[f], [(nr if f < 2 else nk)[i + p]]]
            for p in range(j - i)
            for f, name in enumerate(_FIELDS)
        ]
        cost = {bl[q]: nk[q] * item for q in range(i, j)}
        follow = {"frames": [int(frame.nbytes)], "fields": fields}
        parts = [{"block": bl[q]} for q in range(i, j)]
        share = _views(bl[i:j], fields, frame)
        out.append((s, parts, follow, frame, sum(cost.values()), share, cost))
        i = j
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
