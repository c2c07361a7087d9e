"""The worker-side agent (Angel's PSAgent), shared by every task in a Dask process.

Reads:

* a clock-aware **pull cache** (:mod:`._pullcache`): a read at clock ``c`` with
  staleness ``s`` is served from a local copy fetched once the slowest task had
  reached ``c - s``, and otherwise fetched;
* **de-duplication**: a read of units that another thread is already pulling
  (fresh enough) waits for that pull instead of sending its own;
* **pipelined pulls**: :meth:`PSAgent.get_iter` sends the requests for many row
  batches up front and yields batches as they arrive (Angel's Algorithm 2);
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

import concurrent.futures
import functools
import threading
import time
import uuid
from collections import defaultdict, deque
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from .. import config
from ..errors import InvalidArgumentError, PSIndexError, ShapeMismatchError
from . import _kernels as K
from ._agentkeys import KeySetPulls, _KeyPlan
from ._array import PSArray
from ._binding import Binding, get_binding
from ._keylists import KeySet
from ._meta import ArrayMeta
from ._plan import assemble, direct_targets, plan_get
from ._pullcache import DirectStore, Fetch, UnitStore, covered, make_store
from ._pusher import UpdatePusher
from ._refresh import EagerRefresh
from ._routing import check_shape, normalize_index
from ._rowget import RowChunk

__all__ = ["PSAgent", "agent_of", "chunk_batches", "get_agent"]

_lock = threading.Lock()

COUNTERS = ("calls", "seconds", "bytes_pulled", "bytes_pushed", "cache_hits", "joined", "units")


class _Pending:
    """A read being answered: cache hits now, the rest from fetches in flight."""

    __slots__ = ("_out", "dtype", "parts", "uniq", "width")

    def __init__(self, uniq: np.ndarray, width: int, dtype: np.dtype) -> None:
        self.uniq = uniq
        self.width, self.dtype = width, dtype
        self._out: np.ndarray | None = None
        # [(fetch, positions in uniq, positions in fetch.keys)]
        self.parts: list[tuple[Fetch, np.ndarray, np.ndarray]] = []

    @property
    def futures(self) -> list[concurrent.futures.Future[np.ndarray]]:
        return [f.future for f, _, _ in self.parts]

    def done(self) -> bool:
        return all(f.future.done() for f, _, _ in self.parts)

    @property
    def out(self) -> np.ndarray:
        """The result being filled (allocated on first use: a read answered by one
        fetch of its own never needs it)."""
        if self._out is None:
            self._out = np.empty((self.uniq.shape[0], self.width), self.dtype)
        return self._out

    def finish(self) -> np.ndarray:
        if self._out is None and len(self.parts) == 1:
            f, at, _ = self.parts[0]
            if f.joined == 0 and at.shape[0] == self.uniq.shape[0]:
                # this read's own fetch of exactly its units, shared with nobody
                # (no reader can join a finished fetch): its array, no copy
                return f.future.result()
        for f, at, src in self.parts:
            self.out[at] = f.future.result()[src]
        return self.out


class PSAgent(KeySetPulls):
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
    ) -> np.ndarray:
        """Read like :meth:`PSArray.get`, through the cache and de-duplication.

        ``cols`` may be a :class:`KeySet` (pruned pull by tag).  Whole rows of a
        matrix and entries of a vector are cached; other selections are fetched.
        """
        if isinstance(cols, KeySet):
            if rows is not None:
                raise ShapeMismatchError("rows: a key-set pull selects columns of a vector only")
            return self.get_keys(cols, job=job, floor=floor, task=task)
        m = self._meta(name)
        check_shape("get", m.shape, m.itemsize, rows, cols)  # before any index is made
        unit = self._units(m, rows, cols)
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
    ) -> _Pending:
        """Serve ``uniq`` units from cache, fetches in flight, and one new fetch.

        ``alloc(shape, dtype)`` makes the new fetch's array (default ``np.empty``):
        a reused scratch buffer when the reader only gathers from it."""
        width = m.shape[1] if mode == "rows" else 1
        pending = _Pending(uniq, width, m.dtype)
        new: Fetch | None = None
        with self._lock:
            store = self.stores.get((job, name, mode))
            if store is None:
                n_units = m.shape[0] if mode == "rows" else m.shape[1]
                store = self.stores[(job, name, mode)] = make_store(n_units, width, m.dtype)
            if floor is not None:
                hit, vals = store.lookup(uniq, floor)
                n_hit = vals.shape[0]
                if n_hit == uniq.shape[0]:
                    need_at = np.arange(0)
                    pending._out = vals  # every unit from the cache: its copy, no other
                elif n_hit:
                    pending.out[hit] = vals
                    need_at = np.flatnonzero(~hit)
                else:  # nothing cached: the result is the fetch's own array (no copy)
                    need_at = np.arange(uniq.shape[0])
                self._count(task, cache_hits=n_hit)
            else:
                need_at = np.arange(uniq.shape[0])
            for f in store.inflight:
                if need_at.shape[0] == 0:
                    break
                if f.usable(floor):
                    cov = covered(uniq[need_at], f)
                    if cov.any():
                        at = need_at[cov]
                        f.joined += 1
                        pending.parts.append((f, at, np.searchsorted(f.keys, uniq[at])))
                        need_at = need_at[~cov]
                        self._count(task, joined=int(cov.sum()))
            if need_at.shape[0]:
                fresh = self.known_min.get(job) if job is not None else None
                new = Fetch(uniq[need_at], fresh)
                store.inflight.append(new)
                pending.parts.append((new, need_at, np.arange(need_at.shape[0])))
                self.requests += 1
            self._count(task, units=int(uniq.shape[0]))
        if new is not None:
            self._start_fetch(name, mode, store, new, task, alloc)
        return pending

    def _start_fetch(
        self,
        name: str,
        mode: str,
        store: UnitStore | DirectStore,
        fetch: Fetch,
        task: Any,
        alloc: Any = None,
    ) -> None:
        arr = PSArray(name, binding=self.binding)
        try:
            if mode == "rows":
                m, parts, places, cost, full, shape = plan_get(arr.meta, fetch.keys, None)
            else:
                m, parts, places, cost, full, shape = plan_get(arr.meta, None, fetch.keys)
            # the keys are sorted: each block's reply is one run of the result,
            # read from the socket straight into its place
            out, into = direct_targets(m.dtype, full, places, cost, alloc)
            finish = assemble(m, places, full, shape, out, into)
            b = self.binding
            cf = b.submit(b.call_blocks, name, "get", parts, cost, {}, into)
        except BaseException as e:
            self._fail_fetch(store, fetch, e)
            raise
        t0 = time.perf_counter()

        def complete(f: concurrent.futures.Future[Any]) -> None:
            try:
                vals = finish(f.result()).reshape(fetch.keys.shape[0], store.width)
            except BaseException as e:  # noqa: BLE001 - handed to the readers
                self._fail_fetch(store, fetch, e)
                return
            limit = config.get_bytes("daskangel.agent.cache-bytes")
            with self._lock:
                if fetch.fresh is not None:
                    store.insert(fetch.keys, vals, fetch.fresh)
                    store.evict(limit)
                store.inflight.remove(fetch)
                self._count(
                    task, calls=1, seconds=time.perf_counter() - t0, bytes_pulled=vals.nbytes
                )
            fetch.future.set_result(vals)

        if fetch.fresh is None:
            # nothing to cache: assembling the reply (its parts landed in place) is
            # cheap, so it is done where the reply arrives, without a hop through
            # the merge thread before the reader wakes
            cf.add_done_callback(complete)
        else:
            cf.add_done_callback(lambda f: self._merger.submit(complete, f))

    def _fail_fetch(self, store: UnitStore | DirectStore, fetch: Fetch, e: BaseException) -> None:
        with self._lock:
            if fetch in store.inflight:
                store.inflight.remove(fetch)
        if not fetch.future.done():
            fetch.future.set_exception(e)

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

        The batches are requested in *chunks* (:func:`chunk_batches`): runs of
        batches of at most ``daskangel.agent.pipeline-request-bytes`` each, since
        every request costs a round trip per server whatever its size.  Chunks
        are sent up front as long as ``daskangel.agent.pipeline-bytes`` allows,
        and a chunk's batches are yielded as soon as it arrives (``ordered=True``:
        in request order), the next chunk being requested first, so computing on
        one chunk's batches overlaps pulling the next ones.  Every requested row
        is yielded exactly once per occurrence in ``rows``.
        """
        if isinstance(batch, bool) or not isinstance(batch, (int, np.integer)) or batch < 1:
            raise InvalidArgumentError(f"batch: expected an int >= 1, got {batch!r}")
        m = self._meta(name)
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
        live: deque[tuple[int, int, np.ndarray | None, _Pending | RowChunk]] = deque()
        arr = PSArray(name, binding=self.binding)
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
                        self.binding, name, m, rc, functools.partial(arr._get, m, rc, None)
                    )
                if chunk is not None:
                    live.append((s, e, None, chunk))
                    held += nbytes
                    self.requests += 1
                    continue
                if K.is_strictly_sorted(rc):  # a task's key list: batches are slices
                    uniq, inv = rc, None
                else:
                    uniq, inv = np.unique(rc, return_inverse=True)
                    inv = inv.ravel()
                    # the chunk's values are only gathered from: a reused buffer
                    alloc = self.binding.scratch
                pending = self._request(name, m, "rows", uniq, job, floor, task, alloc)
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
                    o = self.binding.result((be - b, m.shape[1]), m.dtype)
                    yield idx[b:be], np.take(vals, inv[b - s : be - s], axis=0, out=o, mode="clip")
            del vals

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
        casting: str | None = None,
        on_nonfinite: str | None = None,
    ) -> None:
        """Buffer an increment (merged with other tasks'; pushed by size or on flush)."""
        if isinstance(cols, KeySet):
            cols = cols.cols
        n = self.pusher.increment(
            name,
            values,
            rows,
            cols,
            job=job,
            clock=clock,
            casting=casting,
            on_nonfinite=on_nonfinite,
        )
        with self._lock:
            self._count(task, bytes_pushed=n)

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


def chunk_batches(n: int, batch: int, row_bytes: int, request_bytes: int) -> list[tuple[int, int]]:
    """How :meth:`PSAgent.get_iter` requests ``n`` rows in batches of ``batch``:
    ``[(start, stop), ...]`` runs of whole batches, one request each.

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
