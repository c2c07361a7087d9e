"""Placement of blocks on servers: pure functions, no Dask.

Example
-------
>>> place_blocks([4, 4, 4, 4], ["a", "b"], {})
['a', 'b', 'a', 'b']
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TypeVar

from ..errors import InvalidArgumentError

__all__ = ["place_blocks"]

S = TypeVar("S", bound=Hashable)


def place_blocks(block_bytes: Sequence[int], servers: Sequence[S], load: dict[S, int]) -> list[S]:
    """Greedy byte balancing: largest block first, to the least-loaded server.

    Ties go to the server that has gone longest without a block, so equal-sized
    neighbouring blocks (a row's column blocks) land on different servers.
    ``load`` (``{server: bytes}``) is read as the starting load and updated.
    """
    if not servers:
        raise InvalidArgumentError("servers: expected at least one PS server, got none")
    order = sorted(range(len(block_bytes)), key=lambda b: (-block_bytes[b], b))
    rank = {s: i for i, s in enumerate(servers)}
    last_used = dict.fromkeys(servers, -1)
    out: list[S] = [servers[0]] * len(block_bytes)
    for step, b in enumerate(order):
        s = min(servers, key=lambda s: (load.get(s, 0), last_used[s], rank[s]))
        out[b] = s
        load[s] = load.get(s, 0) + int(block_bytes[b])
        last_used[s] = step
    return out
