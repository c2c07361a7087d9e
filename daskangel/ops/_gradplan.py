"""Planning an optimiser step on the caller: a gradient checked and split by block.

:func:`plan_gradient` validates a gradient given as ``PSArray.increment`` takes
values (selected ``rows`` x ``cols``, a whole-array dense gradient, or a
``scipy.sparse`` / ``sparse.COO`` matrix), with its optional per-entry versions,
and returns ``{block: params}`` for the step psf
(:class:`~daskangel.ops._optim.OptimizerStep`): whole blocks (``full``), runs of
increasing keys cut at the block bounds (``_sorted_plan``: no sort), or
coordinates with duplicates summed (``_coo_plan``: their version is the oldest).

Example
-------
>>> import numpy as np
>>> from daskangel.psarray import ArrayMeta
>>> from daskangel.psarray._initspec import InitSpec
>>> from daskangel.psarray._layout import BlockPartitioner
>>> lay = BlockPartitioner((1, 4)).layout((1, 8), 4, 2, False)
>>> m = ArrayMeta.new("w", (8,), np.dtype("float32"), False, lay, InitSpec("const", 0.0), "handlers")
>>> plan = plan_gradient(m, np.ones(3, np.float32), None, [1, 5, 6], None, None, None)
>>> {b: p["cols"].tolist() for b, p in plan.items()}
{0: [1], 1: [1, 2]}
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import InvalidArgumentError
from ..psarray import ArrayMeta
from ..psarray._kernels import is_strictly_sorted
from ..psarray._plan import coo_parts as _coo_parts
from ..psarray._plan import is_sparse_input as _is_sparse_input
from ..psarray._routing import check_values, normalize_index, plan_axis, route_coo

__all__ = ["plan_gradient"]


def plan_gradient(
    meta: ArrayMeta,
    grad: Any,
    rows: Any,
    cols: Any,
    versions: Any,
    casting: str | None,
    on_nonfinite: str | None,
) -> dict[int, dict[str, Any]]:
    """Validate a gradient and split it into ``{block: params}`` for :class:`OptimizerStep`.

    A dense gradient of the whole array goes block by block (``full``); anything
    else becomes coordinates, duplicates summed (their version is the oldest).
    """
    lay = meta.layout
    shape = (meta.shape[1],) if meta.ndim == 1 else meta.shape
    ver: np.ndarray | None = None
    if _is_sparse_input(grad):
        if rows is not None or cols is not None:
            raise InvalidArgumentError(
                "grad: a sparse matrix carries its own coordinates; drop rows=/cols="
            )
        r, c, g, gshape = _coo_parts(grad)
        if gshape not in (shape, meta.shape):
            raise InvalidArgumentError(
                f"grad: expected a sparse matrix of shape {shape}, got {gshape}"
            )
        if versions is not None:
            ver = np.asarray(versions, dtype=np.int64).reshape(-1)
    else:
        if meta.ndim == 1 and rows is not None:
            raise InvalidArgumentError(f"rows: array {meta.name!r} is 1-D; select with cols=")
        ri, _ = normalize_index("rows", rows, meta.shape[0])
        ci, _ = normalize_index("cols", cols, meta.shape[1])
        nr = meta.shape[0] if ri is None else ri.shape[0]
        nc = meta.shape[1] if ci is None else ci.shape[0]
        want = (nc,) if meta.ndim == 1 else (nr, nc)
        g2 = np.asarray(grad)
        if g2.shape != want:
            raise InvalidArgumentError(
                f"grad: expected shape {want} (the rows x cols selected), got {g2.shape}"
            )
        if versions is not None:
            v2 = np.asarray(versions)
            if v2.shape != want or v2.dtype.kind not in "iu":
                raise InvalidArgumentError(
                    f"versions: expected integers of shape {want}, got {v2.dtype} {v2.shape}"
                )
            ver = np.asarray(v2.reshape(nr, nc), dtype=np.int64)
        g2 = g2.reshape(nr, nc)
        fast = _sorted_plan(meta, ri, ci, g2, ver, casting, on_nonfinite)
        if fast is not None:
            return fast
        if ri is None and ci is None and lay.col_mode == "range":
            g2, keep = check_values(g2, meta.dtype, casting, on_nonfinite)
            if keep is None:
                return _full_plan(meta, g2, ver)
            r, c = np.nonzero(keep)
            g = g2[r, c]
            ver = None if ver is None else ver[r, c]
            return _coo_plan(meta, r.astype(np.int64), c.astype(np.int64), g, ver)
        rr = np.arange(nr, dtype=np.int64) if ri is None else ri
        cc = np.arange(nc, dtype=np.int64) if ci is None else ci
        r = np.repeat(rr, nc)
        c = np.tile(cc, nr)
        g = g2.reshape(-1)
        ver = None if ver is None else ver.reshape(-1)
    g, keep = check_values(np.asarray(g), meta.dtype, casting, on_nonfinite)
    if keep is not None:
        r, c, g = r[keep], c[keep], g[keep]
        ver = None if ver is None else ver[keep]
    return _coo_plan(meta, r, c, g, ver)


def _sorted_plan(
    meta: ArrayMeta,
    ri: np.ndarray | None,
    ci: np.ndarray | None,
    g2: np.ndarray,
    ver: np.ndarray | None,
    casting: str | None,
    on_nonfinite: str | None,
) -> dict[int, dict[str, Any]] | None:
    """The plan of a gradient on increasing keys along one axis of a range layout
    (``cols=`` of a 1-D array, ``rows=`` with all columns of a single column block),
    or ``None`` when the general path must plan it.

    Increasing keys have no duplicate to sum and fall into blocks as contiguous
    runs, so the plan cuts them (binary search of the block bounds) where the
    general path sorts and groups every entry: the keys a minibatch pulled, sorted
    as a pull sends them, are planned for its step in a few slices.
    """
    lay = meta.layout
    nr, nc = g2.shape
    if ri is None and ci is not None and nr == 1 and lay.col_mode == "range":
        axis, idx, extent = "cols", ci, meta.shape[1]
    elif (
        ci is None
        and ri is not None
        and lay.n_col_blocks == 1
        and lay.col_mode == "range"
        and nc == meta.shape[1]
    ):
        axis, idx, extent = "rows", ri, meta.shape[0]
    else:
        return None
    if not is_strictly_sorted(idx):
        return None
    g, keep = check_values(g2, meta.dtype, casting, on_nonfinite)
    if keep is not None:  # entries to drop: the general path removes them
        return None
    ax = plan_axis(lay, axis, idx, extent)
    out: dict[int, dict[str, Any]] = {}
    for b, loc, sl in zip(ax.blocks, ax.local, ax.out, strict=True):
        assert loc is not None and isinstance(sl, slice)  # increasing keys: runs
        if axis == "cols":
            part: dict[str, Any] = {
                "rows": np.zeros(1, np.int64),  # one row: broadcast by Partition.read/write
                "cols": loc,
                "g": g[0, sl].copy(),  # the caller may reuse its gradient array
            }
            if ver is not None:
                part["v"] = ver[0, sl].copy()
        else:
            part = {
                "rows": np.repeat(loc, nc),
                "cols": np.tile(np.arange(nc, dtype=np.int64), loc.shape[0]),
                "g": g[sl].reshape(-1),
            }
            if ver is not None:
                part["v"] = ver[sl].reshape(-1)
        out[b] = part
    return out


def _full_plan(meta: ArrayMeta, g: np.ndarray, ver: np.ndarray | None) -> dict[int, dict[str, Any]]:
    lay = meta.layout
    out = {}
    for b in range(lay.n_blocks):
        r0, r1 = lay.block_rows(b)
        c0, c1 = lay.block_cols(b)
        part: dict[str, Any] = {"full": True, "g": np.ascontiguousarray(g[r0:r1, c0:c1])}
        if ver is not None:
            part["v"] = np.ascontiguousarray(ver[r0:r1, c0:c1])
        out[b] = part
    return out


def _coo_plan(
    meta: ArrayMeta, r: np.ndarray, c: np.ndarray, g: np.ndarray, ver: np.ndarray | None
) -> dict[int, dict[str, Any]]:
    if ver is not None and ver.shape != g.shape:
        raise InvalidArgumentError(f"versions: expected {g.shape[0]} versions, got {ver.shape[0]}")
    flat = r * meta.shape[1] + c
    uniq, inv = np.unique(flat, return_inverse=True)
    if uniq.shape[0] != flat.shape[0]:
        gs = np.zeros(uniq.shape[0], np.result_type(g.dtype, np.float64))
        np.add.at(gs, inv, g)
        g = gs.astype(meta.dtype)
        if ver is not None:
            vs = np.full(uniq.shape[0], np.iinfo(np.int64).max, np.int64)
            np.minimum.at(vs, inv, ver)
            ver = vs
        r, c = np.divmod(uniq, meta.shape[1])
    routed = route_coo(meta.layout, r, c, np.arange(r.shape[0]))
    out = {}
    for b, p in routed.items():
        pos = p["values"]
        part: dict[str, Any] = {"rows": p["coo_rows"], "cols": p["coo_cols"], "g": g[pos]}
        if ver is not None:
            part["v"] = ver[pos]
        out[b] = part
    return out
