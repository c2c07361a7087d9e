"""Pipelined pulls of matrix rows: the body of :meth:`~._agent.PSAgent.get_iter`.

The rows are requested in *chunks* of whole batches (:func:`chunk_batches`),
sent ahead of the consumer within ``daskangel.agent.pipeline-bytes``, and a
chunk's batches are yielded as it arrives (Angel's Algorithm 2).  This module
reaches the agent only through the :class:`RowSource` protocol (its metadata,
binding, request counter and cached reads), so it does not import the agent.

Example
-------
>>> chunk_batches(10_000, 1_000, 200, 32 << 20)
[(0, 10000)]
"""

from __future__ import annotations

import concurrent.futures
import functools
from collections import deque
from collections.abc import Iterator
from typing import Any, Protocol

import numpy as np

from .. import config
from ..errors import InvalidArgumentError, ShapeMismatchError
from . import _kernels as K
from ._binding import Binding
from ._meta import ArrayMeta
from ._routing import normalize_index
from ._rowget import RowChunk

__all__ = ["Arrival", "RowSource", "chunk_batches", "iter_rows"]


class Arrival(Protocol):
    """A chunk being fetched: :class:`RowChunk` or the agent's pending read."""

    @property
    def futures(self) -> list[Any]: ...

    def done(self) -> bool: ...

    def finish(self) -> np.ndarray: ...


class RowSource(Protocol):
    """What :func:`iter_rows` needs of the agent (:class:`~._agent.PSAgent`)."""

    binding: Binding
    requests: int

    def _meta(self, name: str) -> ArrayMeta: ...

    def _get_rows(self, name: str, m: ArrayMeta, rows: np.ndarray) -> np.ndarray: ...

    def _request(
        self,
        name: str,
        m: ArrayMeta,
        mode: str,
        uniq: np.ndarray,
        job: str | None,
        floor: int | None,
        task: Any,
        alloc: Any = None,
    ) -> Arrival: ...


def iter_rows(
    agent: RowSource,
    name: str,
    rows: Any,
    batch: int,
    *,
    job: str | None = None,
    floor: int | None = None,
    task: Any = None,
    ordered: bool = False,
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Pipelined pull of matrix rows through ``agent``: yield ``(row ids, values)``.

    See :meth:`~._agent.PSAgent.get_iter` for the parameters.  The batches are
    requested in chunks (:func:`chunk_batches`) of at most
    ``daskangel.agent.pipeline-request-bytes`` each, since every request costs a
    round trip per server whatever its size.  Chunks are sent up front as long as
    ``daskangel.agent.pipeline-bytes`` allows, and a chunk's batches are yielded
    as soon as it arrives (``ordered=True``: in request order), the next chunk
    being requested first, so computing on one chunk's batches overlaps pulling
    the next ones.  Every requested row is yielded exactly once per occurrence in
    ``rows``.
    """
    if isinstance(batch, bool) or not isinstance(batch, (int, np.integer)) or batch < 1:
        raise InvalidArgumentError(f"batch: expected an int >= 1, got {batch!r}")
    m = agent._meta(name)
    if m.ndim == 1:
        raise ShapeMismatchError(
            f"get_iter: array {name!r} is 1-D; pipelined pulls fetch rows of a matrix "
            "(use get(cols=...) or a key set for vectors)"
        )
    r, _ = normalize_index("rows", rows, m.shape[0])
    idx = np.arange(m.shape[0], dtype=np.int64) if r is None else r
    batch = int(batch)
    row_bytes = m.shape[1] * m.itemsize
    window = config.get_bytes("daskangel.agent.pipeline-bytes")
    request = config.get_bytes("daskangel.agent.pipeline-request-bytes")
    chunks = deque(chunk_batches(idx.shape[0], batch, row_bytes, request))
    live: deque[tuple[int, int, np.ndarray | None, Arrival]] = deque()
    binding = agent.binding
    held = 0  # bytes of the chunks in flight

    def launch() -> None:
        nonlocal held
        while chunks:
            s, e = chunks[0]
            nbytes = (e - s) * row_bytes
            if live and held + nbytes > window:
                return
            chunks.popleft()
            rc = idx[s:e]
            alloc = None
            chunk = None
            if floor is None and not K.is_strictly_sorted(rc):
                # random rows, nothing to cache: one request a server, as a get;
                # the batches are views of the chunk, in request order
                chunk = RowChunk.start(
                    binding, name, m, rc, functools.partial(agent._get_rows, name, m, rc)
                )
            if chunk is not None:
                live.append((s, e, None, chunk))
                held += nbytes
                agent.requests += 1
                continue
            if K.is_strictly_sorted(rc):  # a task's key list: batches are slices
                uniq, inv = rc, None
            else:
                uniq, inv = np.unique(rc, return_inverse=True)
                inv = inv.ravel()
                # the chunk's values are only gathered from: a reused buffer
                alloc = binding.scratch
            pending = agent._request(name, m, "rows", uniq, job, floor, task, alloc)
            live.append((s, e, inv, pending))
            held += nbytes

    launch()
    while live:
        at = 0
        if not ordered and not live[0][3].done():
            ready = [i for i, x in enumerate(live) if x[3].done()]
            if not ready:
                futs = [f for x in live for f in x[3].futures]
                concurrent.futures.wait(futs, return_when=concurrent.futures.FIRST_COMPLETED)
                ready = [i for i, x in enumerate(live) if x[3].done()]
            at = ready[0] if ready else 0
        s, e, inv, pending = live[at]
        del live[at]
        vals = pending.finish()
        held -= (e - s) * row_bytes
        launch()  # the next request leaves before this chunk is consumed
        for b in range(s, e, batch):
            be = min(b + batch, e)
            if inv is None:
                yield idx[b:be], vals[b - s : be - s]
            else:  # into a reused buffer, freed when the caller drops the batch
                o = binding.result((be - b, m.shape[1]), m.dtype)
                yield idx[b:be], np.take(vals, inv[b - s : be - s], axis=0, out=o, mode="clip")
        del vals


def chunk_batches(n: int, batch: int, row_bytes: int, request_bytes: int) -> list[tuple[int, int]]:
    """How :meth:`~._agent.PSAgent.get_iter` requests ``n`` rows in batches of
    ``batch``: ``[(start, stop), ...]`` runs of whole batches, one request each.

    As few requests as hold at most ``request_bytes`` each (at least one batch),
    sharing the batches evenly: every request costs a round trip per server, and
    on the 2-core benchmark machine ten 1,000-row requests took 2-4x one
    10,000-row get while a lone first batch (to start computing early) bought
    no overlap, the cores being busy receiving.

    Example
    -------
    >>> chunk_batches(10_000, 1_000, 200, 32 << 20)  # 200 KB batches: one request
    [(0, 10000)]
    >>> chunk_batches(10_000, 1_000, 4_000, 32 << 20)  # 4 MB batches
    [(0, 5000), (5000, 10000)]
    >>> chunk_batches(10, 4, 8, 1)  # batches larger than a request
    [(0, 4), (4, 8), (8, 10)]
    """
    if n <= 0:
        return []
    n_batches = -(-n // batch)
    k = max(1, request_bytes // max(1, batch * row_bytes))  # batches a request holds
    n_req = -(-n_batches // k)
    return [
        (batch * (n_batches * i // n_req), min(batch * (n_batches * (i + 1) // n_req), n))
        for i in range(n_req)
    ]
