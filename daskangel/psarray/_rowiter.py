"""Pipelined pulls of matrix rows: the body of :meth:`~._agent.PSAgent.get_iter`.

The rows are requested in *chunks* of whole batches, at most
``daskangel.agent.pipeline-depth`` chunks in flight, and a chunk's batches are
yielded as it arrives (Angel's Algorithm 2).  How large the chunks are adapts to
the consumer (:class:`Pacer`):

* **pull-bound** (the caller does little between batches): as few requests as
  hold the rows (:func:`chunk_batches`), since every request costs a round trip
  per server whatever its size and a lone small first request bought no overlap;
* **compute-bound** (the caller's time between batches was at least
  ``daskangel.agent.pipeline-compute-share`` of an earlier pull of the same
  array and batch): chunks of ``daskangel.agent.pipeline-min-request-bytes``,
  the next ones already in flight, so the transfer hides behind the compute;
  whenever the caller comes back before the chunk it needs has landed, the
  chunks that follow grow by ``daskangel.agent.pipeline-growth``.

What a pull learnt of its consumer is kept on the agent per ``(array, batch)``
(:class:`PaceBook`).  This module reaches the agent only through the
:class:`RowSource` protocol, so it imports neither the agent nor the handle.

Example
-------
>>> chunk_batches(10_000, 1_000, 200, 32 << 20)
[(0, 10000)]
>>> p = Pacer(10, 1, 8, request_bytes=80, min_request_bytes=16, growth=2, pipelined=True)
>>> p.take(), p.take(), p.waited(), p.take(), p.take()
((0, 2), (2, 4), None, (4, 8), (8, 10))
"""

from __future__ import annotations

import concurrent.futures
import functools
import threading
import time
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

__all__ = ["Arrival", "PaceBook", "Pacer", "RowIter", "RowSource", "chunk_batches"]


class Arrival(Protocol):
    """A chunk being fetched: :class:`RowChunk` or the agent's pending read."""

    @property
    def futures(self) -> list[Any]: ...

    def done(self) -> bool: ...

    def finish(self) -> np.ndarray: ...


class PaceBook:
    """What earlier pulls learnt of their consumers: ``{(array, batch): share}``,
    the share of a pull's time the caller spent between batches (a running mean
    of the last pulls, halving the weight of older ones)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._share: dict[tuple[str, int], float] = {}

    def share(self, name: str, batch: int) -> float | None:
        """The consumer's share of time, None before any pull of ``(name, batch)``."""
        return self._share.get((name, batch))

    def record(self, name: str, batch: int, share: float) -> None:
        with self._lock:
            old = self._share.get((name, batch))
            self._share[(name, batch)] = share if old is None else (old + share) / 2

    def forget(self, names: set[str]) -> None:
        with self._lock:
            for k in [k for k in self._share if k[0] in names]:
                del self._share[k]


class RowSource(Protocol):
    """What :class:`RowIter` needs of the agent (:class:`~._agent.PSAgent`)."""

    binding: Binding
    requests: int
    pace: PaceBook

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


