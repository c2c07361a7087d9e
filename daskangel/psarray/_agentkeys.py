"""Pruned pulls from the agent's side: registering key sets and pulling them by tag.

The servers' half (the key lists kept under a tag) is :mod:`._keylists`.  This
mixin of :class:`~daskangel.psarray._agent.PSAgent` plans a key set once (which
block holds which keys, where each block's values go), registers it, and pulls
it with only the tag; pulls of one key set are cached and de-duplicated like
row pulls, keyed by ``(job, tag)``.

Example
-------
>>> ks = get_agent().key_set("w", cols=part_keys)                  # doctest: +SKIP
>>> values = get_agent().get_keys(ks, job=job, floor=clock - 2)  # doctest: +SKIP
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
import uuid
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import KeyListMissingError, ShapeMismatchError
from ._kernels import is_strictly_sorted
from ._keylists import KeySet
from ._pullcache import Fetch
from ._routing import normalize_index, plan_axis

if TYPE_CHECKING:
    from ._binding import Binding
    from ._meta import ArrayMeta

__all__ = ["KeySetPulls"]


class _KeyPlan:
    """What the agent remembers of a registered key set (for pulls and re-registration)."""

    __slots__ = ("blocks", "locals", "n", "name", "outs", "uniq_inv")

    def __init__(
        self,
        name: str,
        blocks: list[int],
        locals_: list[np.ndarray],
        outs: list[Any],
        uniq_inv: np.ndarray | None,
        n: int,
    ) -> None:
        self.name = name
        self.blocks = blocks  # touched blocks
        self.locals = locals_  # their block-local keys (for re-registering)
        self.outs = outs  # where each block's values go among the unique keys
        self.uniq_inv = uniq_inv  # unique keys -> the order the user gave (None: same)
        self.n = n  # number of unique keys


class KeySetPulls:
    """Key-set registration and pulls; state lives on the agent (see ``PSAgent``)."""

    binding: Binding
    _lock: threading.Lock
    _merger: concurrent.futures.ThreadPoolExecutor
    known_min: dict[str | None, int]
    requests: int
    # {tag: _KeyPlan} for key sets registered from this process
    keysets: dict[str, _KeyPlan]
    # {(job, tag): Fetch} key-set pulls, cached (done) or in flight
    keyset_fetches: dict[tuple[str | None, str], Fetch]

    def _meta(self, name: str) -> ArrayMeta:
        raise NotImplementedError

    def _count(self, task: Any, **kw: float) -> None:
        raise NotImplementedError

    def key_set(self, name: str, cols: Any, *, tag: str | None = None) -> KeySet:
        """Register a vector's key set on its servers; pull it later by tag only.

        A :class:`KeySet` pickles with its keys, so a set registered on the driver
        also works in a task: the task's process registers it (same tag) on first use.
        """
        m = self._meta(name)
        if m.shape[0] != 1:
            raise ShapeMismatchError(
                f"key_set: array {name!r} has {m.shape[0]} rows; key sets select columns of a "
                "vector (one row)"
            )
        c, _ = normalize_index("cols", cols, m.shape[1])
        idx = np.arange(m.shape[1], dtype=np.int64) if c is None else c
        inv: np.ndarray | None = None  # None: the keys are sorted and distinct already
        uniq = idx
        if not is_strictly_sorted(idx):
            uniq, inv = np.unique(idx, return_inverse=True)
            inv = inv.ravel()
        plan = plan_axis(m.layout, "cols", uniq, m.shape[1])
        locals_ = [np.arange(uniq.shape[0]) if x is None else x for x in plan.local]
        kp = _KeyPlan(name, plan.blocks, locals_, plan.out, inv, uniq.shape[0])
        tag = tag or uuid.uuid4().hex
        b = self.binding
        b.run(self._register, tag, kp)
        with self._lock:
            self.keysets[tag] = kp
        return KeySet(name, tag, idx)

    async def _register(self, tag: str, kp: _KeyPlan) -> None:
        parts = {
            blk: {"block": blk, "cols": loc} for blk, loc in zip(kp.blocks, kp.locals, strict=True)
        }
        cost = {blk: loc.nbytes for blk, loc in zip(kp.blocks, kp.locals, strict=True)}
        await self.binding.call_blocks(kp.name, "keys_register", parts, cost, {"tag": tag})

    async def _keys_fetch(self, tag: str, kp: _KeyPlan) -> dict[int, Any]:
        parts = {blk: {"block": blk} for blk in kp.blocks}
        cost = {blk: loc.shape[0] * 8 for blk, loc in zip(kp.blocks, kp.locals, strict=True)}
        call = self.binding.call_blocks
        try:
            return await call(kp.name, "keys_get", parts, cost, {"tag": tag})
        except KeyListMissingError:  # evicted, or the server was rebuilt: register again
            await self._register(tag, kp)
            return await call(kp.name, "keys_get", parts, cost, {"tag": tag})

    def get_keys(
        self, ks: KeySet, *, job: str | None = None, floor: int | None = None, task: Any = None
    ) -> np.ndarray:
        """Values of a registered key set, in its order (a pruned pull: only the tag is sent)."""
        with self._lock:
            kp = self.keysets.get(ks.tag)
        if kp is None:  # made in another process (or dropped here): register it here
            self.key_set(ks.array, ks.cols, tag=ks.tag)
            with self._lock:
                kp = self.keysets[ks.tag]
        key = (job, ks.tag)
        new: Fetch | None = None
        with self._lock:
            f = self.keyset_fetches.get(key)
            if f is not None and f.future.done() and floor is not None and f.usable(floor):
                self._count(task, cache_hits=len(ks))
            elif f is not None and not f.future.done() and f.usable(floor):
                self._count(task, joined=len(ks))
            else:
                fresh = self.known_min.get(job) if job is not None else None
                f = new = self.keyset_fetches[key] = Fetch(np.empty(0, np.int64), fresh)
                self.requests += 1
        if new is not None:
            t0 = time.perf_counter()
            cf = self.binding.submit(self._keys_fetch, ks.tag, kp)
            m = self._meta(kp.name)

            def complete(r: concurrent.futures.Future[Any]) -> None:
                try:
                    res = r.result()
                    out = np.empty(kp.n, m.dtype)
                    for blk, pos in zip(kp.blocks, kp.outs, strict=True):
                        out[pos] = res[blk].ravel()
                except BaseException as e:  # noqa: BLE001 - handed to the readers
                    with self._lock:
                        if self.keyset_fetches.get(key) is new:
                            del self.keyset_fetches[key]
                    assert new is not None
                    new.future.set_exception(e)
                    return
                with self._lock:
                    dt = time.perf_counter() - t0
                    self._count(task, calls=1, seconds=dt, bytes_pulled=out.nbytes)
                assert new is not None
                new.future.set_result(out)

            cf.add_done_callback(lambda r: self._merger.submit(complete, r))
        res = f.future.result()  # shared by every reader of this fetch: never handed out
        return res.copy() if kp.uniq_inv is None else res[kp.uniq_inv]

    def drop_key_set(self, ks: KeySet) -> None:
        """Forget a key set here and on its servers."""
        with self._lock:
            kp = self.keysets.pop(ks.tag, None)
            for k in [k for k in self.keyset_fetches if k[1] == ks.tag]:
                del self.keyset_fetches[k]
        if kp is not None:
            parts = {blk: {"block": blk} for blk in kp.blocks}
            b = self.binding
            b.run(b.call_blocks, kp.name, "keys_drop", parts, {}, {"tag": ks.tag})
