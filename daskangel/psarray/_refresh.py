"""Worker side of eager refresh: cached rows kept fresh between clock boundaries.

With ``daskangel.comm.refresh: true`` an :class:`EagerRefresh` thread of the
worker's agent asks, every ``daskangel.comm.refresh-interval``, the servers of
each array it caches for a training job for the cached units that changed
(:mod:`._refresh_ops`: the server chooses them, by magnitude or at random, within
its ``daskangel.comm.server-budget``), and writes the answers into the cache.

SSP's guarantee is unchanged: a refreshed unit is tagged, like a fetch, with the
slowest clock of the job this worker knew when it *sent* the request, and the
server read it after that; every update of an earlier clock had been flushed and
acknowledged before that clock was reached, so the value holds them all.  The
cache keeps whichever copy is fresher by that tag (``UnitStore.insert``), so a
refreshed unit is never older, by tag, than the copy it replaces.

Example
-------
>>> import dask
>>> with dask.config.set({"daskangel.comm.refresh": True}):  # doctest: +SKIP
...     model.fit(X)  # workers started now refresh the rows they cache
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

import numpy as np

from .. import config
from ._plan import plan_get

__all__ = ["EagerRefresh"]

logger = logging.getLogger(__name__)


class EagerRefresh:
    """Refreshes one agent's cached units of training jobs (see module doc)."""

    def __init__(self, agent: Any) -> None:
        self.agent = agent
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # {store key: (store, units it had when last subscribed)}
        self._subscribed: dict[tuple[Any, str, str], tuple[Any, int]] = {}
        self.rounds = 0
        self.units = 0  # units written into the cache by refreshes
        self.bytes = 0

    def poke(self) -> None:
        """Start the thread if ``daskangel.comm.refresh`` is on (cheap; called per clock)."""
        if (
            self._thread is None
            and not self._stop.is_set()
            and config.get("daskangel.comm.refresh")
        ):
            self._thread = threading.Thread(
                target=self._run, name="daskangel-comm-refresh", daemon=True
            )
            self._thread.start()

    def close(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(config.get_seconds("daskangel.comm.refresh-interval")):
            if not config.get("daskangel.comm.refresh"):
                continue
            try:
                self.round()
            except Exception as e:  # noqa: BLE001 - an array dropped, a server moving: next round
                logger.debug("daskangel: an eager refresh round failed: %r", e)

    def round(self) -> int:
        """One refresh of every cached array of a running job; return units refreshed."""
        a = self.agent
        with a._lock:
            todo = [
                (k, s, s.keys.copy(), a.known_min[k[0]])
                for k, s in a.stores.items()
                if k[0] is not None and k[0] in a.known_min and s.keys.shape[0]
            ]
            live = set(a.stores)
        for k in [k for k in self._subscribed if k not in live]:
            del self._subscribed[k]
        got = 0
        for key, store, keys, fresh in todo:
            got += self._one(key, store, keys, fresh)
        self.rounds += 1
        return got

    async def _ask(
        self, name: str, meta: Any, by_block: dict[int, dict[str, Any]], extra: dict[str, Any]
    ) -> dict[int, Any] | None:
        """One ``refresh`` per server, straight to the servers of the cached routing.

        Unlike a read this never refreshes metadata or retries: a block that moved
        or an array dropped meanwhile only skips this round (None).
        """
        b = self.agent.binding
        groups: dict[Any, list[int]] = {}
        for blk in by_block:
            groups.setdefault(meta.servers[blk], []).append(blk)
        try:
            replies = await asyncio.gather(
                *(
                    b.call(s, "refresh", 0, meta.transport, None, array=name,
                           parts=[by_block[blk] for blk in blks], **extra)
                    for s, blks in groups.items()
                )
            )  # fmt: skip
        except Exception:  # noqa: BLE001 - moved, dropped, a server lost: next round
            return None
        out: dict[int, Any] = {}
        for blks, rep in zip(groups.values(), replies, strict=True):
            out.update(zip(blks, rep, strict=True))
        return out

    def _one(self, key: tuple[Any, str, str], store: Any, keys: np.ndarray, fresh: int) -> int:
        job, name, mode = key
        a = self.agent
        meta = a.binding.metas.get(name)
        if meta is None:  # forgotten (dropped): never ask the scheduler from here
            return 0
        if mode == "rows":
            parts = plan_get(meta, keys, None)[1]
            local = {b: p["rows"] for b, p in parts.items()}
        else:
            parts = plan_get(meta, None, keys)[1]
            local = {b: p["cols"] for b, p in parts.items()}
        prev = self._subscribed.get(key)
        send = prev is None or prev[0] is not store or prev[1] != keys.shape[0]
        by_block: dict[int, dict[str, Any]] = {}
        for blk, u in local.items():  # a whole-range selection is None: "all" of the block
            units = None if not send else "all" if u is None else np.asarray(u, np.int64)
            by_block[blk] = {"block": blk, "units": units}
        policy = str(config.get("daskangel.comm.policy"))
        extra = {
            "sub": f"{a.id}:{job}:{mode}",
            "mode": mode,
            "policy": policy,
            "epsilon": float(config.get("daskangel.comm.epsilon")),
        }
        res = a.binding.submit(self._ask, name, meta, by_block, extra).result(
            config.get_seconds("daskangel.client.recovery-wait")
        )
        if res is None:
            return 0
        self._subscribed[key] = (store, keys.shape[0])
        ks = [r["keys"] for r in res.values() if r["keys"].shape[0]]
        if not ks:
            return 0
        order_k = np.concatenate(ks)
        vals = np.concatenate([r["vals"] for r in res.values() if r["keys"].shape[0]])
        order = np.argsort(order_k, kind="stable")
        order_k, vals = order_k[order], vals[order].reshape(order_k.shape[0], store.width)
        with a._lock:
            if a.stores.get(key) is not store:
                return 0  # forgotten meanwhile (job ended, array dropped)
            store.insert(order_k, vals, fresh)
        self.units += int(order_k.shape[0])
        self.bytes += int(vals.nbytes + order_k.nbytes)
        return int(order_k.shape[0])
