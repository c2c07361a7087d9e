"""Placement of blocks on servers: pure functions, no Dask.

Example
-------
>>> place_blocks([4, 4, 4, 4], ["a", "b"], {})
['a', 'b', 'a', 'b']
>>> [(u[2], t) for u, t in balance_moves([(4, "w", b, "a") for b in range(4)], ["a", "b"])]
[(0, 'b'), (1, 'b')]
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any, TypeVar

from ..errors import InvalidArgumentError

__all__ = ["balance_moves", "place_blocks"]

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


def balance_moves(
    units: Sequence[tuple[int, Any, int, S]], servers: Sequence[S]
) -> list[tuple[tuple[int, Any, int, S], S]]:
    """Moves that even out the bytes per server: ``[(unit, target), ...]``.

    ``units`` are ``(bytes, key, block, server)``; units on servers not listed
    stay.  Greedily, the largest unit that still narrows the gap moves from the
    fullest server to the emptiest, until none does; a unit moves at most once.
    """
    load = dict.fromkeys(servers, 0)
    mobile = []
    for u in units:
        if u[3] in load:
            load[u[3]] += int(u[0])
            mobile.append(u)
    out: list[tuple[tuple[int, Any, int, S], S]] = []
    while mobile and len(servers) > 1:
        full = max(servers, key=lambda s: (load[s], -servers.index(s)))
        empty = min(servers, key=lambda s: (load[s], servers.index(s)))
        gap = load[full] - load[empty]
        fits = [u for u in mobile if u[3] == full and 0 < u[0] < gap]
        if not fits:
            break
        unit = max(fits, key=lambda u: (u[0], -u[2]))
        mobile.remove(unit)
        load[full] -= int(unit[0])
        load[empty] += int(unit[0])
        out.append((unit, empty))
    return out
