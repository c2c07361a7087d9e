"""The worker-side agent (Angel's PSAgent), shared by every task in a Dask process.

Reads:

* a clock-aware **pull cache** (:mod:`._pullcache`, read through
  :mod:`._agentfetch`): a read at clock ``c`` with
  staleness ``s`` is served from a local copy fetched once the slowest task had
  reached ``c - s``, and otherwise fetched;
* **de-duplication**: a read of units that another thread is already pulling
  (fresh enough) waits for that pull instead of sending its own;
* **pipelined pulls**: :meth:`PSAgent.get_iter` sends the requests for many row
  batches up front and yields batches as they arrive (Angel's Algorithm 2;
  :mod:`._rowiter`);
* **pruned pulls** of a registered key set: servers keep the key list under a
  tag, a pull sends only the tag (:mod:`._keylists`).

Writes go to the shared, merged update buffer (:mod:`._pusher`).

The agent knows nothing of the clock service: the training runtime passes each
read's *floor* (``c - s``, or ``None`` under ASP / outside training) and tells
the agent the slowest clock it learns (:meth:`PSAgent.observe_min`).  A fetched
copy records the slowest clock known when it was sent.

.. warning::
   A read through the agent does not see the reader's own increments that are
   still buffered (not yet pushed); ``clock()`` pushes them.

Example
-------
>>> agent = get_agent()                                            # doctest: +SKIP
>>> for rows, vals in agent.get_iter("W", rows=range(10_000), batch=500):  # doctest: +SKIP
...     consume(rows, vals)  # doctest: +SKIP
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from .. import config
from ..errors import PSIndexError, ShapeMismatchError
from . import _kernels as K
from ._agentfetch import CachedFetches
from ._agentkeys import KeySetPulls, _KeyPlan
from ._array import PSArray
from ._binding import Binding, get_binding
from ._keylists import KeySet
from ._meta import ArrayMeta
from ._psfuture import PSFuture
from ._pullcache import DirectStore, Fetch, UnitStore
from ._pusher import UpdatePusher
from ._refresh import EagerRefresh
from ._routing import check_shape, normalize_index
from ._rowiter import PaceBook, RowIter, chunk_batches

__all__ = ["PSAgent", "agent_of", "chunk_batches", "get_agent"]

_lock = threading.Lock()

COUNTERS = ("calls", "seconds", "bytes_pulled", "bytes_pushed", "cache_hits", "joined", "units")


class PSAgent(CachedFetches, KeySetPulls):
    """Pull cache, de-duplication, pipelined and pruned pulls, and the update buffer."""

    def __init__(self, binding: Binding) -> None:
        self.binding = binding
        self.id = uuid.uuid4().hex
        self._lock = threading.Lock()
        # {job: slowest clock known}; job None is reads outside training
        self.known_min: dict[str | None, int] = {}
        # {(job, array, mode): UnitStore or DirectStore}
        self.stores: dict[tuple[str | None, str, str], UnitStore | DirectStore] = {}
        # {tag: _KeyPlan} for key sets registered from this process
        self.keysets: dict[str, _KeyPlan] = {}
        # {(job, tag): Fetch} key-set pulls, cached (done) or in flight
        self.keyset_fetches: dict[tuple[str | None, str], Fetch] = {}
        self.pusher = UpdatePusher(binding)
        self.pusher.budget.weights = self.cached_weights
        self.refresher = EagerRefresh(self)
        self._merger = ThreadPoolExecutor(1, thread_name_prefix="daskangel-agent-merge")
        # {task id or None: {counter: value}}
        self.counters: defaultdict[Any, dict[str, float]] = defaultdict(
            lambda: dict.fromkeys(COUNTERS, 0)
        )
        self.requests = 0  # pull requests sent to servers, all tasks together
        self.pace = PaceBook()  # get_iter's consumers, as earlier pulls saw them

    # -- clocks -----------------------------------------------------------------------

    def observe_min(self, job: str | None, min_clock: int | None) -> None:
        """Record that the slowest task of ``job`` reached ``min_clock`` (None: all done)."""
        m = 2**62 if min_clock is None else int(min_clock)
        with self._lock:
            if m > self.known_min.get(job, -(2**62)):
                self.known_min[job] = m
        if job is not None:
            self.refresher.poke()

    def _count(self, task: Any, **kw: float) -> None:
        c = self.counters[task]
        for k, v in kw.items():
            c[k] += v

    def task_counters(self, task: Any) -> dict[str, float]:
        with self._lock:
            return dict(self.counters[task])

    def cached_weights(self, job: Any, name: str, mode: str, keys: np.ndarray) -> np.ndarray:
        """``sum |w|`` per buffered unit from this worker's cached copies (0 where none).

        ``keys`` are sorted update-buffer units of ``mode`` (rows, or entries
        ``row * n_cols + col``); budgeted pushes rank units by ``|Δ| / (|w| + ε)``.
        """
        out = np.zeros(keys.shape[0])
        m = self._meta(name)
        nr, nc = m.shape
        with self._lock:
            if mode == "rows" or m.ndim == 1 or nr == 1:
                store = self.stores.get((job, name, mode))
                if store is None or keys.shape[0] == 0:
                    return out
                hit, vals = store.lookup(keys, -(2**62))
                out[hit] = np.abs(vals, dtype=np.float64).sum(axis=1)
                return out
            store = self.stores.get((job, name, "rows"))  # entries of a matrix's rows
            if store is None or keys.shape[0] == 0:
                return out
            r, c = np.divmod(keys, nc)
            uniq, inv = np.unique(r, return_inverse=True)
            hit, vals = store.lookup(uniq, -(2**62))
            row_at = np.full(uniq.shape[0], -1)
            row_at[hit] = np.arange(int(hit.sum()))
            at = row_at[inv.ravel()]
            ok = at >= 0
            out[ok] = np.abs(vals[at[ok], c[ok]], dtype=np.float64)
        return out

    # -- reads ------------------------------------------------------------------------

    def _meta(self, name: str) -> ArrayMeta:
        return PSArray(name, binding=self.binding).meta

    def _get_rows(self, name: str, m: ArrayMeta, rows: np.ndarray) -> np.ndarray:
        """``rows`` of ``name`` by the general (uncached) path of :meth:`PSArray.get`."""
        return PSArray(name, binding=self.binding)._get(m, rows, None)

    def _units(
        self, m: ArrayMeta, rows: Any, cols: Any
    ) -> tuple[str, np.ndarray, tuple[int, ...]] | None:
        """``(mode, unit ids, output shape)`` of a cacheable read, else None."""
        nr, nc = m.shape
        if m.ndim == 1 or (nr == 1 and rows is None):
            if m.ndim == 1 and rows is not None:
                raise PSIndexError(f"rows: array {m.name!r} is 1-D; select with cols=")
            c, scalar = normalize_index("cols", cols, nc)
            idx = np.arange(nc, dtype=np.int64) if c is None else c
            shape: tuple[int, ...] = () if scalar else (idx.shape[0],)
            return "entries", idx, shape if m.ndim == 1 else (1, *shape)
        if cols is None:
            r, scalar = normalize_index("rows", rows, nr)
            idx = np.arange(nr, dtype=np.int64) if r is None else r
            return "rows", idx, (nc,) if scalar else (idx.shape[0], nc)
        return None

    def get(
        self,
        name: str,
        rows: Any = None,
        cols: Any = None,
        *,
        job: str | None = None,
        floor: int | None = None,
        task: Any = None,
        cache: bool = True,
    ) -> np.ndarray:
        """Read like :meth:`PSArray.get`, through the cache and de-duplication.

        ``cols`` may be a :class:`KeySet` (pruned pull by tag).  Whole rows of a
        matrix and entries of a vector are cached; other selections are fetched.
        ``cache=False``: fetched straight from the servers, one request a block (a
        whole vector read once a clock: through the cache's per-entry index ~10x
        slower).
        """
        if isinstance(cols, KeySet):
            if rows is not None:
                raise ShapeMismatchError("rows: a key-set pull selects columns of a vector only")
            return self.get_keys(cols, job=job, floor=floor, task=task)
        m = self._meta(name)
        check_shape("get", m.shape, m.itemsize, rows, cols)  # before any index is made
        unit = self._units(m, rows, cols) if cache else None
        if unit is None or self._too_big(m, unit):
            t0 = time.perf_counter()
            out = PSArray(name, binding=self.binding).get(rows, cols)
            with self._lock:
                self.requests += 1
                self._count(
                    task, calls=1, seconds=time.perf_counter() - t0, bytes_pulled=out.nbytes
                )
            return out
        mode, idx, shape = unit
        if K.is_strictly_sorted(idx):  # sorted distinct units: no gather back
            return self._request(name, m, mode, idx, job, floor, task).finish().reshape(shape)
        uniq, inv = np.unique(idx, return_inverse=True)
        pending = self._request(name, m, mode, uniq, job, floor, task)
        return pending.finish()[inv.ravel()].reshape(shape)

    def _too_big(self, m: ArrayMeta, unit: tuple[str, np.ndarray, tuple[int, ...]]) -> bool:
        width = m.shape[1] if unit[0] == "rows" else 1
        nbytes = unit[1].shape[0] * width * m.itemsize
        limit = config.get_bytes("daskangel.agent.cache-bytes")
        return nbytes > limit * float(config.get("daskangel.agent.cache-max-fraction"))

    def get_iter(
        self,
        name: str,
        rows: Any,
        batch: int,
        *,
        job: str | None = None,
        floor: int | None = None,
        task: Any = None,
        ordered: bool = False,
    ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Pipelined pull of matrix rows: yield ``(row ids, values)`` batches.

        Requests chunks of batches ahead of the consumer and yields a chunk's
        batches as it arrives; every requested row is yielded exactly once per
        occurrence in ``rows``, with its id.  ``ordered=True``: batches of
        consecutive ``rows`` in request order; else a batch may hold any of the
        rows (a chunk's large replies are cut as they landed, not put in request
        order first).  The
        chunks' sizes adapt to the consumer (:mod:`._rowiter`): few large
        requests while it only pulls, small ones kept ahead while it computes.
        """
        return RowIter(self, name, rows, batch, job=job, floor=floor, task=task, ordered=ordered)

    # -- writes -----------------------------------------------------------------------

    def increment(
        self,
        name: str,
        values: Any,
        rows: Any = None,
        cols: Any = None,
        *,
        job: str | None = None,
        clock: int | None = None,
        task: Any = None,
        epoch: int | None = None,
        casting: str | None = None,
        on_nonfinite: str | None = None,
    ) -> None:
        """Buffer an increment (merged with other tasks' of the same run; pushed by size
        or on flush); ``epoch``: the job's run the task belongs to (fences its pushes)."""
        if isinstance(cols, KeySet):
            cols = cols.cols
        n = self.pusher.increment(
            name,
            values,
            rows,
            cols,
            job=job,
            clock=clock,
            epoch=epoch,
            casting=casting,
            on_nonfinite=on_nonfinite,
        )
        with self._lock:
            self._count(task, bytes_pushed=n)

    def increment_now(
        self,
        name: str,
        values: Any,
        rows: Any = None,
        cols: Any = None,
        *,
        task: Any = None,
        casting: str | None = None,
    ) -> PSFuture:
        """An increment sent now, past the update buffer (counted as the task's push);
        the task thread's clock and run fence it as a buffered one.  For a whole dense
        vector a task pushes once a clock: merging it into the buffer cost 3x its send."""
        fut = PSArray(name, binding=self.binding).increment_async(
            values, rows, cols, casting=casting
        )
        with self._lock:
            self._count(task, bytes_pushed=int(np.asarray(values).nbytes))
        return fut

    def flush(self) -> None:
        """Push every buffered increment and wait until all are applied."""
        self.pusher.flush(wait=True)

    # -- housekeeping -----------------------------------------------------------------

    def clear_cache(self, job: str | None = None) -> None:
        """Forget cached copies (of one job, or all)."""
        with self._lock:
            for sk in [k for k in self.stores if job is None or k[0] == job]:
                self.stores[sk].clear()
            for fk in [k for k, f in self.keyset_fetches.items() if f.future.done()]:
                if job is None or fk[0] == job:
                    del self.keyset_fetches[fk]

    def forget_arrays(self, names: list[str]) -> None:
        """Drop everything kept for freed arrays: cached rows, key sets registered
        on their (gone) servers, buffered increments."""
        gone = set(names)
        self.pusher.drop_arrays(gone)
        self.pace.forget(gone)
        with self._lock:
            for sk in [k for k in self.stores if k[1] in gone]:
                del self.stores[sk]
            tags = {t for t, kp in self.keysets.items() if kp.name in gone}
            for t in tags:
                del self.keysets[t]
            for fk in [k for k in self.keyset_fetches if k[1] in tags]:
                del self.keyset_fetches[fk]

    def forget_job(self, job: str) -> None:
        """Drop everything kept for a finished (or rolled back) job, including its
        buffered increments that were not pushed yet."""
        self.pusher.drop_job(job)
        with self._lock:
            for sk in [k for k in self.stores if k[0] == job]:
                del self.stores[sk]
            for fk in [k for k in self.keyset_fetches if k[0] == job]:
                del self.keyset_fetches[fk]
            self.known_min.pop(job, None)


def get_agent(client: Any = None) -> PSAgent:
    """The agent of this process (the worker running the task, or the client's)."""
    return agent_of(get_binding(client))


def agent_of(b: Binding) -> PSAgent:
    """The agent sharing ``b``'s loop, comm pool and metadata cache."""
    with _lock:
        a = getattr(b, "_daskangel_agent", None)
        if a is None:
            a = PSAgent(b)
            b._daskangel_agent = a  # type: ignore[attr-defined]
    return a  # type: ignore[no-any-return]
