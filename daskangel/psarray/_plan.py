"""Planning a PSArray request: from indices and values to one part per block.

Everything here runs in the caller's thread before anything is sent, so a
rejected request reaches no server: indices are normalised and range-checked
(:func:`axes`), a get is cut into block parts with their places in the result
(:func:`plan_get`, :func:`direct_targets` for results read straight into it,
:func:`assemble` for the rest), and written values are broadcast, cast-checked,
checked for NaN/inf and routed (:func:`plan_update`, :func:`plan_coo` for
``scipy.sparse`` / ``sparse.COO`` input).

Example
-------
>>> import numpy as np
>>> short(np.arange(3)), short(None)
([0, 1, 2], None)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .. import config
from .._recv import landed
from ..errors import PSIndexError, ShapeMismatchError
from . import _kernels as K
from ._csrplan import plan_csr
from ._meta import ArrayMeta
from ._packed import plan_packed
from ._routing import (
    AxisPlan,
    check_shape,
    check_size,
    check_values,
    normalize_index,
    plan_axis,
    route_coo,
)

__all__ = [
    "assemble",
    "axes",
    "coo_parts",
    "direct_targets",
    "expand",
    "grid",
    "is_sparse_input",
    "plan_coo",
    "plan_csr",
    "plan_get",
    "plan_update",
    "short",
    "sort_rows",
    "span_len",
    "with_block",
]


def axes(
    m: ArrayMeta, rows: Any, cols: Any, what: str = "get"
) -> tuple[AxisPlan, AxisPlan, tuple[int, ...]]:
    if m.ndim == 1 and rows is not None:
        raise PSIndexError(f"rows: array {m.name!r} is 1-D; select with cols=")
    check_shape(what, m.shape, m.itemsize, rows, cols)
    r, r_scalar = normalize_index("rows", rows, m.shape[0])
    c, c_scalar = normalize_index("cols", cols, m.shape[1])
    rp = plan_axis(m.layout, "rows", r, m.shape[0])
    cp = plan_axis(m.layout, "cols", c, m.shape[1])
    shape: tuple[int, ...] = (rp.size, cp.size)
    if m.ndim == 1 or r_scalar:
        shape = shape[1:]
    if c_scalar:
        shape = shape[:-1]
    return rp, cp, shape


def grid(
    m: ArrayMeta, rp: AxisPlan, cp: AxisPlan
) -> list[tuple[int, int, int]]:  # [(block, row_k, col_k)]
    nc = m.layout.n_col_blocks
    return [
        (rb * nc + cb, i, j) for i, rb in enumerate(rp.blocks) for j, cb in enumerate(cp.blocks)
    ]


def span_len(x: np.ndarray | slice) -> int:
    return x.stop - x.start if isinstance(x, slice) else x.shape[0]


def short(idx: np.ndarray | None) -> Any:
    """Short index arrays travel as plain lists inside the message (no extra frame)."""
    if idx is not None and idx.shape[0] <= 32:
        return idx.tolist()
    return idx


def direct_targets(
    dtype: np.dtype,
    full: tuple[int, int],
    places: dict[int, tuple[Any, Any]],
    cost: dict[int, int],
    alloc: Callable[[tuple[int, int], np.dtype], np.ndarray] | None = None,
) -> tuple[np.ndarray | None, dict[int, tuple[int, np.ndarray | None]] | None]:
    """The preallocated output of a large get and ``{block: (bytes, target)}``.

    ``alloc(shape, dtype)`` makes that output (default ``np.empty``): a scratch
    buffer when the caller only gathers from it (rows planned sorted).

    A block's result can be read straight into the output when its place there is
    one contiguous run (whole rows of a row range, or a column range of one row)
    and it is at least ``daskangel.client.direct-read-bytes`` long.  Every part gets
    its byte count, so the frames of parts read as usual are told apart.
    """
    limit = config.get_bytes("daskangel.client.direct-read-bytes")
    n_cols = full[1]
    runs: dict[int, tuple[int, int]] = {}  # {block: (start, stop)} flat in the output
    for b, (rs, cs) in places.items():
        if cost[b] < limit or not (isinstance(rs, slice) and isinstance(cs, slice)):
            continue
        if rs.stop - rs.start == 1 or (cs.start == 0 and cs.stop == n_cols):
            runs[b] = (rs.start * n_cols + cs.start, (rs.stop - 1) * n_cols + cs.stop)
    if not runs:
        return None, None
    out = np.empty(full, dtype=dtype) if alloc is None else alloc(full, dtype)
    flat = out.reshape(-1)
    into: dict[int, tuple[int, np.ndarray | None]] = {}
    for b, (rs, cs) in places.items():
        if b in runs:
            start, stop = runs[b]
            into[b] = (cost[b], flat[start:stop].reshape(rs.stop - rs.start, cs.stop - cs.start))
        else:
            into[b] = (cost[b] if cost[b] >= limit else 0, None)
    return out, into


def expand(plan: AxisPlan) -> np.ndarray:
    """The global indices a plan covers, in request order."""
    out = np.empty(plan.size, np.int64)
    for loc, pos in zip(plan.local, plan.out, strict=True):
        if loc is None:
            assert isinstance(pos, slice)
            out[pos] = np.arange(pos.start, pos.stop)
        else:
            out[pos] = loc
    return out


def is_sparse_input(values: Any) -> bool:
    mod = type(values).__module__
    return mod.startswith("scipy.sparse") or mod.startswith("sparse")


def coo_parts(values: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple[int, ...]]:
    """``(rows, cols, data, shape)`` of a scipy.sparse or sparse.COO input."""
    if type(values).__module__.startswith("scipy.sparse"):
        coo = values.tocoo()
        return (
            coo.row.astype(np.int64),
            coo.col.astype(np.int64),
            np.asarray(coo.data),
            tuple(coo.shape),
        )
    coo = values.asformat("coo") if hasattr(values, "asformat") else values
    coords = np.asarray(coo.coords, dtype=np.int64)
    data = np.asarray(coo.data)
    if coords.shape[0] == 1:
        return np.zeros(coords.shape[1], np.int64), coords[0], data, tuple(coo.shape)
    if coords.shape[0] != 2:
        raise ShapeMismatchError(f"values: expected a 1-D or 2-D sparse array, got {coo.ndim}-D")
    return coords[0], coords[1], data, tuple(coo.shape)


def sort_rows(m: ArrayMeta, rows: Any) -> tuple[Any, np.ndarray | None]:
    """``(rows sorted, order)`` of an unsorted row index, else ``(rows, None)``.

    A get of sorted rows answers each block with one run of the result, which is
    read from the socket straight into its place (:func:`direct_targets`) and
    the server reads its rows in memory order; the caller then puts sorted row
    ``i`` at ``order[i]`` (one scatter, :mod:`._rowget`).

    Example
    -------
    >>> from daskangel.psarray._layout import RangePartitioner
    >>> from daskangel.psarray._initspec import InitSpec
    >>> m = ArrayMeta("w", (10, 2), 2, np.dtype("float32"), False,
    ...               RangePartitioner(2).layout((10, 2), 4, 2, False), InitSpec())
    >>> r, order = sort_rows(m, [7, 1, 4])
    >>> r.tolist(), order.tolist()
    ([1, 4, 7], [1, 2, 0])
    """
    if m.ndim == 1 or rows is None or isinstance(rows, (int, np.integer, slice)):
        return rows, None
    r, scalar = normalize_index("rows", rows, m.shape[0])
    if r is None or scalar or r.shape[0] < 2 or K.is_sorted(r):
        return rows, None
    order = np.argsort(r, kind="stable")
    return r[order], order


def plan_get(m: ArrayMeta, rows: Any, cols: Any) -> tuple[Any, ...]:
    """``(meta, parts, places, cost, full shape, result shape)`` of a get."""
    rp, cp, shape = axes(m, rows, cols)
    check_size("get", rp.size * cp.size * m.itemsize)
    parts, places, cost = {}, {}, {}
    for b, i, j in grid(m, rp, cp):
        parts[b] = {"block": b, "rows": short(rp.local[i]), "cols": short(cp.local[j])}
        places[b] = (rp.out[i], cp.out[j])
        cost[b] = span_len(rp.out[i]) * span_len(cp.out[j]) * m.itemsize
    return m, parts, places, cost, (rp.size, cp.size), shape


def assemble(
    m: ArrayMeta,
    places: dict[int, Any],
    full: tuple[int, int],
    shape: tuple[int, ...],
    out: np.ndarray | None = None,
    into: dict[int, tuple[int, np.ndarray | None]] | None = None,
) -> Callable[[dict[int, Any]], np.ndarray]:
    """The function putting the blocks' results into one array.

    With ``out`` (preallocated for a large get) results read straight into
    their place (``into``) are left alone; anything else is copied in, after
    taking a copy of a result that still lies inside ``out``.
    """

    def finish(results: dict[int, np.ndarray]) -> np.ndarray:
        if out is None:
            if len(results) == 1:
                (res,) = results.values()
                if res.shape == full:
                    return res.reshape(shape)
            dest = np.empty(full, dtype=m.dtype)
        else:
            dest = out
        copies = []
        for b, res in results.items():
            target = into[b][1] if into is not None and b in into else None
            if landed(res, target):
                continue
            if out is not None and np.may_share_memory(res, out):
                res = res.copy()
            copies.append((b, res))
        for b, res in copies:
            rs, cs = places[b]
            if isinstance(rs, slice) or isinstance(cs, slice):
                dest[rs, cs] = res
            else:
                dest[np.ix_(rs, cs)] = res
        return dest.reshape(shape)

    return finish


def plan_update(
    m: ArrayMeta,
    values: Any,
    rows: Any,
    cols: Any,
    casting: str | None,
    on_nonfinite: str | None,
    add: bool = False,
    alloc: Callable[[int], np.ndarray | None] | None = None,
) -> tuple[dict[int, dict[str, Any]], dict[int, int]]:
    """``({block: part}, {block: cost})`` of an increment (``add``) or set;
    ``alloc``: where packed parts are packed (:func:`._packed.plan_packed`)."""
    if casting is None and isinstance(values, (int, float)) and not isinstance(values, bool):
        casting = "same_kind"  # a Python number takes the array's dtype (NEP 50)
    if is_sparse_input(values):
        if rows is not None or cols is not None:
            raise ShapeMismatchError(
                "values: a sparse matrix carries its own coordinates; pass it without rows= / cols="
            )
        return plan_coo(m, values, casting, on_nonfinite)
    if m.ndim == 1 and rows is not None:
        raise PSIndexError(f"rows: array {m.name!r} is 1-D; select with cols=")
    check_shape("values", m.shape, m.itemsize, rows, cols)
    # one row of a sparse 4-byte array at many columns: packed parts (a vector
    # with rows= goes the general way, which names the error)
    if add and cols is not None and m.sparse and m.itemsize == 4 and (m.ndim > 1 or rows is None):
        packed = plan_packed(m, values, rows, cols, casting, on_nonfinite, alloc)
        if packed is not None:
            return packed
    rp, cp, shape = axes(m, rows, cols, "values")
    vals = np.asarray(values)
    try:
        vals = np.broadcast_to(vals, shape).reshape(rp.size, cp.size)
    except ValueError:
        raise ShapeMismatchError(
            f"values: expected shape {shape} (the rows x cols of the request) "
            f"or one that broadcasts to it, got {vals.shape}"
        ) from None
    check_size("values", vals.size * m.itemsize)
    vals, keep = check_values(vals, m.dtype, casting, on_nonfinite)
    if keep is not None:
        rr, cc = np.nonzero(keep)
        gr = rr if rp.size == m.shape[0] and rows is None else expand(rp)[rr]
        gc = cc if cp.size == m.shape[1] and cols is None else expand(cp)[cc]
        coo = route_coo(m.layout, gr, gc, vals[rr, cc])
        return with_block(coo), {b: p["values"].nbytes * 3 for b, p in coo.items()}
    parts: dict[int, dict[str, Any]] = {}
    cost: dict[int, int] = {}
    for b, i, j in grid(m, rp, cp):
        rs, cs = rp.out[i], cp.out[j]
        if isinstance(rs, slice) or isinstance(cs, slice):
            v = np.ascontiguousarray(vals[rs, cs])
        else:
            v = vals[np.ix_(rs, cs)]
        parts[b] = {"block": b, "rows": rp.local[i], "cols": cp.local[j], "values": v}
        cost[b] = v.nbytes
    return parts, cost


def plan_coo(
    m: ArrayMeta, values: Any, casting: str | None, on_nonfinite: str | None
) -> tuple[dict[int, dict[str, Any]], dict[int, int]]:
    csr = plan_csr(m, values, casting, on_nonfinite)
    if csr is not None:
        return csr
    rows, cols, data, shape = coo_parts(values)
    want = (m.shape[1],) if m.ndim == 1 else m.shape
    if shape != want and not (m.ndim == 1 and shape == m.shape):
        raise ShapeMismatchError(f"values: expected a sparse matrix of shape {want}, got {shape}")
    check_size("values", data.nbytes + rows.nbytes + cols.nbytes)
    data, keep = check_values(data, m.dtype, casting, on_nonfinite)
    if keep is not None:
        rows, cols, data = rows[keep], cols[keep], data[keep]
    coo = route_coo(m.layout, rows, cols, data)
    return with_block(coo), {b: p["values"].nbytes * 3 for b, p in coo.items()}


def with_block(parts: dict[int, dict[str, np.ndarray]]) -> dict[int, dict[str, Any]]:
    out: dict[int, dict[str, Any]] = {}
    for b, p in parts.items():
        out[b] = {"block": b, **p}
    return out
