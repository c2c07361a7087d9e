"""Data plane: PS servers, blocks, partitioners and the PSArray handle."""

from __future__ import annotations

from . import (
    _rank,  # noqa: F401 - registers the feature indexer's server ops
    _snapshot_ops,  # noqa: F401 - registers the snapshot server ops
)
from ._array import PSArray, PSFuture
from ._blocks import InitSpec
from ._layout import (
    AutoPartitioner,
    BlockPartitioner,
    ColumnRangePartitioner,
    HashPartitioner,
    Layout,
    Partitioner,
    RangePartitioner,
)
from ._meta import ArrayMeta, BlockInfo, ServerId
from ._server import PSServer, PSWorkerPlugin, server_async_op, server_op

__all__ = [
    "ArrayMeta",
    "AutoPartitioner",
    "BlockInfo",
    "BlockPartitioner",
    "ColumnRangePartitioner",
    "HashPartitioner",
    "InitSpec",
    "Layout",
    "PSArray",
    "PSFuture",
    "PSServer",
    "PSWorkerPlugin",
    "Partitioner",
    "RangePartitioner",
    "ServerId",
    "server_async_op",
    "server_op",
]
