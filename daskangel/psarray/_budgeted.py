"""Budgeted pushes between clock boundaries (Bösen's managed communication).

With ``daskangel.comm.budget`` set, a :class:`BudgetedSender` thread wakes every
``daskangel.comm.interval`` and, while the worker's token bucket holds tokens,
moves the buffered units that fit out of the update buffer and pushes them:
largest relative update first (``daskangel.comm.policy: magnitude``) or at
random.  What does not fit stays buffered and keeps merging.  ``clock()``'s flush
sends everything left and waits for every push in flight, budgeted ones
included, so the SSP guarantee is the one without management; a budgeted push
carries its clock and a write tag of its own like any other, so snapshots and
exactly-once retries are unchanged.

As in Bösen, the budget paces what goes out *between* clock boundaries; the
flush at a clock boundary is not paced (it never waits for tokens, and does not
spend them).  A budget below what one clock needs (its early and boundary bytes
over its duration) is reported — a warning with the figures, at most every
``daskangel.comm.warn-interval`` — never a hang.

Example
-------
>>> import dask
>>> with dask.config.set({"daskangel.comm.budget": "4MiB"}):  # doctest: +SKIP
...     ...  # a worker started now sends up to 4 MiB/s between clock boundaries
"""

from __future__ import annotations

import logging
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import config
from ..comm import CommPolicy, CommStats, TokenBucket, priorities, select
from ..errors import CommBudgetWarning
from ._pushbuffer import MergeBuffer

__all__ = ["BudgetedSender", "WeightLookup"]

logger = logging.getLogger(__name__)

# (job, array, mode, unit keys) -> cached |w| per unit (or None)
WeightLookup = Callable[[Any, str, str, np.ndarray], "np.ndarray | None"]


def _fmt(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{n:.0f} B"
        n /= 1024
    return f"{n:.1f} GiB"


class BudgetedSender:
    """Spends one worker's push budget between clock boundaries (see module doc).

    ``pusher`` is the worker's :class:`~._pusher.UpdatePusher`: its lock, buffers,
    in-flight pushes and ``_register`` / ``_start`` are used as they are.
    """

    def __init__(self, pusher: Any) -> None:
        self.pusher = pusher
        self.policy = CommPolicy.from_config()
        self.stats = CommStats(config.get_seconds("daskangel.comm.rate-window"))
        self.bucket = TokenBucket(self.policy.budget or 1.0, self.policy.burst)
        self.rng = np.random.default_rng(self.policy.seed)
        self.weights: WeightLookup | None = None  # the agent's cache, once it attaches
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_flush = time.monotonic()
        self._early_since = 0  # bytes sent early since the last clock boundary
        self._warned = -float("inf")

    # -- configuration ------------------------------------------------------------

    def refresh(self) -> bool:
        """Re-read ``daskangel.comm.*`` (cheap); start the thread if on.  Return on/off."""
        p = CommPolicy.from_config()
        if p != self.policy:
            if p.seed != self.policy.seed:
                self.rng = np.random.default_rng(p.seed)
            self.policy = p
            if p.budget is not None:
                self.bucket.retune(p.budget, p.burst)
        if p.on and self._thread is None and not self._stop.is_set():
            self._thread = threading.Thread(
                target=self._run, name="daskangel-comm-budget", daemon=True
            )
            self._thread.start()
        return p.on

    def close(self) -> None:
        self._stop.set()
        self._wake.set()

    # -- the budgeted rounds --------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.policy.interval)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self.round()
            except Exception:  # a failed push itself is raised at the next flush
                logger.exception("daskangel: a budgeted push round failed")

    def round(self) -> int:
        """Send what the tokens allow now; return the bytes sent."""
        p = self.pusher
        if not self.refresh():
            return 0
        with p._cv:
            tokens = self.bucket.available()
            if tokens < min(self.policy.min_send, self.bucket.depth) or not p.buffers:
                return 0
            taken = self._choose(p.buffers, tokens)
            if not taken:
                return 0
            sent = sum(b.unit_bytes * b.keys.shape[0] for _, b in taken)
            units = sum(b.keys.shape[0] for _, b in taken)
            self.bucket.spend(sent)
            self.stats.record(sent, units, early=True)
            self._early_since += sent
            work = p._register(taken)
        p._start(work, background=False, kind="early")
        return sent

    def _choose(
        self, buffers: dict[Any, MergeBuffer], tokens: float
    ) -> list[tuple[Any, MergeBuffer]]:
        """Split the chosen units off ``buffers`` (lock held): ``[(buffer key, part)]``."""
        items = [(k, b, *b.units()) for k, b in buffers.items()]
        items = [it for it in items if it[2].shape[0]]
        if not items:
            return []
        pr, cost, owner = [], [], []
        for i, (k, b, keys, vals) in enumerate(items):
            w = None
            if self.policy.policy == "magnitude" and self.weights is not None:
                w = self.weights(k[0], k[1], k[3], keys)
            pr.append(priorities(vals, w, self.policy.epsilon))
            cost.append(np.full(keys.shape[0], b.unit_bytes, np.int64))
            owner.append(np.full(keys.shape[0], i, np.int64))
        allp, allc, allo = np.concatenate(pr), np.concatenate(cost), np.concatenate(owner)
        at = select(allp, allc, tokens, self.policy.policy, self.rng)
        if at.shape[0] == 0:
            return []
        starts = np.concatenate([[0], np.cumsum([it[2].shape[0] for it in items])])
        out = []
        who = allo[at]
        for i in np.unique(who):
            k, b = items[i][0], items[i][1]
            out.append((k, b.split(at[who == i] - starts[i])))
        return out

    # -- clock boundaries -----------------------------------------------------------

    def record_boundary(self, nbytes: int, units: int, clock: bool) -> None:
        """A flush sent ``nbytes`` (lock held): count it; at a clock boundary
        (``clock``) warn if the budget is short of what the clock needed."""
        if nbytes <= 0:
            return
        now = time.monotonic()
        self.stats.record(nbytes, units, early=False, now=now)
        if not self.policy.on or self.policy.budget is None:
            if clock:
                self._last_flush, self._early_since = now, 0
            return
        if not clock:  # a size flush: part of what this clock needs
            self._early_since += nbytes
            return
        dt = max(now - self._last_flush, 1e-9)
        need = nbytes + self._early_since
        allowed = self.policy.budget * dt
        self._last_flush, self._early_since = now, 0
        if need > allowed:
            self.stats.short_clocks += 1
            if now - self._warned >= config.get_seconds("daskangel.comm.warn-interval"):
                self._warned = now
                msg = (
                    f"daskangel.comm.budget {_fmt(self.policy.budget)}/s is below what a clock "
                    f"needs on this worker: {_fmt(need)} pushed in a {dt:.3g} s clock "
                    f"({_fmt(need / dt)}/s), {_fmt(nbytes)} of it held back to the clock "
                    f"boundary ({self.stats.short_clocks} such clocks so far); the boundary "
                    "flush sends it regardless, so training is not slowed, only unmanaged"
                )
                logger.warning(msg)
                warnings.warn(msg, CommBudgetWarning, stacklevel=4)

    def status(self) -> dict[str, float]:
        """Counters for ``ps.status()`` (``comm_*`` columns of a task row)."""
        s = self.stats
        return {
            "comm_budget": float(self.policy.budget or 0.0),
            "comm_sent": float(s.early),
            "comm_held_back": float(s.boundary),
            "comm_rate": float(s.rate()),
            "comm_short_clocks": float(s.short_clocks),
        }
