"""Predictions of any family, shaped like its input: local in, local out; dask in, dask out.

Example
-------
>>> import numpy as np
>>> map_rows(np.array([[1.0], [-1.0]]), lambda m: m[:, 0] > 0, bool, False).tolist()
[True, False]
"""

from __future__ import annotations

from typing import Any

from ._input import is_dask

__all__ = ["map_rows"]


def map_rows(m: Any, fn: Any, dtype: Any, two_d: bool) -> Any:
    """``fn`` applied to margin blocks of a numpy or dask ``(n, K)`` array."""
    if not is_dask(m):
        return fn(m)
    if two_d:
        return m.map_blocks(fn, dtype=dtype)
    return m.map_blocks(fn, drop_axis=1, dtype=dtype)
