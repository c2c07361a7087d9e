"""Pruned pulls with server-side key lists, addressed by a tag (Angel's "pruning pulling").

A task whose partition touches the same sparse set of keys every iteration
registers that set once: each server keeps the block-local keys it holds under
a tag, and later pulls send only the tag.  A pull then moves only the values
(``itemsize`` bytes per key) instead of the keys and values, and nothing for keys
the task never touches.

Servers keep at most ``daskangel.server.key-lists`` lists (least recently used
dropped).  A server that no longer holds a list answers
:class:`~daskangel.errors.KeyListMissingError`, and the agent registers the list
again and retries, so eviction or a rebuilt server costs one extra round trip.

Example
-------
>>> import numpy as np
>>> from daskangel.psarray._server import PSServer
>>> from daskangel.psarray._initspec import InitSpec
>>> s = PSServer("local", 0)
>>> s.dispatch("create", array="w", blocks=[{"block": 0, "kind": "dense", "shape": (1, 8),
...     "dtype": "float32", "init": InitSpec("const", 2.0).to_dict(), "row0": 0, "col0": 0,
...     "n_cols": 8}])
>>> s.dispatch("keys_register", array="w", tag="t1", parts=[{"block": 0, "cols": np.array([1, 5])}])
>>> s.dispatch("keys_get", array="w", tag="t1", parts=[{"block": 0}])[0]
array([[2., 2.]], dtype=float32)
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import config
from ..errors import KeyListMissingError
from ._server import PSServer, server_op

__all__ = ["KeySet", "key_lists"]


@dataclass(frozen=True, slots=True)
class KeySet:
    """A registered key set of a vector: pull its values with ``get(cols=key_set)``.

    ``cols`` are the global column indices in the order given at registration
    (duplicates allowed); ``tag`` names the servers' cached key lists.
    """

    array: str
    tag: str
    cols: np.ndarray

    def __len__(self) -> int:
        return int(self.cols.shape[0])

    def __repr__(self) -> str:
        return f"KeySet<array={self.array!r}, {len(self)} keys, tag={self.tag[:8]}>"


def key_lists(server: PSServer) -> OrderedDict[tuple[str, str, int], np.ndarray]:
    """The key lists a server holds: ``{(array, tag, block): local column indices}``."""
    lists = getattr(server, "_daskangel_key_lists", None)
    if lists is None:
        lists = OrderedDict()
        server._daskangel_key_lists = lists  # type: ignore[attr-defined]
    return lists


@server_op("keys_register")
def _keys_register(server: PSServer, array: str, parts: list[dict[str, Any]], tag: str) -> None:
    blocks = [server.block(array, int(p["block"])) for p in parts]
    cols = [np.ascontiguousarray(p["cols"], dtype=np.int64) for p in parts]
    for b, c in zip(blocks, cols, strict=True):
        b.check(None, c)
    lists = key_lists(server)
    for p, c in zip(parts, cols, strict=True):
        key = (array, tag, int(p["block"]))
        lists[key] = c
        lists.move_to_end(key)
    limit = int(config.get("daskangel.server.key-lists"))
    while len(lists) > limit:
        lists.popitem(last=False)


@server_op("keys_get")
def _keys_get(
    server: PSServer, array: str, parts: list[dict[str, Any]], tag: str
) -> list[np.ndarray]:
    lists = key_lists(server)
    out = []
    for p in parts:
        key = (array, tag, int(p["block"]))
        cols = lists.get(key)
        if cols is None:
            raise KeyListMissingError(
                f"server {server.address}#{server.index} holds no key list {tag!r} "
                f"for block {key[2]} of array {array!r}"
            )
        lists.move_to_end(key)
        out.append(server.block(array, key[2]).get(None, cols))
    return out


@server_op("keys_drop")
def _keys_drop(
    server: PSServer, array: str, tag: str, parts: list[dict[str, Any]] | None = None
) -> int:
    lists = key_lists(server)
    gone = [k for k in lists if k[0] == array and k[1] == tag]
    for k in gone:
        del lists[k]
    return len(gone)
