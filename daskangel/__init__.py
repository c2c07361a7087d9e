"""daskangel: the Angel parameter server, on Dask.

Example
-------
>>> import daskangel as angel
>>> angel.PSContext  # doctest: +ELLIPSIS
<class 'daskangel.context.PSContext'>
"""

from __future__ import annotations

from . import config, data, errors
from .context import PSContext
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
]
