"""CGS topic assignments in the snapshots, and a task's restart after a failure.

The counts ``n_wk`` / ``n_k`` live on the PS and are in every snapshot; the
assignments ``z`` live on the workers.  For a run that loses a worker to end
with ``sum_w n_wk = n_k`` and ``sum_k n_k`` = the training tokens exactly, the
assignments must come back from the same snapshot as the counts.  So when the
context snapshots by clocks (``snapshot_every=<int>``), a fit keeps a PS array
``z`` (one int32 per token of the training partitions, partition ``i`` from
``offsets[i]``) and every task writes the tokens whose topic changed into it in
the clock that ends at a snapshot boundary and in the fit's last clock; the
snapshot "at clock ``t``" holds every write of clocks ``< t`` (the servers' cut),
so counts and assignments agree in it.

A task that starts again in the same fit (recovery ``"rollback"``: every task
restarts from the snapshot's clock, counts restored) throws its worker-side
assignments away, reads them back from ``z`` and rebuilds ``n_dk`` from them;
at clock 0 of a first fit (the counts are back to zero) it draws them again.
A worker's state that was ahead (it survived) is discarded the same way.  A fit
resumed from a snapshot (``fit(X, resume=url)``) makes a ``z`` array even without
snapshots of its own; the snapshot's is loaded into it and every task starts by
reading its tokens back (:func:`resume_clock_of` tells it the clock to expect).

.. warning:: Exact only with ``recovery="rollback"`` and clock snapshots: a task
   restarted in ``"continue"`` mode (other tasks kept going, only the lost blocks
   went back) raises :class:`~daskangel.errors.InvalidStateError`.

Example
-------
>>> import numpy as np
>>> token_offsets([(3, 10), (5, 7)]).tolist()
[0, 10, 17]
>>> doc_topic(np.array([0, 0, 1]), np.array([1, 0, 1], np.int32), 2, 2).tolist()
[[1, 1], [0, 1]]
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...errors import InvalidStateError

__all__ = ["doc_topic", "make_z", "restore_z", "resume_clock_of", "token_offsets", "write_z"]


def token_offsets(parts: list[tuple[int, int]]) -> np.ndarray:
    """Start of each partition's tokens in ``z`` from ``[(rows, tokens)]`` per partition
    (the training tokens of a partition are at most its tokens); the last is the size."""
    return np.concatenate([[0], np.cumsum([t for _, t in parts])]).astype(np.int64)


def resume_clock_of(url: str | None) -> int:
    """The clock of the snapshot ``url`` a fit resumes from (0: none, or unreadable:
    ``train`` then reports it)."""
    if url is None:
        return 0
    from ..._snapshot_format import resolve

    try:
        return int(resolve(url)[1].get("clock") or 0)
    except (FileNotFoundError, KeyError, TypeError, ValueError):
        return 0


def make_z(ps: Any, name: str, size: int) -> str:
    """The ``z`` array of ``size`` tokens (int32), cut into a block per server and a half."""
    from ..._compat import workers_info

    n_servers = max(1, len(workers_info(ps.client)))
    block = max(1, math.ceil(max(size, 1) / (2 * n_servers)))
    return str(ps.zeros(name, (max(size, 1),), "int32", block_shape=(block,)).name)


def doc_topic(tdoc: np.ndarray, z: np.ndarray, n_docs: int, K: int) -> np.ndarray:
    """``(n_docs, K)`` int32 counts of the assignments ``z`` of tokens in documents ``tdoc``."""
    flat = np.bincount(
        np.asarray(tdoc, np.int64) * K + np.asarray(z, np.int64), minlength=n_docs * K
    )
    return flat.reshape(n_docs, K).astype(np.int32)


def write_z(zarr: Any, c: Any, offset: int) -> None:
    """Push the tokens whose topic changed since the last write (``c.zps``) into ``z``."""
    assert c.z is not None
    if c.zps is None:
        c.zps = np.zeros_like(c.z)
    changed = np.flatnonzero(c.z != c.zps)
    if changed.size:
        zarr.increment((c.z[changed] - c.zps[changed]).astype(np.int32), cols=offset + changed)
        c.zps[changed] = c.z[changed]


def restore_z(ctx: Any, zarr: Any, c: Any, offset: int, K: int, recovery: str) -> None:
    """Read a restarted task's assignments back from ``z`` (see the module docstring)."""
    if zarr is None:
        raise InvalidStateError(
            f"LDA: task {ctx.task_id} restarted at clock {ctx.iteration} without its topic "
            "assignments; fit with snapshots by clocks (snapshot_every=<int>) to recover them"
        )
    if recovery != "rollback":
        raise InvalidStateError(
            f"LDA: task {ctx.task_id} restarted at clock {ctx.iteration} under "
            f"recovery={recovery!r}; the counts stay exact only with recovery='rollback'"
        )
    n = c.n_tokens
    z = np.asarray(zarr.plain.get(cols=np.arange(offset, offset + n, dtype=np.int64)), np.int32)
    if n and (z.min() < 0 or z.max() >= K):
        raise InvalidStateError(
            f"LDA: the snapshot's topic assignments of task {ctx.task_id} are out of range"
        )
    c.z = z
    c.zps = z.copy()
    c.ndk = None  # the sampler's state, rebuilt from z on demand (``._sweeps``)
    c.warp = None
