"""Which data partition each training task gets, and which worker it runs on.

``data`` is one of

* ``None``: tasks get ``None`` (model-only work), spread over the workers;
* a *Dataset-like* object with ``.partitions``, a list of Dask futures (the data
  layer's ``Dataset``): each task is pinned to a worker that holds its partition,
  so training data never moves;
* any sequence: its items are scattered over the workers, one per task.

There is one item per task, or one per group.  With one per group and
``group_size > 1`` the members share it according to ``placement``:
``"replicated"`` (every member gets the whole item), ``"horizontal"`` (rows
split), ``"vertical"`` (columns split; 1-D parts such as labels are kept whole),
or a function ``placement(item, rank, size)``.

A future shared by a group (a Dataset's partition, say) is split on the worker
holding it, and the group's members are spread over the workers (the leader,
rank 0, stays with the item; the others go to the least loaded workers the
group does not use yet), so a group computes on several machines: Angel's hybrid
parallelism.  Only a member's share crosses the network, never the whole item,
and a :class:`~daskangel.data.Partition` splits itself
(:meth:`~daskangel.data.Partition.member_share`: rows, or features with global
indices, read without touching the rest) and is stored again at its storage level
on the member's worker (``settle``).

Example
-------
>>> import numpy as np
>>> split_piece((np.arange(10).reshape(5, 2), np.arange(5)), 1, 2, "horizontal")
(array([[4, 5],
       [6, 7],
       [8, 9]]), array([2, 3, 4]))
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from distributed import Client, Future

from .._compat import training_workers
from ..errors import InvalidArgumentError, InvalidTypeError

__all__ = [
    "PLACEMENTS",
    "assign",
    "group_item",
    "member_worker",
    "place_share",
    "settle",
    "split_piece",
    "task_pieces",
]

PLACEMENTS = ("replicated", "horizontal", "vertical")


def _cut(x: Any, lo: int, hi: int, axis: int) -> Any:
    if hasattr(x, "iloc"):  # pandas
        return x.iloc[lo:hi] if axis == 0 else x.iloc[:, lo:hi]
    return x[lo:hi] if axis == 0 else x[:, lo:hi]


def split_piece(item: Any, rank: int, size: int, placement: str | Callable[..., Any]) -> Any:
    """Member ``rank``'s share of a group's ``item`` (see the module docstring)."""
    if callable(placement):
        return placement(item, rank, size)
    share = getattr(item, "member_share", None)
    if callable(share):  # a daskangel Partition cuts itself (replicated too: see settle)
        return share(rank, size, placement)
    if placement == "replicated" or item is None:
        return item
    axis = 0 if placement == "horizontal" else 1
    if isinstance(item, (tuple, list)):
        return type(item)(split_piece(x, rank, size, placement) for x in item)
    ndim = getattr(item, "ndim", None)
    if ndim is None:
        if axis == 1:
            raise InvalidArgumentError(
                f"placement: 'vertical' needs 2-D parts, got {type(item).__name__}"
            )
        n = len(item)
    elif axis == 1 and ndim < 2:
        return item  # labels and other 1-D parts stay whole in a vertical split
    else:
        n = item.shape[axis]
    return _cut(item, rank * n // size, (rank + 1) * n // size, axis)


def settle(piece: Any) -> Any:
    """On the member's worker: a share in transit stored there (a Partition's
    :class:`~daskangel.data._partition.Transit`), anything else as it is."""
    fn = getattr(piece, "settle", None)
    return fn() if callable(fn) else piece


def place_share(
    client: Client,
    item: Future,
    holder: str,
    rank: int,
    size: int,
    placement: str | Callable[..., Any],
    worker: str,
) -> Future:
    """Member ``rank``'s share of a group's ``item`` (a future held by ``holder``),
    cut on ``holder`` and kept on ``worker``: only the share moves."""
    if placement == "replicated" and worker == holder:
        return item
    opts: dict[str, Any] = {"allow_other_workers": False, "pure": False}
    piece = client.submit(split_piece, item, rank, size, placement, workers=[holder], **opts)
    return client.submit(settle, piece, workers=[worker], **opts)


def group_item(n_items: int, n_groups: int, group_size: int, t: int) -> tuple[int, int] | None:
    """``(item index, rank)`` when task ``t`` shares its group's item, else ``None``."""
    if n_items == n_groups * group_size:
        return None
    return t // group_size, t % group_size


