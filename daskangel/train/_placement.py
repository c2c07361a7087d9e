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
or a function ``placement(item, rank, size)``.  A future is split on the worker
holding it.

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

from .._compat import workers_info
from ..errors import InvalidArgumentError, InvalidTypeError

__all__ = ["PLACEMENTS", "assign", "split_piece", "task_pieces"]

PLACEMENTS = ("replicated", "horizontal", "vertical")


def _cut(x: Any, lo: int, hi: int, axis: int) -> Any:
    if hasattr(x, "iloc"):  # pandas
        return x.iloc[lo:hi] if axis == 0 else x.iloc[:, lo:hi]
    return x[lo:hi] if axis == 0 else x[:, lo:hi]


def split_piece(item: Any, rank: int, size: int, placement: str | Callable[..., Any]) -> Any:
    """Member ``rank``'s share of a group's ``item`` (see the module docstring)."""
    if callable(placement):
        return placement(item, rank, size)
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
    pool = list(workers) if workers else sorted(workers_info(client))
    if not pool:
        raise InvalidArgumentError("client: the cluster has no workers to train on")
    if data is None:
        return [(None, pool[t % len(pool)]) for t in range(n_tasks)]
    futures = _partitions(data)
    items = futures if futures is not None else list(data)
    if len(items) == n_tasks:
        per_task = items
    elif len(items) == n_groups:
        per_task = [(items[t // group_size], t % group_size) for t in range(n_tasks)]
    else:
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
    out: list[tuple[Any, str]] = []
    for t, x in enumerate(per_task):
        if isinstance(x, tuple):
            fut, rank = x
            holder = where[fut.key][0] if where.get(fut.key) else pool[t % len(pool)]
            if placement != "replicated":
                fut = client.submit(
                    split_piece, fut, rank, group_size, placement, workers=[holder], pure=False
                )
            out.append((fut, holder))
        else:
            holder = where[x.key][0] if where.get(x.key) else pool[t % len(pool)]
            out.append((x, holder))
    return out
