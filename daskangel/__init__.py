"""daskangel: the Angel parameter server, on Dask.

Example
-------
>>> import daskangel as angel
>>> angel.PSContext  # doctest: +ELLIPSIS
<class 'daskangel.context.PSContext'>
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from . import (  # noqa: F401 - _compat registers serialisers (lazily), _exit an atexit handler
    _compat,
    _exit,
    config,
    errors,
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
    RowBoundsPartitioner,
)
from .train import ASP, BSP, SSP, TaskContext, Trainer, TrainResult, train

if TYPE_CHECKING:
    from . import data, models, ops

__version__ = "0.1.0"

# imported on first use: a Dask worker that only serves PS blocks never pays for
# pandas / sparse / scikit-learn (seconds per worker process)
_LAZY = ("data", "models", "ops")


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        mod = importlib.import_module(f".{name}", __name__)
        globals()[name] = mod
        return mod
    raise AttributeError(f"module 'daskangel' has no attribute {name!r}")


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
    "RowBoundsPartitioner",
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
