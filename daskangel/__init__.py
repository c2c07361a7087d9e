"""daskangel: the Angel parameter server, on Dask.

Example
-------
>>> import daskangel as angel
>>> angel.PSContext  # doctest: +ELLIPSIS
<class 'daskangel.context.PSContext'>
"""

from __future__ import annotations

from . import (  # noqa: F401 - _compat registers serialisers
    _compat,
    config,
    data,
    errors,
    models,
    ops,
)
from .context import PSContext
from .persist import load_arrays
from .psarray import (
    AutoPartitioner,
    BlockPartitioner,
    ColumnRangePartitioner,
    HashPartitioner,
    KeySet,
    PSArray,
    RangePartitioner,
)
from .train import ASP, BSP, SSP, TaskContext, Trainer, TrainResult, train

__version__ = "0.1.0"

__all__ = [
    "ASP",
    "BSP",
    "SSP",
    "AutoPartitioner",
    "BlockPartitioner",
    "ColumnRangePartitioner",
    "HashPartitioner",
    "KeySet",
    "PSArray",
    "PSContext",
    "RangePartitioner",
    "TaskContext",
    "TrainResult",
    "Trainer",
    "config",
    "data",
    "errors",
    "ops",
    "load_arrays",
    "models",
    "train",
]
