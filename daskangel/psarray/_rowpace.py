"""How :meth:`~._agent.PSAgent.get_iter` cuts its rows into requests (pure logic).

* :func:`chunk_batches`: as few requests as hold the rows, for a caller that
  only pulls;
* :class:`Pacer`: the chunks of one pull, pipelined or not, growing after the
  caller had to wait for one;
* :class:`PaceBook`: what earlier pulls learnt of their consumer, per
  ``(array, batch)``, and which way of pulling was faster for it.

Example
-------
>>> chunk_batches(10_000, 1_000, 200, 32 << 20)
[(0, 10000)]
>>> p = Pacer(10, 1, 8, request_bytes=80, min_request_bytes=16, growth=2, pipelined=True)
>>> p.take(), p.take(), p.waited(), p.take(), p.take()
((0, 2), (2, 4), None, (4, 8), (8, 10))
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any

__all__ = ["PaceBook", "Pacer", "chunk_batches"]


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
