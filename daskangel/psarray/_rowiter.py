"""Pipelined pulls of matrix rows: the body of :meth:`~._agent.PSAgent.get_iter`.

The rows are requested in *chunks* of whole batches, at most
``daskangel.agent.pipeline-depth`` chunks in flight, and a chunk's batches are
yielded as it arrives (Angel's Algorithm 2).  How the rows are cut follows the
consumer, as earlier pulls of the same array and batch saw it (:class:`PaceBook`,
kept on the agent):

* a caller that only pulls (its time between batches below
  ``daskangel.agent.pipeline-compute-share`` of a pull's), and any first pull:
  as few requests as hold the rows (:func:`chunk_batches`), since every request
  costs a round trip per server whatever its size;
* a caller that computes: each way of pulling (few requests, or *pipelined*
  chunks of ``daskangel.agent.pipeline-min-request-bytes``, the next ones in
  flight while it computes, growing by ``daskangel.agent.pipeline-growth``
  whenever it came back before its chunk had landed, :class:`Pacer`) is tried,
  and the faster one for this caller is kept, the other tried again every
  ``daskangel.agent.pipeline-probe-every``-th pull.  Whether hiding the transfer
  behind the compute pays depends on the machine: on 2 cores shared with the
  servers, the pull already keeps ~1.4 cores busy and the overlapped pull was
  slower than one get and then the compute (``benchmarks/RESULTS.md``).

This module reaches the agent only through the :class:`RowSource` protocol, so
it imports neither the agent nor the handle.

The cutting itself (:class:`Pacer`, :class:`PaceBook`, :func:`chunk_batches`)
is :mod:`._rowpace`.

Example
-------
>>> for rows, vals in RowIter(agent, "W", rows=idx, batch=1_000):  # doctest: +SKIP
...     consume(rows, vals)  # doctest: +SKIP
"""

from __future__ import annotations

import concurrent.futures
import functools
import time
from collections import deque
from collections.abc import Iterator
from typing import Any, Protocol

import numpy as np

from .. import config
from ..errors import InvalidArgumentError, ShapeMismatchError
from . import _kernels as K
from . import _rowkernels as RK
from ._binding import Binding
from ._meta import ArrayMeta
from ._routing import normalize_index
from ._rowget import RowChunk
from ._rowpace import PaceBook, Pacer, chunk_batches

__all__ = ["Arrival", "PaceBook", "Pacer", "RowIter", "RowSource", "chunk_batches"]


