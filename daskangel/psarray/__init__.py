"""Data plane: PS servers, blocks, partitioners and the PSArray handle."""

from __future__ import annotations

from . import (
    _dataops,  # noqa: F401 - registers the built-in block operations
    _handoff_ops,  # noqa: F401 - registers the hand-off server operations
    _keylists,  # noqa: F401 - registers the key-list server operations
    _rank,  # noqa: F401 - registers the feature indexer's server ops
    _refresh_ops,  # noqa: F401 - registers the eager-refresh server op
    _snapshot_ops,  # noqa: F401 - registers the snapshot server ops
)
from ._agent import PSAgent, agent_of, get_agent
from ._array import PSArray, PSFuture
from ._endpoints import PSWorkerPlugin
from ._initspec import InitSpec
from ._keylists import KeySet
from ._layout import (
    AutoPartitioner,
    BlockPartitioner,
    ColumnRangePartitioner,
    HashPartitioner,
    Layout,
    Partitioner,
    RangePartitioner,
    RowBoundsPartitioner,
)
from ._meta import ArrayMeta, BlockInfo, ServerId
from ._partition import Partition
from ._psf_client import check_copartitioned
from ._psf_server import PSF_REGISTRY, psf_name, register_psf
from ._server import PSServer, server_async_op, server_op

__all__ = [
    "ArrayMeta",
    "AutoPartitioner",
    "BlockInfo",
    "BlockPartitioner",
    "ColumnRangePartitioner",
    "HashPartitioner",
    "InitSpec",
    "KeySet",
    "Layout",
    "PSAgent",
    "PSArray",
    "PSFuture",
    "PSF_REGISTRY",
    "Partition",
    "PSServer",
    "PSWorkerPlugin",
    "Partitioner",
    "RangePartitioner",
    "RowBoundsPartitioner",
    "ServerId",
    "check_copartitioned",
    "psf_name",
    "register_psf",
    "server_async_op",
    "agent_of",
    "get_agent",
    "server_op",
]