class Pacer:
    """The chunks of a pull of ``n`` rows in batches of ``batch`` (pure logic).

    ``pipelined=False``: the :func:`chunk_batches` plan.  ``pipelined=True``:
    chunks of ``min_request_bytes`` (at least one batch); :meth:`waited` (the
    consumer came back before its chunk landed) multiplies the size of the
    chunks taken after it by ``growth``, up to ``request_bytes``.
    """

    def __init__(
        self,
        n: int,
        batch: int,
        row_bytes: int,
        *,
        request_bytes: int,
        min_request_bytes: int,
        growth: float,
        pipelined: bool,
    ) -> None:
        self.n, self.batch, self.growth = n, batch, float(growth)
        per = max(1, batch * row_bytes)
        self.max_batches = max(1, request_bytes // per)
        self.size = min(self.max_batches, max(1, -(-min_request_bytes // per)))
        self.pipelined = pipelined
        self._plan = deque(() if pipelined else chunk_batches(n, batch, row_bytes, request_bytes))
        self._next = 0  # the first row not yet taken (pipelined)

    def take(self) -> tuple[int, int] | None:
        """The next chunk ``(start, stop)``, None when every row is taken."""
        if not self.pipelined:
            return self._plan.popleft() if self._plan else None
        if self._next >= self.n:
            return None
        s = self._next
        self._next = min(self.n, s + self.size * self.batch)
        return s, self._next

    def waited(self) -> None:
        """The consumer waited for a chunk: the pull is the bottleneck, larger chunks."""
        self.size = min(self.max_batches, max(self.size + 1, int(self.size * self.growth)))


class RowIter(Iterator[tuple[np.ndarray, np.ndarray]]):
    """Pipelined pull of matrix rows through ``agent``: ``(row ids, values)`` batches.

    See :meth:`~._agent.PSAgent.get_iter` for the parameters; the first chunks
    are requested when it is made.  Every requested row is yielded exactly once
    per occurrence in ``rows``; ``ordered=True`` yields the batches in request
    order, else a chunk's batches as soon as it has arrived.
    """

    def __init__(
        self,
        agent: RowSource,
        name: str,
        rows: Any,
        batch: int,
        *,
        job: str | None = None,
        floor: int | None = None,
        task: Any = None,
        ordered: bool = False,
    ) -> None:
        if isinstance(batch, bool) or not isinstance(batch, (int, np.integer)) or batch < 1:
            raise InvalidArgumentError(f"batch: expected an int >= 1, got {batch!r}")
        m = agent._meta(name)
        if m.ndim == 1:
            raise ShapeMismatchError(
                f"get_iter: array {name!r} is 1-D; pipelined pulls fetch rows of a matrix "
                "(use get(cols=...) or a key set for vectors)"
            )
        r, _ = normalize_index("rows", rows, m.shape[0])
        self.idx = np.arange(m.shape[0], dtype=np.int64) if r is None else r
        self.agent, self.name, self.m, self.batch = agent, name, m, int(batch)
        self.job, self.floor, self.task, self.ordered = job, floor, task, ordered
        self.row_bytes = m.shape[1] * m.itemsize
        share = agent.pace.share(name, self.batch)
        pipelined = share is not None and share >= float(
            config.get("daskangel.agent.pipeline-compute-share")
        )
        self.pacer = Pacer(
            self.idx.shape[0],
            self.batch,
            self.row_bytes,
            request_bytes=config.get_bytes("daskangel.agent.pipeline-request-bytes"),
            min_request_bytes=config.get_bytes("daskangel.agent.pipeline-min-request-bytes"),
            growth=float(config.get("daskangel.agent.pipeline-growth")),
            pipelined=pipelined,
        )
        self.window = config.get_bytes("daskangel.agent.pipeline-bytes")
        self.depth = max(1, int(config.get("daskangel.agent.pipeline-depth")))
        self.live: deque[tuple[int, int, np.ndarray | None, Arrival]] = deque()
        self.held = 0  # bytes of the chunks in flight
        self._next: tuple[int, int] | None = self.pacer.take()
        self._batches: Iterator[tuple[np.ndarray, np.ndarray]] = iter(())
        self._t0 = time.perf_counter()
        self._away = 0.0  # seconds the caller spent between batches
        self._back: float | None = None  # when the last batch was handed out
        self._chunks = 0  # chunks handed to the consumer so far
        self._launch()

    def in_flight(self) -> list[Any]:
        """The futures of the chunks requested and not yet handed to the consumer."""
        return [f for x in self.live for f in x[3].futures]

    def _launch(self) -> None:
        """Request chunks while fewer than ``depth`` (and ``window`` bytes) are in flight."""
        idx, m, agent = self.idx, self.m, self.agent
        while self._next is not None and len(self.live) < self.depth:
            s, e = self._next
            nbytes = (e - s) * self.row_bytes
            if self.live and self.held + nbytes > self.window:
                return
            self._next = self.pacer.take()
            rc = idx[s:e]
            chunk = None
            if self.floor is None and not K.is_strictly_sorted(rc):
                # random rows, nothing to cache: one request a server, as a get;
                # the batches are views of the chunk, in request order
                get = functools.partial(agent._get_rows, self.name, m, rc)
                chunk = RowChunk.start(agent.binding, self.name, m, rc, get)
            if chunk is not None:
                self.live.append((s, e, None, chunk))
                self.held += nbytes
                agent.requests += 1
                continue
            alloc = None
            if K.is_strictly_sorted(rc):  # a task's key list: batches are slices
                uniq, inv = rc, None
            else:
                uniq, inv = np.unique(rc, return_inverse=True)
                inv = inv.ravel()
                # the chunk's values are only gathered from: a reused buffer
                alloc = agent.binding.scratch
            pending = agent._request(
                self.name, m, "rows", uniq, self.job, self.floor, self.task, alloc
            )
            self.live.append((s, e, inv, pending))
            self.held += nbytes

    def _next_chunk(self) -> Iterator[tuple[np.ndarray, np.ndarray]] | None:
        """The batches of the next chunk to arrive (None when all were yielded)."""
        live = self.live
        if not live:
            return None
        at = 0
        waited = not live[0][3].done()
        if not self.ordered and waited:
            ready = [i for i, x in enumerate(live) if x[3].done()]
            waited = not ready
            if waited:
                futs = self.in_flight()
                concurrent.futures.wait(futs, return_when=concurrent.futures.FIRST_COMPLETED)
                ready = [i for i, x in enumerate(live) if x[3].done()]
            at = ready[0] if ready else 0
        if waited and self._chunks:
            self.pacer.waited()  # the caller is back before the pull: larger chunks
        s, e, inv, pending = live[at]
        del live[at]
        self._chunks += 1
        vals = pending.finish()
        self.held -= (e - s) * self.row_bytes
        self._launch()  # the next request leaves before this chunk is consumed
        return self._cut(s, e, inv, vals)

    def _cut(
        self, s: int, e: int, inv: np.ndarray | None, vals: np.ndarray
    ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        idx, batch, m = self.idx, self.batch, self.m
        for b in range(s, e, batch):
            be = min(b + batch, e)
            if inv is None:
                yield idx[b:be], vals[b - s : be - s]
            else:  # into a reused buffer, freed when the caller drops the batch
                o = self.agent.binding.result((be - b, m.shape[1]), m.dtype)
                yield idx[b:be], np.take(vals, inv[b - s : be - s], axis=0, out=o, mode="clip")

    def __next__(self) -> tuple[np.ndarray, np.ndarray]:
        now = time.perf_counter()
        if self._back is not None:
            self._away += now - self._back
        while True:
            got = next(self._batches, None)
            if got is not None:
                self._back = time.perf_counter()
                return got
            chunk = self._next_chunk()
            if chunk is None:
                self._finished(now)
                raise StopIteration
            self._batches = chunk

    def _finished(self, now: float) -> None:
        """Record the consumer's share of this pull's time (pulls of 2+ batches)."""
        if self._back is None or self.idx.shape[0] <= self.batch:
            return
        self._back = None
        took = now - self._t0
        if took > 0:
            self.agent.pace.record(self.name, self.batch, self._away / took)


def chunk_batches(n: int, batch: int, row_bytes: int, request_bytes: int) -> list[tuple[int, int]]:
    """How a pull-bound :meth:`~._agent.PSAgent.get_iter` requests ``n`` rows in
    batches of ``batch``: ``[(start, stop), ...]`` runs of whole batches, one
    request each.

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
