"""Predictions of any family, shaped like its input: local in, local out; dask in, dask out.

A daskangel Dataset is scored partition by partition on the workers holding
the rows; :func:`in_input_order` puts the per-partition results back in the
input's row order (a Dataset knows where each row stood), as one lazy dask
array whose blocks are runs of consecutive rows.

Example
-------
>>> import numpy as np
>>> map_rows(np.array([[1.0], [-1.0]]), lambda m: m[:, 0] > 0, bool, False).tolist()
[True, False]
>>> runs(np.array([2, 3, 0, 1, 4]))
[(2, 4), (0, 2), (4, 5)]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._input import is_dask

__all__ = ["in_input_order", "input_order", "map_rows", "runs"]


def map_rows(m: Any, fn: Any, dtype: Any, two_d: bool) -> Any:
    """``fn`` applied to margin blocks of a numpy or dask ``(n, K)`` array."""
    if not is_dask(m):
        return fn(m)
    if two_d:
        return m.map_blocks(fn, dtype=dtype)
    return m.map_blocks(fn, drop_axis=1, dtype=dtype)


def runs(src: np.ndarray) -> list[tuple[int, int]]:
    """``src`` (the row each output row comes from) as ``[start, stop)`` runs of
    consecutive source rows, in output order."""
    if src.shape[0] == 0:
        return []
    cut = np.flatnonzero(np.diff(src) != 1) + 1
    starts = np.concatenate([[0], cut])
    stops = np.concatenate([cut, [src.shape[0]]])
    return [(int(src[a]), int(src[a]) + int(b - a)) for a, b in zip(starts, stops, strict=True)]


def input_order(ds: Any) -> np.ndarray:
    """Where each input row stands in the Dataset's partitions, concatenated in
    partition order: ``results[input_order(ds)]`` is in the input's row order."""
    pos = ds.positions()
    if not pos:
        return np.zeros(0, np.int64)
    return np.argsort(np.concatenate(pos), kind="stable")


def in_input_order(ds: Any, futures: list[Any], width: int | None, dtype: Any = np.float64) -> Any:
    """A dask array ``(n_rows, width)`` of per-partition results in the input's row order.

    ``futures[i]`` holds partition ``i``'s ``(n_rows_i, width)`` result, rows in
    the partition's order; ``width=None``: 1-D results ``(n_rows_i,)``.
    """
    import dask
    import dask.array as da

    def shape(n: int) -> tuple[int, ...]:
        return (n,) if width is None else (n, width)

    blocks = [
        da.from_delayed(dask.delayed(f), shape=shape(info.n_rows), dtype=dtype)
        for f, info in zip(futures, ds.info, strict=True)
    ]
    if not blocks:
        chunks = ((0,),) if width is None else ((0,), (width,))
        return da.zeros(shape(0), chunks=chunks, dtype=dtype)
    cat = da.concatenate(blocks, axis=0)
    order = input_order(ds)
    parts = runs(order)
    if len(parts) == 1:
        return cat
    if len(parts) <= max(64, 4 * len(blocks)):
        return da.concatenate([cat[a:b] for a, b in parts], axis=0)
    return cat[order]  # interleaved rows (shares of a compressed file): one gather
