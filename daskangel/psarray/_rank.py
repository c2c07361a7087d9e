"""Server operations that rank the stored keys of a sparse array (the feature indexer).

The data layer's distributed counter (Angel's WRITE -> READ -> CLEAN counter)
keeps counts per 63-bit key in a sparse, hash-partitioned array.  Its
``aggregate()`` barrier gives every key with ``count >= threshold`` a dense index
without moving the keys off their servers:

1. ``count_selected``: each block says how many of its keys pass the threshold;
2. the caller turns those numbers into a starting offset per block;
3. ``rank_into``: each block writes ``offset + rank + 1`` (rank in key order) for
   its passing keys into the same block of a co-partitioned array (same layout,
   so the block is on the same server); 0 there means "not indexed".

``rank_into`` is a write like any other (``server_op(writes=True)``): it waits
while a prepared two-phase psf update holds a block it writes (``written``, the
destination), and it carries the caller's run (``fence``): ``aggregate()`` runs on
the driver, whose writes carry none, but called from a training task's thread a
rollback's fence refuses it like the task's other writes.

Example
-------
>>> import numpy as np
>>> from daskangel.psarray._server import PSServer
>>> from daskangel.psarray._initspec import InitSpec
>>> s = PSServer("local", 0)
>>> spec = {"block": 0, "kind": "sparse", "shape": (1, 100), "dtype": "int64",
...         "init": InitSpec().to_dict(), "row0": 0, "col0": 0, "n_cols": 100}
>>> s.dispatch("create", array="c", blocks=[spec]); s.dispatch("create", array="i", blocks=[spec])
>>> s.dispatch("update", array="c", add=True, parts=[{"block": 0, "rows": None,
...     "cols": np.array([40, 7, 9]), "values": np.array([[3, 1, 2]])}])
True
>>> s.dispatch("count_selected", array="c", parts=[{"block": 0}], threshold=2)
[2]
>>> s.dispatch("rank_into", array="c", parts=[{"block": 0, "offset": 10}], dst="i", threshold=2)
[2]
>>> s.dispatch("get", array="i", parts=[{"block": 0, "rows": None, "cols": np.array([7, 9, 40])}])[0]
array([[ 0, 11, 12]])
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import InvalidTypeError
from ._blocks import SparseBlock
from ._server import PSServer, server_op

__all__: list[str] = []


def _selected(b: Any, threshold: float) -> tuple[np.ndarray, np.ndarray]:
    """``(keys, mask)`` of a sparse block's stored entries (keys sorted)."""
    if not isinstance(b, SparseBlock):
        raise InvalidTypeError("count_selected/rank_into: the array must use sparse storage")
    keys = b.keys[: b.n]
    return keys, b.vals[: b.n] >= threshold


@server_op("count_selected")
def _count_selected(
    server: PSServer, array: str, parts: list[dict[str, Any]], threshold: float
) -> list[int]:
    """Per block: how many stored keys have a value ``>= threshold``."""
    out = []
    for p in parts:
        _, mask = _selected(server.block(array, int(p["block"])), threshold)
        out.append(int(mask.sum()))
    return out


@server_op("rank_into", writes=True)
def _rank_into(
    server: PSServer,
    array: str,
    parts: list[dict[str, Any]],
    dst: str,
    threshold: float,
    written: list[str] | None = None,
    fence: list[Any] | None = None,
) -> list[int]:
    """Per block: write ``offset + rank + 1`` of each passing key into ``dst``'s block
    (``written``: ``[dst]``, the blocks held writes wait for; ``fence``: the writer's
    run, refused once a rollback abandoned it)."""
    server.check_fence(fence, dst)
    blocks = [server.block(array, int(p["block"])) for p in parts]
    targets = [server.block(dst, int(p["block"])) for p in parts]  # raise before writing
    out = []
    for b, t, p in zip(blocks, targets, parts, strict=True):
        keys, mask = _selected(b, threshold)
        sel = keys[mask]
        width = b.shape[1]
        rows, cols = np.divmod(sel, width)
        vals = np.arange(1, sel.shape[0] + 1, dtype=np.int64) + int(p["offset"])
        t.update_coo(rows, cols, vals.astype(t.dtype), add=False)
        out.append(int(sel.shape[0]))
    return out
