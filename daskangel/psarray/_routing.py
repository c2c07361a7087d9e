"""Turning a request into one part per touched block, and results back into arrays.

All of this runs in the caller's thread before anything is sent, so a request that
is rejected (bad index, wrong shape, forbidden cast, NaN, too large) reaches no
server.  Grouping indices by block is a linear counting sort (numba).

Example
-------
>>> import numpy as np
>>> from daskangel.psarray._layout import BlockPartitioner
>>> lay = BlockPartitioner((1, 4)).layout((1, 10), 4, 2, False)
>>> plan = plan_axis(lay, "cols", np.array([9, 0, 5]), 10)
>>> [(int(b), loc.tolist()) for b, loc in zip(plan.blocks, plan.local)]
[(0, [0]), (1, [1]), (2, [1])]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from dask.utils import format_bytes

from .. import config
from ..errors import (
    CastingError,
    InvalidArgumentError,
    NonFiniteError,
    PSIndexError,
    RequestTooLargeError,
)
from . import _kernels as K
from ._layout import Layout

__all__ = [
    "AxisPlan",
    "Index",
    "check_shape",
    "check_size",
    "check_values",
    "normalize_index",
    "plan_axis",
    "route_coo",
]

Index = np.ndarray | None


@dataclass(frozen=True, slots=True)
class AxisPlan:
    """Where one axis of a request falls.

    ``blocks[k]`` is a touched block index along this axis (row block or column
    block), ``local[k]`` the local indices sent to it (``None``: all of them) and
    ``out[k]`` the matching positions in the request (a slice when contiguous).
    """

    blocks: list[int]
    local: list[np.ndarray | None]
    out: list[np.ndarray | slice]
    size: int


def normalize_index(name: str, idx: Any, extent: int) -> tuple[Index, bool]:
    """Validate an index; return ``(int64 array or None, is_scalar)``.

    Accepts ``None`` (everything), an int, a slice, a boolean mask of length
    ``extent`` or a 1-D sequence of integers in ``[0, extent)``.
    """
    if idx is None:
        return None, False
    if isinstance(idx, (int, np.integer)) and not isinstance(idx, bool):
        i = int(idx)
        if not 0 <= i < extent:
            raise PSIndexError(f"{name}: index {i} is out of range [0, {extent})")
        return np.array([i], dtype=np.int64), True
    if isinstance(idx, slice):
        start, stop, step = idx.indices(extent)
        n = len(range(start, stop, step))
        check_size(name, n * 8, f"{name}: a slice of {n:,} indices")  # before np.arange
        return np.arange(start, stop, step, dtype=np.int64), False
    arr = np.asarray(idx)
    if arr.size == 0:
        return np.empty(0, np.int64), False
    if arr.ndim != 1:
        raise PSIndexError(f"{name}: expected a 1-D index, got an array of shape {arr.shape}")
    if arr.dtype == np.bool_:
        if arr.shape[0] != extent:
            raise PSIndexError(
                f"{name}: boolean mask of length {arr.shape[0]} for an axis of length {extent}"
            )
        return np.flatnonzero(arr).astype(np.int64), False
    if arr.dtype.kind not in "iu":
        raise PSIndexError(f"{name}: expected integer indices, got dtype {arr.dtype}")
    arr = arr.astype(np.int64, copy=False)
    lo, hi = int(arr.min()), int(arr.max())
    if lo < 0 or hi >= extent:
        bad = lo if lo < 0 else hi
        pos = int(np.flatnonzero(arr == bad)[0])
        raise PSIndexError(f"{name}: index {bad} (at position {pos}) is out of range [0, {extent})")
    return arr, False


def plan_axis(layout: Layout, axis: str, idx: Index, extent: int) -> AxisPlan:
    """Group a (validated) index along ``axis`` (``"rows"`` or ``"cols"``) by block."""
    hashed = axis == "cols" and layout.col_mode == "hash"
    if axis == "rows":
        bounds, n = layout.row_bounds, layout.n_row_blocks
    else:
        bounds, n = layout.col_bounds, layout.n_col_blocks
    if idx is None and not hashed:
        return AxisPlan(
            list(range(n)),
            [None] * n,
            [slice(bounds[i], bounds[i + 1]) for i in range(n)],
            extent,
        )
    if idx is None:
        check_size(axis, extent * 8, f"{axis}: all {extent:,} hashed keys")
        idx = np.arange(extent, dtype=np.int64)
    m = idx.shape[0]
    if n == 1:
        return AxisPlan([0], [idx if hashed else idx - bounds[0]], [slice(0, m)], m)
    if not hashed and K.is_sorted(idx):  # sorted keys (key lists): cut, no gather
        cuts = np.searchsorted(idx, np.asarray(bounds[1:n], dtype=np.int64))
        edges = [0, *cuts.tolist(), m]
        hit = [g for g in range(n) if edges[g] < edges[g + 1]]
        return AxisPlan(
            hit,
            [idx[edges[g] : edges[g + 1]] - bounds[g] for g in hit],
            [slice(edges[g], edges[g + 1]) for g in hit],
            m,
        )
    if hashed:
        order, starts = K.counting_group(layout.col_block_of(idx), n)
        local = idx[order]
    else:
        order, starts, local = K.group_by_bounds(idx, np.asarray(bounds, dtype=np.int64))
    blocks: list[int] = []
    locs: list[np.ndarray | None] = []
    outs: list[np.ndarray | slice] = []
    for g in range(n):
        s, e = int(starts[g]), int(starts[g + 1])
        if s == e:
            continue
        blocks.append(g)
        locs.append(local[s:e])
        outs.append(slice(0, m) if e - s == m else order[s:e])
    return AxisPlan(blocks, locs, outs, m)


def route_coo(
    layout: Layout, rows: np.ndarray, cols: np.ndarray, values: np.ndarray
) -> dict[int, dict[str, np.ndarray]]:
    """Split coordinate-format entries into ``{block: {coo_rows, coo_cols, values}}``."""
    nc = layout.n_col_blocks
    if layout.n_blocks == 1:
        groups = {0: np.arange(rows.shape[0])}
    else:
        ids = layout.row_block_of(rows) * nc + layout.col_block_of(cols)
        order, starts = K.counting_group(ids.astype(np.int64), layout.n_blocks)
        groups = {
            b: order[starts[b] : starts[b + 1]]
            for b in range(layout.n_blocks)
            if starts[b + 1] > starts[b]
        }
    out: dict[int, dict[str, np.ndarray]] = {}
    for b, pos in groups.items():
        r0, _ = layout.block_rows(b)
        c0, _ = layout.block_cols(b)
        out[b] = {
            "coo_rows": rows[pos] - r0,
            "coo_cols": cols[pos] - c0,
            "values": values[pos],
        }
    return out


def check_size(name: str, nbytes: int, what: str | None = None) -> None:
    """Reject a request over ``daskangel.client.max-request-bytes`` before sending
    (``what`` describes it; default: ``"{name}: request"``)."""
    limit = config.get_bytes("daskangel.client.max-request-bytes")
    if nbytes > limit:
        raise RequestTooLargeError(
            f"{what or name + ': request'} of {format_bytes(nbytes)} ({nbytes:,} bytes) "
            f"exceeds daskangel.client.max-request-bytes = {format_bytes(limit)}; nothing was "
            "allocated or sent: split it (get_iter, smaller rows=/cols= slices) or raise the limit"
        )


def selected(idx: Any, extent: int) -> int:
    """How many entries an index selects along an axis of ``extent``, without
    materialising it (a slice is counted, not expanded)."""
    if idx is None:
        return extent
    if isinstance(idx, slice):
        return len(range(*idx.indices(extent)))
    if isinstance(idx, (int, np.integer)):
        return 1
    if isinstance(idx, np.ndarray) and idx.dtype == np.bool_:
        return int(np.count_nonzero(idx))
    try:
        return len(idx)
    except TypeError:
        return 1


def check_shape(name: str, shape: tuple[int, int], itemsize: int, rows: Any, cols: Any) -> None:
    """Reject a rows x cols request over ``daskangel.client.max-request-bytes`` from
    its shape alone, before any index, value or output array is made."""
    nr, nc = selected(rows, shape[0]), selected(cols, shape[1])
    check_size(name, nr * nc * itemsize, f"{name}: {nr:,} x {nc:,} entries of {itemsize} bytes")


def _finite(values: np.ndarray) -> bool:
    """True when every entry is finite; a broadcast array is tested on its base."""
    if values.size and 0 in values.strides:
        values = values[tuple(slice(None) if st else slice(0, 1) for st in values.strides)]
    flat = values.reshape(-1)
    split = flat.nbytes >= config.get_bytes("daskangel.client.split-check-bytes")
    return bool(K.all_finite(flat, split))


def check_values(
    values: np.ndarray, dtype: np.dtype, casting: str | None, on_nonfinite: str | None
) -> tuple[np.ndarray, np.ndarray | None]:
    """Cast ``values`` to ``dtype`` under ``casting``; find non-finite entries.

    Returns ``(values, keep)`` where ``keep`` is ``None`` when every entry is kept,
    or a boolean mask of the finite entries under ``on_nonfinite='skip'``.
    """
    casting = casting or config.get("daskangel.client.casting")
    on_nonfinite = on_nonfinite or config.get("daskangel.client.on-nonfinite")
    if on_nonfinite not in ("raise", "skip"):
        raise InvalidArgumentError(
            f"on_nonfinite: expected 'raise' or 'skip', got {on_nonfinite!r}"
        )
    if values.dtype.kind not in "biuf":
        raise CastingError(f"values: expected numbers, got dtype {values.dtype}")
    if not np.can_cast(values.dtype, dtype, casting=casting):  # type: ignore[arg-type]
        raise CastingError(
            f"values: cannot cast {values.dtype} to the array's {dtype} under "
            f"casting={casting!r}; pass casting='same_kind' to allow it"
        )
    keep = None
    if values.dtype.kind == "f" and not _finite(values):
        finite = np.isfinite(values)
        if not finite.all():
            if on_nonfinite == "raise":
                bad = np.argwhere(~finite)[0].tolist()
                raise NonFiniteError(
                    f"values: {int((~finite).sum())} non-finite entries (first at "
                    f"{bad}); pass on_nonfinite='skip' to drop them"
                )
            keep = finite
    with np.errstate(over="ignore", invalid="ignore"):
        out = values.astype(dtype, copy=False)
    if (
        dtype.kind == "f"
        and values.dtype.kind == "f"
        and out.dtype.itemsize < values.dtype.itemsize
    ):
        over = np.isinf(out) & np.isfinite(values)
        if over.any():
            raise CastingError(f"values: {int(over.sum())} entries overflow {dtype}")
    return out, keep
