"""PSArray → dask.array: one task per block, pinned to the worker holding it.

Example
-------
>>> x = w.to_dask_array()          # doctest: +SKIP
>>> float(x.sum().compute())       # doctest: +SKIP
0.0
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import dask.array

    from ._array import PSArray

__all__ = ["read_block", "to_dask_array"]


def read_block(name: str, block: int, token: str) -> Any:
    """Task body: read one whole block (``token`` only makes the key unique)."""
    from ._binding import get_binding

    b = get_binding()
    res = b.run(b.call_blocks, name, "read_block", {block: {"block": block}}, {}, {})[block]
    if res["kind"] == "dense":
        return res["data"]
    import sparse

    shape = tuple(res["shape"])
    coo = sparse.COO(
        np.stack([res["rows"], res["cols"]]), res["values"], shape=shape, fill_value=res["default"]
    )
    return coo


def read_range(name: str, rows: tuple[int, int], cols: tuple[int, int], token: str) -> Any:
    """Task body: read a rectangle through ``get`` (for hash-partitioned arrays)."""
    from ._array import PSArray

    arr = PSArray(name)
    out = arr.get(rows=slice(*rows), cols=slice(*cols))
    return out if arr.ndim == 2 else out.reshape(1, -1)


def to_dask_array(arr: PSArray) -> dask.array.Array:
    import dask.array as da
    from dask.highlevelgraph import HighLevelGraph, MaterializedLayer

    m = arr.meta
    lay = m.layout
    token = arr.version_token()
    name = f"psarray-{m.name}-{token}"
    dsk: dict[Any, Any] = {}
    workers: dict[Any, list[str]] = {}
    if lay.col_mode == "range":
        for b in range(lay.n_blocks):
            i, j = divmod(b, lay.n_col_blocks)
            key = (name, i, j)
            dsk[key] = (read_block, m.name, b, token)
            workers[key] = [m.servers[b].address]
        col_bounds = lay.col_bounds
    else:
        # hash blocks do not map to column ranges: read row-block x column-range tiles
        step = max(1, -(-m.shape[1] // max(1, lay.n_col_blocks)))
        col_bounds = tuple(list(range(0, m.shape[1], step)) + [m.shape[1]])
        for i in range(lay.n_row_blocks):
            for j in range(len(col_bounds) - 1):
                dsk[(name, i, j)] = (
                    read_range,
                    m.name,
                    (lay.row_bounds[i], lay.row_bounds[i + 1]),
                    (col_bounds[j], col_bounds[j + 1]),
                    token,
                )
    chunks = (
        tuple(np.diff(lay.row_bounds).tolist()),
        tuple(np.diff(col_bounds).tolist()),
    )
    annotations = {"workers": workers.get, "allow_other_workers": True} if workers else None
    layer = MaterializedLayer(dsk, annotations=annotations)
    graph = HighLevelGraph({name: layer}, {name: set()})
    if m.sparse and lay.col_mode == "range":
        import sparse

        meta_arr: Any = sparse.COO.from_numpy(np.zeros((0, 0), dtype=m.dtype))
    else:
        meta_arr = np.empty((0, 0), dtype=m.dtype)
    out = da.Array(graph, name, chunks, dtype=m.dtype, meta=meta_arr)
    if m.ndim == 1:
        out = out[0]
    return out
