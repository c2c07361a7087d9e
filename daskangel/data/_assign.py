"""Balanced assignment of input splits to training tasks (Angel's greedy).

Angel's master sorts the data blocks by length, largest first, and gives each to
the worker holding its bytes when that worker is still under the upper bound of
load, otherwise to the least loaded worker.  Here the units are *tasks* (one per
partition, each pinned to a worker) and the locality is "a worker that already
holds the split's bytes" (a persisted dask chunk, an HDFS block's host).

Pure functions, no Dask: tested on their own.

Example
-------
>>> assign([5, 4, 3, 3, 1], [set()] * 5, ["a", "b"])
[[0, 3], [1, 2, 4]]
>>> assign([4, 4], [{"b"}, set()], ["a", "b"])
[[1], [0]]
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from .. import config
from ..errors import InvalidArgumentError

__all__ = ["assign", "task_workers"]


def task_workers(workers: Sequence[str], n_tasks: int) -> list[str]:
    """Spread ``n_tasks`` tasks round-robin over ``workers`` (sorted)."""
    if not workers:
        raise InvalidArgumentError("workers: the cluster has no workers to hold the partitions")
    if n_tasks < 1:
        raise InvalidArgumentError(f"n_partitions: expected a positive integer, got {n_tasks}")
    ws = sorted(workers)
    return [ws[i % len(ws)] for i in range(n_tasks)]


def assign(
    sizes: Sequence[int],
    holders: Sequence[set[str]],
    tasks: Sequence[str],
    slack: float | None = None,
) -> list[list[int]]:
    """Split indices per task: largest first, to the least loaded task.

    ``holders[i]`` is the set of worker addresses already holding split ``i``;
    ``tasks[t]`` is the worker of task ``t``.  A split goes to the least loaded
    task on one of its holders if that keeps the task under the upper bound
    ``(1 + slack) * total / n_tasks`` (at least the split's own size), otherwise to
    the least loaded task overall; ties go to the lowest task number.  Each
    task's splits are returned in input order.
    """
    if slack is None:
        slack = float(config.get("daskangel.data.balance-slack"))
    n = len(tasks)
    load = [0] * n
    out: list[list[int]] = [[] for _ in range(n)]
    bound = (1.0 + slack) * sum(sizes) / max(1, n)
    # least-loaded task overall and per worker: heaps of (load, n_splits, task),
    # stale entries skipped on pop, so assigning S splits costs O(S log T)
    heap_all = [(0, 0, t) for t in range(n)]
    by_worker: dict[str, list[tuple[int, int, int]]] = {}
    for t, w in enumerate(tasks):
        by_worker.setdefault(w, []).append((0, 0, t))

    def top(h: list[tuple[int, int, int]]) -> tuple[int, int, int] | None:
        while h and h[0][:2] != (load[h[0][2]], len(out[h[0][2]])):
            heapq.heappop(h)
        return h[0] if h else None

    for i in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        best = top(heap_all)
        assert best is not None
        t = best[2]
        local = [e for e in (top(by_worker[w]) for w in holders[i] if w in by_worker) if e]
        if local:
            t_loc = min(local)[2]
            if load[t_loc] + sizes[i] <= max(bound, sizes[i]):
                t = t_loc
        out[t].append(i)
        load[t] += sizes[i]
        entry = (load[t], len(out[t]), t)
        heapq.heappush(heap_all, entry)
        heapq.heappush(by_worker[tasks[t]], entry)
    return [sorted(o) for o in out]
