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
    """What earlier pulls of ``(array, batch)`` learnt of their consumer: the share
    of a pull's time the caller spent between batches, and for a caller that
    computes, the seconds a row of a whole pull (its compute included) took in
    each way of pulling (few large requests, or pipelined small chunks).  Running
    means that halve the weight of older pulls."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # {(array, batch): [share, seconds a row in few requests, pipelined, pulls]}
        self._seen: dict[tuple[str, int], list[Any]] = {}

    def share(self, name: str, batch: int) -> float | None:
        """The consumer's share of time, None before any pull of ``(name, batch)``."""
        got = self._seen.get((name, batch))
        return None if got is None else float(got[0])

    def pipelined(self, name: str, batch: int, threshold: float, probe_every: int) -> bool:
        """Whether the next pull of ``(name, batch)`` pipelines: its caller computes
        (share >= ``threshold``) and pipelining was the faster way for it so far;
        each way is tried once, and every ``probe_every``-th pull of a computing
        caller (0: never) tries the other way again, as the machine's load changes."""
        with self._lock:
            got = self._seen.get((name, batch))
            if got is None or got[0] < threshold:
                return False
            got[3] += 1
            few, piped = got[1], got[2]
            if piped is None or few is None:
                return piped is None
            best = bool(piped < few)
            if probe_every > 0 and got[3] % probe_every == 0:
                return not best
            return best

    def record(
        self,
        name: str,
        batch: int,
        share: float,
        pipelined: bool | None = None,
        seconds_a_row: float = 0.0,
    ) -> None:
        """Record a pull: its caller's ``share``, and (``pipelined`` not None) how
        long a row took that way."""
        with self._lock:
            got = self._seen.setdefault((name, batch), [share, None, None, 0])
            got[0] = (got[0] + share) / 2
            if pipelined is not None:
                old = got[2 if pipelined else 1]
                new = seconds_a_row if old is None else (old + seconds_a_row) / 2
                got[2 if pipelined else 1] = new

    def forget(self, names: set[str]) -> None:
        with self._lock:
            for k in [k for k in self._seen if k[0] in names]:
                del self._seen[k]


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
        self.threshold = float(config.get("daskangel.agent.pipeline-compute-share"))
        pipelined = agent.pace.pipelined(
            name,
            self.batch,
            self.threshold,
            int(config.get("daskangel.agent.pipeline-probe-every")),
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
            share = self._away / took
            # how long this way took, for a caller that computes (a caller that
            # only pulls always gets few requests)
            way = self.pacer.pipelined if share >= self.threshold else None
            n = self.idx.shape[0]
            self.agent.pace.record(self.name, self.batch, share, way, took / n)


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
