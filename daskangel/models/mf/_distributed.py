"""Ratings that live on the workers (dask DataFrames, ``read_ratings`` Datasets), cut by user.

The rows never come to the driver.  For chunks (futures of DataFrame chunks or
Dataset partitions):

1. each chunk's distinct raw user and item ids and rating sums are computed
   where it lives and merged pairwise on the workers (a tree), so the driver
   gets only the distinct ids, from which it numbers users and items
   (:class:`~._ids.IdMap`);
2. each chunk is encoded to rows with the maps (broadcast once) and its users
   counted; the counts are summed in a tree and give every task a contiguous
   user range with about the same number of ratings (:func:`~._parts.user_bounds`);
3. each encoded chunk is cut by task, and one task per training task gathers
   its pieces, in chunk order, into a :class:`~._parts.RatingsPart` (the
   last of duplicate pairs wins, as for local input).

Parts are Dask futures computed from that graph: a part lost with its worker is
recomputed by Dask from the chunks (which a dask collection recomputes from its
own graph).

Example
-------
>>> parts, umap, imap, stats = build(client, chunks, cols, None, None, 4)  # doctest: +SKIP
"""

from __future__ import annotations

import itertools
import operator
from dataclasses import dataclass
from typing import Any

import numpy as np
from distributed import Future, wait

from ...errors import InvalidArgumentError
from ._ids import IdMap, distinct
from ._parts import RatingsPart, make_part, task_of, user_bounds
from ._ratings import Columns, raw_triples

__all__ = ["Stats", "build", "tree_reduce"]


@dataclass(frozen=True, slots=True)
class Stats:
    """What the driver learns of the ratings: count, sum, range, distinct ids."""

    n: int
    total: float
    lo: float
    hi: float
    users: np.ndarray
    items: np.ndarray


def _summary(chunk: Any, cols: Columns) -> Stats:
    u, i, r = raw_triples(chunk, cols)
    if r.shape[0] == 0:
        return Stats(0, 0.0, np.inf, -np.inf, distinct(u), distinct(i))
    return Stats(
        int(r.shape[0]),
        float(r.sum(dtype=np.float64)),
        float(r.min()),
        float(r.max()),
        distinct(u),
        distinct(i),
    )


def _merge(a: Stats, b: Stats) -> Stats:
    return Stats(
        a.n + b.n,
        a.total + b.total,
        min(a.lo, b.lo),
        max(a.hi, b.hi),
        distinct(np.concatenate([a.users, b.users])),
        distinct(np.concatenate([a.items, b.items])),
    )


def tree_reduce(client: Any, futures: list[Future], fn: Any) -> Any:
    """``fn`` applied pairwise on the workers until one result is left; its value."""
    level = list(futures)
    while len(level) > 1:
        nxt = [
            client.submit(fn, level[k], level[k + 1], pure=False)
            for k in range(0, len(level) - 1, 2)
        ]
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    return level[0].result()


def _encode(
    chunk: Any, cols: Columns, umap: IdMap, imap: IdMap
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    u, i, r = raw_triples(chunk, cols)
    return umap.encode(u), imap.encode(i), r


def _count(enc: tuple[np.ndarray, ...], n_users: int, n_items: int) -> tuple[np.ndarray, ...]:
    u, i = enc[0], enc[1]
    return (
        np.bincount(u[u >= 0], minlength=n_users).astype(np.int64),
        np.bincount(i[i >= 0], minlength=n_items).astype(np.int64),
    )


def _add(a: tuple[np.ndarray, ...], b: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
    return (a[0] + b[0], a[1] + b[1])


def _split(enc: tuple[np.ndarray, ...], bounds: np.ndarray) -> list[tuple[np.ndarray, ...]]:
    u, i, r = enc
    t = task_of(u, bounds)
    order = np.argsort(t, kind="stable")
    cuts = np.searchsorted(t[order], np.arange(bounds.shape[0]))
    return [(u[order[a:b]], i[order[a:b]], r[order[a:b]]) for a, b in itertools.pairwise(cuts)]


def _combine(
    task: int,
    bounds: np.ndarray,
    n_items: int,
    n_train: int,
    *pieces: tuple[np.ndarray, ...],
) -> RatingsPart:
    def cat(ps: tuple[tuple[np.ndarray, ...], ...], k: int, dt: Any) -> np.ndarray:
        return np.concatenate([p[k] for p in ps]).astype(dt) if ps else np.zeros(0, dt)

    tr, ev = pieces[:n_train], pieces[n_train:]
    u, i, r = cat(tr, 0, np.int64), cat(tr, 1, np.int64), cat(tr, 2, np.float32)
    evals = None
    if ev:
        evals = (cat(ev, 0, np.int64), cat(ev, 1, np.int64), cat(ev, 2, np.float32))
    return make_part(task, int(bounds[task]), int(bounds[task + 1]), u, i, r, n_items, evals)


def _maps(stats: Stats, umap: IdMap | None, imap: IdMap | None) -> tuple[IdMap, IdMap]:
    if umap is None:
        umap = IdMap(stats.users, "user")
    else:
        umap, _ = umap.extend(stats.users)
    if imap is None:
        imap = IdMap(stats.items, "item")
    else:
        imap, _ = imap.extend(stats.items)
    return umap, imap


def build(
    client: Any,
    chunks: list[Future],
    cols: Columns,
    umap: IdMap | None,
    imap: IdMap | None,
    n_tasks: int,
    workers: list[str],
    eval_chunks: list[Future] | None = None,
) -> tuple[list[Future], IdMap, IdMap, Stats, np.ndarray, tuple[np.ndarray, ...]]:
    """Parts (futures, one per task) of ``chunks``; the (extended) maps; stats; bounds;
    ratings per user and per item row."""
    sums = client.map(_summary, chunks, cols=cols, pure=False)
    stats: Stats = tree_reduce(client, sums, _merge)
    del sums
    if stats.n == 0:
        raise InvalidArgumentError("ratings: empty (no ratings to train on)")
    umap, imap = _maps(stats, umap, imap)
    fu, fi = client.scatter([umap, imap], broadcast=True, hash=False)
    enc = client.map(_encode, chunks, cols=cols, umap=fu, imap=fi, pure=False)
    counts = tree_reduce(
        client, client.map(_count, enc, n_users=len(umap), n_items=len(imap), pure=False), _add
    )
    bounds = user_bounds(counts[0], n_tasks)
    splits = client.map(_split, enc, bounds=bounds, pure=False)
    ev_splits: list[Future] = []
    if eval_chunks:
        ev_cols = Columns(cols.user, cols.item, cols.rating, cols.implicit)
        ev_enc = client.map(_encode, eval_chunks, cols=ev_cols, umap=fu, imap=fi, pure=False)
        ev_splits = client.map(_split, ev_enc, bounds=bounds, pure=False)
    parts = []
    for t in range(n_tasks):
        pieces = [client.submit(operator.getitem, s, t, pure=False) for s in splits]
        pieces += [client.submit(operator.getitem, s, t, pure=False) for s in ev_splits]
        w = workers[t % len(workers)]
        parts.append(
            client.submit(
                _combine,
                t,
                bounds,
                len(imap),
                len(splits),
                *pieces,
                workers=[w],
                allow_other_workers=True,
                pure=False,
            )
        )
    wait(parts)
    for p in parts:
        if p.status == "error":
            p.result()
    return parts, umap, imap, stats, bounds, counts