def _spread(pool: list[str], holders: list[str], group_size: int) -> list[str]:
    """A worker per task: each group's leader with its item, the other members on
    the least loaded workers the group does not use yet (ties: the next ones after
    the holder in ``pool``'s order)."""
    load = dict.fromkeys(pool, 0)
    for h in holders:
        load[h] = load.get(h, 0) + 1
    out: list[str] = []
    for holder in holders:
        used = {holder}
        out.append(holder)
        start = pool.index(holder) if holder in pool else 0
        for _ in range(1, group_size):
            free = [w for w in pool if w not in used] or pool
            w = min(free, key=lambda w: (load[w], (pool.index(w) - start) % len(pool)))
            load[w] += 1
            used.add(w)
            out.append(w)
    return out


def member_worker(where: Sequence[str | None], t: int, group_size: int, live: list[str]) -> str:
    """A live worker for task ``t``, a group member whose share is cut again after its
    worker died: one its group's other members do not use (members stay spread, as
    :func:`_spread` placed them), the least loaded by ``where`` (every task's worker);
    ties: the next ones from the ``t``-th of ``live``.

    Example
    -------
    >>> member_worker(["a", "b"], 1, 2, ["0", "a", "c"])  # not with its partner on "a"
    'c'
    """
    g = t // group_size
    partners = {w for u, w in enumerate(where) if u != t and u // group_size == g}
    load = dict.fromkeys(live, 0)
    for u, w in enumerate(where):
        if u != t and w in load:
            load[w] += 1
    free = [w for w in live if w not in partners] or live
    start = t % len(live)
    return min(free, key=lambda w: (load[w], (live.index(w) - start) % len(live)))


def _partitions(data: Any) -> list[Any] | None:
    parts = getattr(data, "partitions", None)
    if parts is None:
        return None
    parts = list(parts)
    bad = [type(p).__name__ for p in parts if not isinstance(p, Future)]
    if bad:
        raise InvalidTypeError(f"data: .partitions must be Dask futures, got {bad[:3]}")
    return parts


def task_pieces(
    data: Any, n_groups: int, group_size: int, placement: str | Callable[..., Any]
) -> list[Any]:
    """The driver-side piece of each task for sequence data (kept by the trainer,
    so a piece lost with its worker can be scattered again)."""
    items = list(data)
    n_tasks = n_groups * group_size
    if len(items) == n_tasks:
        return items
    return [
        split_piece(items[t // group_size], t % group_size, group_size, placement)
        for t in range(n_tasks)
    ]


def assign(
    client: Client,
    data: Any,
    n_groups: int,
    group_size: int,
    placement: str | Callable[..., Any],
    workers: Sequence[str] | None = None,
) -> list[tuple[Any, str]]:
    """``[(partition future or None, worker address)]``, one per task id."""
    n_tasks = n_groups * group_size
    pool = list(workers) if workers else sorted(training_workers(client))
    if not pool:
        raise InvalidArgumentError("client: the cluster has no workers to train on")
    if data is None:
        return [(None, pool[t % len(pool)]) for t in range(n_tasks)]
    futures = _partitions(data)
    items = futures if futures is not None else list(data)
    if len(items) not in (n_tasks, n_groups):
        raise InvalidArgumentError(
            f"data: expected one item per task ({n_tasks}) or per group ({n_groups}), "
            f"got {len(items)}"
        )
    if futures is None:
        pieces = task_pieces(data, n_groups, group_size, placement)
        scattered = client.scatter(pieces, workers=pool, hash=False)
        where = client.who_has(scattered)
        return [(f, where[f.key][0]) for f in scattered]
    where = client.who_has(items)
    holders = [
        where[f.key][0] if where.get(f.key) else pool[i % len(pool)] for i, f in enumerate(items)
    ]
    if len(items) == n_tasks:
        return list(zip(items, holders, strict=True))
    workers_of = _spread(pool, holders, group_size)
    return [
        (
            place_share(
                client,
                items[t // group_size],
                holders[t // group_size],
                t % group_size,
                group_size,
                placement,
                w,
            ),
            w,
        )
        for t, w in enumerate(workers_of)
    ]
