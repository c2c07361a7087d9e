"""The training ratings cut by item as well as by user, for ALS's item phase.

ALS solves item rows from the ratings of each item, so every task also gets an
*item part*: the training ratings (validation split off exactly as
:func:`~._prep.prepare` does) of a contiguous range of item rows, chosen so
that every task has about the same number of ratings.  An item part is a
:class:`~._parts.RatingsPart` with the roles swapped: ``user0`` / ``n_users``
are its first item row and item count, ``u`` the item row less ``user0``,
``i`` the user row.

Local parts are cut on the driver; parts that are futures are cut on the
workers (each user part into pieces by item range, one gathering task per item
part, as :mod:`._distributed` builds the user parts), and each task's data is
the future of the pair ``(user part, item part)``.

Example
-------
>>> from daskangel.models.mf._parts import make_part
>>> up = [make_part(0, 0, 2, np.array([0, 1, 1]), np.array([0, 0, 1]),
...                 np.array([1.0, 2.0, 3.0], np.float32), 2)]
>>> ip = item_pieces(up[0], np.array([0, 1, 2]), 0, 0.0, 64)
>>> [p[0].tolist() for p in ip], [p[1].tolist() for p in ip]
([[0, 0], [1]], [[0, 1], [1]])
"""

from __future__ import annotations

import itertools
import operator
from typing import Any

import numpy as np

from ._parts import RatingsPart, make_part, task_of, user_bounds
from ._prep import prepare

__all__ = ["item_parts", "item_pieces"]


def item_pieces(
    part: RatingsPart, bounds: np.ndarray, seed: int, val_fraction: float, pull_rows: int
) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """``part``'s training ratings as ``(item row, user row, rating)`` per item range."""
    d = prepare(part, seed=seed, val_fraction=val_fraction, pull_rows=pull_rows)
    items = d.keys[d.slot]
    users = d.u.astype(np.int64) + part.user0
    t = task_of(items, bounds)
    order = np.lexsort((users, items))
    t = t[order]
    cuts = np.searchsorted(t, np.arange(bounds.shape[0]))
    items, users, r = items[order], users[order], d.r[order]
    return [(items[a:b], users[a:b], r[a:b]) for a, b in itertools.pairwise(cuts)]


def combine(
    task: int, bounds: np.ndarray, n_users: int, *pieces: tuple[np.ndarray, ...]
) -> RatingsPart:
    """Item part ``task`` from its pieces (one per user part)."""

    def cat(k: int, dt: Any) -> np.ndarray:
        return np.concatenate([p[k] for p in pieces]).astype(dt) if pieces else np.zeros(0, dt)

    return make_part(
        task,
        int(bounds[task]),
        int(bounds[task + 1]),
        cat(0, np.int64),
        cat(1, np.int64),
        cat(2, np.float32),
        n_users,
    )


def _pair(up: RatingsPart, ip: RatingsPart) -> tuple[RatingsPart, RatingsPart]:
    return (up, ip)


def item_parts(client: Any, ing: Any, plan: Any) -> Any:
    """Each task's ``(user part, item part)``: a list (local input) or futures."""
    T = len(ing.parts)
    bounds = user_bounds(np.asarray(ing.item_counts, np.int64), T)
    args = (bounds, plan.seed, plan.val_fraction, plan.pull_rows)
    if ing.local:
        pieces = [item_pieces(p, *args) for p in ing.parts]
        items = [combine(t, bounds, plan.n_users, *[pc[t] for pc in pieces]) for t in range(T)]
        return list(zip(ing.parts, items, strict=True))
    from ._ingest import PartFutures

    src = ing.parts
    cut = client.map(item_pieces, src.partitions, *[[a] * T for a in args], pure=False)
    pairs = []
    for t in range(T):
        got = [client.submit(operator.getitem, c, t, pure=False) for c in cut]
        w = src.workers[t]
        ip = client.submit(
            combine, t, bounds, plan.n_users, *got, workers=[w], allow_other_workers=True,
            pure=False,
        )  # fmt: skip
        pairs.append(
            client.submit(
                _pair, src.partitions[t], ip, workers=[w], allow_other_workers=True, pure=False
            )
        )
    return PartFutures(pairs, list(src.workers), src.source)