class Arrival(Protocol):
    """A chunk being fetched: :class:`RowChunk` or the agent's pending read."""

    @property
    def futures(self) -> list[Any]: ...

    def done(self) -> bool: ...

    def finish(self) -> np.ndarray: ...


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
        self._t0 = time.perf_counter()
        self.agent, self.name, self.m, self.batch = agent, name, m, int(batch)
        self.job, self.floor, self.task, self.ordered = job, floor, task, ordered
        self.row_bytes = m.shape[1] * m.itemsize
        self.live: deque[tuple[int, int, np.ndarray | None, Arrival]] = deque()
        self.held = 0  # bytes of the chunks in flight
        self.threshold = float(config.get("daskangel.agent.pipeline-compute-share"))
        pipelined = agent.pace.pipelined(
            name,
            self.batch,
            self.threshold,
            int(config.get("daskangel.agent.pipeline-probe-every")),
        )
        request_bytes = config.get_bytes("daskangel.agent.pipeline-request-bytes")
        whole = not pipelined and self._whole(rows, request_bytes)
        if not whole:
            r, _ = normalize_index("rows", rows, m.shape[0])
            self.idx = np.arange(m.shape[0], dtype=np.int64) if r is None else r
        self.pacer = Pacer(
            self.idx.shape[0],
            self.batch,
            self.row_bytes,
            request_bytes=request_bytes,
            min_request_bytes=config.get_bytes("daskangel.agent.pipeline-min-request-bytes"),
            growth=float(config.get("daskangel.agent.pipeline-growth")),
            pipelined=pipelined,
        )
        if whole:
            self.pacer.take()  # (0, n): in flight already
        self.window = config.get_bytes("daskangel.agent.pipeline-bytes")
        self.depth = max(1, int(config.get("daskangel.agent.pipeline-depth")))
        self._next: tuple[int, int] | None = self.pacer.take()
        self._batches: Iterator[tuple[np.ndarray, np.ndarray]] = iter(())
        self._away = 0.0  # seconds the caller spent between batches
        self._back: float | None = None  # when the last batch was handed out
        self._chunks = 0  # chunks handed to the consumer so far
        self._launch()

    def _whole(self, rows: Any, request_bytes: int) -> bool:
        """Request the whole pull now, as one get (random rows outside training
        that one request holds, see :func:`chunk_batches`), before the rest of the
        set-up: the request leaves as early as a get's would.  False: not such a
        pull (nothing requested)."""
        if (
            self.floor is not None
            or not isinstance(rows, np.ndarray)
            or rows.ndim != 1
            or rows.shape[0] < 2
            or rows.dtype not in (np.int64, np.int32)
        ):
            return False
        n, batch = rows.shape[0], self.batch
        if -(-n // batch) > max(1, request_bytes // max(1, batch * self.row_bytes)):
            return False  # more than one request
        lo, hi, ordered = RK.index_scan(rows)  # normalize_index's checks, one pass
        if ordered or lo < 0 or hi >= self.m.shape[0]:
            return False
        self.idx = rows.astype(np.int64, copy=False)
        agent, m = self.agent, self.m
        get = functools.partial(agent._get_rows, self.name, m, self.idx)
        chunk = RowChunk.start(agent.binding, self.name, m, self.idx, get, self.ordered)
        if chunk is None:
            return False
        self.live.append((0, n, None, chunk))
        self.held += n * self.row_bytes
        agent.requests += 1
        return True

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
                chunk = RowChunk.start(agent.binding, self.name, m, rc, get, self.ordered)
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
        if not self.ordered and waited and len(live) > 1:
            # another chunk may land first (a lone chunk is waited for by its
            # finish: one wake-up when it lands, not one for its future and then
            # one for its last reply)
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
        if not self.ordered and isinstance(pending, RowChunk):
            # any order will do: the large replies' rows as they landed, no scatter
            vals, parts = pending.finish_parts()
        else:
            vals, parts = pending.finish(), []
        self.held -= (e - s) * self.row_bytes
        self._launch()  # the next request leaves before this chunk is consumed
        if parts:
            return self._cut_parts(s, e, vals, parts)
        return self._cut(s, e, inv, vals)

    def _cut_parts(
        self, s: int, e: int, vals: np.ndarray, parts: list[tuple[np.ndarray, np.ndarray]]
    ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Batches of the replies as they landed (``(positions, rows)``), then of the
        rows the loop put in place in ``vals``: each row once, in no set order."""
        ids, batch = self.idx[s:e], self.batch
        for pos, rows in parts:
            got = ids[pos]  # one gather of the part's ids, then views of it
            for b in range(0, pos.shape[0], batch):
                yield got[b : b + batch], rows[b : b + batch]
        if sum(pos.shape[0] for pos, _ in parts) == e - s:
            return  # every row came in a part
        rest = np.ones(e - s, bool)
        for pos, _ in parts:
            rest[pos] = False
        left = np.flatnonzero(rest)
        for b in range(0, left.shape[0], batch):
            at = left[b : b + batch]
            yield ids[at], vals[at]

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
            share = self._away / took
            # how long this way took, for a caller that computes (a caller that
            # only pulls always gets few requests)
            way = self.pacer.pipelined if share >= self.threshold else None
            n = self.idx.shape[0]
            self.agent.pace.record(self.name, self.batch, share, way, took / n)
