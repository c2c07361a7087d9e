"""daskangel: the Angel parameter server, on Dask.

Example
-------
>>> import daskangel as angel
>>> angel.PSContext  # doctest: +ELLIPSIS
<class 'daskangel.context.PSContext'>
"""

from __future__ import annotations

from . import _compat, config, data, errors  # noqa: F401 - _compat registers serialisers
from .context import PSContext
from .persist import load_arrays
from .psarray import (
    AutoPartitioner,
    BlockPartitioner,
    ColumnRangePartitioner,
    HashPartitioner,
    PSArray,
    RangePartitioner,
)

__version__ = "0.1.0"

__all__ = [
    "AutoPartitioner",
    "BlockPartitioner",
    "ColumnRangePartitioner",
    "HashPartitioner",
    "PSArray",
    "PSContext",
    "RangePartitioner",
    "config",
    "data",
    "errors",
    "load_arrays",
]
