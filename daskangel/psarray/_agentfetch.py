"""Cached, de-duplicated unit fetches: the agent's read path under ``get``.

A mixin of :class:`~daskangel.psarray._agent.PSAgent` (state lives on the
agent).  A read of sorted distinct *units* (matrix rows, or vector entries) is
answered from the pull cache where its floor allows, joins the fetches in flight
that cover it (de-duplication), and sends one new fetch for the rest; a
:class:`_Pending` gathers the three.  A fetch's sorted keys let every block's
reply be read from the socket straight into its place.

Example
-------
>>> pending = agent._request("W", meta, "rows", uniq, None, None, None)  # doctest: +SKIP
>>> values = pending.finish()  # doctest: +SKIP
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from typing import Any

import numpy as np

from .. import config
from ._binding import Binding
from ._meta import ArrayMeta
from ._plan import assemble, direct_targets, plan_get
from ._pullcache import DirectStore, Fetch, UnitStore, covered, make_store

__all__ = ["CachedFetches"]


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


class CachedFetches:
    """Reads of sorted distinct units through cache, joins and one new fetch."""

    binding: Binding
    _lock: threading.Lock
    _merger: concurrent.futures.ThreadPoolExecutor
    known_min: dict[str | None, int]
    requests: int
    # {(job, array, mode): UnitStore or DirectStore}
    stores: dict[tuple[str | None, str, str], UnitStore | DirectStore]

    def _count(self, task: Any, **kw: float) -> None:
        raise NotImplementedError

    def _meta(self, name: str) -> ArrayMeta:
        raise NotImplementedError

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
        try:
            meta = self._meta(name)
            if mode == "rows":
                m, parts, places, cost, full, shape = plan_get(meta, fetch.keys, None)
            else:
                m, parts, places, cost, full, shape = plan_get(meta, None, fetch.keys)
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
