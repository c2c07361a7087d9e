"""Server side of eager refresh (Bösen's server-to-client communication).

A worker that caches rows (or vector entries) of an array *subscribes* to them on
the servers holding them; between clock boundaries it asks each server, every
``daskangel.comm.refresh-interval``, for the subscribed units that changed since
they were last sent to it.  The server chooses what goes out, as Bösen's server
does: only units whose value moved, ranked by relative magnitude of the change
``sum|Δ| / (sum|w| + ε)`` (``daskangel.comm.policy: magnitude``) or at random, as
many as its own budget allows (``daskangel.comm.server-budget`` bytes per second
over every subscriber, a token bucket; ``null``: every changed unit).  What is
not sent stays "changed" and competes again in the next round.

A round compares (reads and diffs) only the subscribed units that writes noted
since the subscriber's last round (:mod:`._changed`, kept per block and
subscriber by the ``update`` handler), and those held back by the budget; a
write that notes nothing (a psf, a fill, a restore) makes the next round compare
every subscribed unit of the block.  ``compared`` / ``last_compared`` count them,
``subscribed`` the units subscribed, summed over rounds.

The values are read under the server lock when the request is served, that is
after the worker sent it: every update acknowledged before then is in them.  The
worker tags them with the slowest clock it knew when it asked, as it tags a
fetch, so a refreshed unit is at least as fresh as the copy it replaces and SSP's
guarantee is unchanged (:mod:`._refresh`).

Only blocks that span whole rows are refreshed (``rows`` mode); a block split by
columns answers nothing (its rows are read at the clock as before).

Example
-------
>>> import numpy as np
>>> from daskangel.psarray._initspec import InitSpec
>>> from daskangel.psarray._server import PSServer
>>> s = PSServer("local", 0)
>>> s.dispatch("create", array="W", blocks=[{"block": 0, "kind": "dense", "shape": (3, 2),
...     "dtype": "float32", "init": InitSpec().to_dict(), "row0": 0, "col0": 0, "n_cols": 2}])
>>> kw = dict(array="W", sub="w1", mode="rows", policy="magnitude", epsilon=1e-6)
>>> s.dispatch("refresh", parts=[{"block": 0, "units": np.array([0, 2])}], **kw)[0]["keys"]
array([], dtype=int64)
>>> s.dispatch("update", array="W", add=True, parts=[{"block": 0, "rows": np.array([2]),
...     "cols": None, "values": np.ones((1, 2), "float32")}])
True
>>> out = s.dispatch("refresh", parts=[{"block": 0, "units": None}], **kw)[0]
>>> out["keys"], out["vals"]
(array([2]), array([[1., 1.]], dtype=float32))
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from .. import config
from ..comm import CommStats, TokenBucket, priorities, select
from ._changed import Changed
from ._server import Block, PSServer, server_op

__all__ = ["RefreshState"]


class RefreshState:
    """One server's subscriptions, refresh budget and counters."""

    def __init__(self) -> None:
        # {(array, subscriber, block): (block object, sorted local ids, last values sent,
        #  units written since the last round)}
        self.subs: dict[tuple[str, str, int], tuple[Block, np.ndarray, np.ndarray, Changed]] = {}
        # {(array, block): {subscriber: (mode, its Changed record)}}: what writes note
        self.watch: dict[tuple[str, int], dict[str, tuple[str, Changed]]] = {}
        # units compared (read and diffed) by refresh rounds: all, and the last round's;
        # units subscribed, summed over rounds (what a round without the record diffed)
        self.compared = 0
        self.last_compared = 0
        self.subscribed = 0
        # {(array, subscriber): last request} subscriptions idle past
        # daskangel.comm.refresh-idle (a finished job's) are forgotten
        self.seen: dict[tuple[str, str], float] = {}
        self.bucket: TokenBucket | None = None
        self.budget: float | None = None
        self.stats = CommStats(config.get_seconds("daskangel.comm.rate-window"))
        self.rng = np.random.default_rng(0)

    def tokens(self) -> float:
        """Bytes this round may send (inf without a server budget)."""
        raw = config.get("daskangel.comm.server-budget")
        budget = None if raw is None else float(config.get_bytes("daskangel.comm.server-budget"))
        if budget != self.budget:
            self.budget = budget
            burst = config.get_seconds("daskangel.comm.burst")
            if budget is None:
                self.bucket = None
            elif self.bucket is None:
                self.bucket = TokenBucket(budget, burst)
            else:
                self.bucket.retune(budget, burst)
        return float("inf") if self.bucket is None else self.bucket.available()

    def forget(self, array: str | None = None, idle: float | None = None) -> None:
        """Drop the subscriptions of ``array`` (dropped), or those idle ``idle`` s."""
        now = time.monotonic()
        gone = {
            k
            for k, t in self.seen.items()
            if k[0] == array or (idle is not None and now - t > idle)
        }
        if not gone:
            return
        for g in gone:
            del self.seen[g]
        for k in [k for k in self.subs if (k[0], k[1]) in gone]:
            del self.subs[k]
            w = self.watch.get((k[0], k[2]))
            if w is not None:
                w.pop(k[1], None)
                if not w:
                    del self.watch[(k[0], k[2])]

    def status(self) -> dict[str, float]:
        """``refresh_*`` counters for ``ps.status()``."""
        s = self.stats
        return {
            "refresh_budget": float(self.budget or 0.0),
            "refresh_sent": float(s.early),
            "refresh_held_back": float(s.boundary),
            "refresh_rate": float(s.rate()),
        }


def refresh_state(server: PSServer) -> RefreshState:
    st = getattr(server, "refresh", None)
    if st is None:
        st = server.refresh = RefreshState()  # type: ignore[attr-defined]
    return st  # type: ignore[no-any-return]


def _read(block: Block, mode: str, ids: np.ndarray) -> np.ndarray:
    if mode == "rows":
        return np.asarray(block.get(ids, None))
    return np.asarray(block.get(None, ids)).reshape(-1, 1)


@server_op("refresh")
def _refresh(
    server: PSServer,
    array: str,
    parts: list[dict[str, Any]],
    sub: str,
    mode: str,
    policy: str,
    epsilon: float,
) -> list[dict[str, np.ndarray]]:
    """The changed subscribed units of ``sub`` to send now, per part (see module doc).

    ``parts[i]["units"]``: local ids (rows, or a vector's columns) to subscribe to
    besides those already subscribed (None: no new ones; ``"all"``: the block's).
    """
    st = refresh_state(server)
    st.forget(idle=config.get_seconds("daskangel.comm.refresh-idle"))
    st.seen[(array, sub)] = time.monotonic()
    # part, ids compared, their positions among the subscribed, current values, delta
    found: list[tuple[int, np.ndarray, np.ndarray | None, np.ndarray, np.ndarray]] = []
    compared = 0
    for i, p in enumerate(parts):
        b = int(p["block"])
        block = server.block(array, b)
        if mode == "rows" and block.shape[1] != block.n_cols:
            continue  # split by columns: rows are refreshed whole or not at all
        key = (array, sub, b)
        old = st.subs.get(key)
        if old is not None and old[0] is not block:
            old = None  # the block was replaced (restored, dropped and created again)
        ids = np.empty(0, np.int64) if old is None else old[1]
        last = None if old is None else old[2]
        units = p.get("units")
        if isinstance(units, str):  # "all": every unit of the block
            units = np.arange(block.shape[0] if mode == "rows" else block.shape[1])
        if units is not None:
            new = np.setdiff1d(np.asarray(units, np.int64), ids)
            if new.shape[0]:
                vals = _read(block, mode, new)  # what the subscriber just fetched, about
                ids = np.concatenate([ids, new])
                order = np.argsort(ids, kind="stable")
                ids = ids[order]
                last = vals if last is None else np.concatenate([last, vals])[order]
        if last is None or ids.shape[0] == 0:
            continue
        rec = None if old is None else old[3]
        st.subscribed += int(ids.shape[0])
        pos: np.ndarray | None = None  # None: every subscribed unit
        if old is None:
            pos = np.empty(0, np.int64)  # every unit was just read: none moved
        elif rec is not None and rec.version == block.version:
            pos = _positions(ids, rec.take())  # only the units written since the last round
        rec = Changed(block.version, 4 * ids.shape[0])  # (held-back units go back in below)
        st.subs[key] = (block, ids, last, rec)
        st.watch.setdefault((array, b), {})[sub] = (mode, rec)
        if pos is not None and pos.shape[0] == 0:
            continue
        sel = ids if pos is None else ids[pos]
        cur = _read(block, mode, sel)
        compared += int(sel.shape[0])
        found.append((i, sel, pos, cur, cur - (last if pos is None else last[pos])))
    st.compared += compared
    st.last_compared = compared
    out = [{"keys": np.empty(0, np.int64), "vals": np.empty((0, 1))} for _ in parts]
    if not found:
        return out
    pr = np.concatenate([priorities(d, c, epsilon) for _, _, _, c, d in found])
    unit_bytes = [8 + c.shape[1] * c.dtype.itemsize for _, _, _, c, _ in found]
    cost = np.concatenate(
        [np.full(f[1].shape[0], u, np.int64) for f, u in zip(found, unit_bytes, strict=True)]
    )
    tokens = st.tokens()
    budget = float(cost.sum()) if tokens == float("inf") else tokens
    at = select(pr, cost, budget, policy, st.rng)
    sent = int(cost[at].sum())
    changed = int(cost[pr > 0].sum())
    now = time.monotonic()
    if st.bucket is not None:
        st.bucket.spend(sent)
    st.stats.record(sent, int(at.shape[0]), early=True, now=now)
    if changed > sent:
        st.stats.record(changed - sent, 0, early=False, now=now)
    chosen = np.zeros(pr.shape[0], bool)
    chosen[at] = True
    held = (pr > 0) & ~chosen  # changed, not sent: compared again next round
    starts = np.concatenate([[0], np.cumsum([f[1].shape[0] for f in found])])
    for j, (i, sel, pos, cur, _) in enumerate(found):
        lo, hi = int(starts[j]), int(starts[j + 1])
        mine = np.flatnonzero(chosen[lo:hi])
        b = int(parts[i]["block"])
        block, _, last, rec = st.subs[(array, sub, b)]
        last[mine if pos is None else pos[mine]] = cur[mine]
        rec.add(sel[held[lo:hi]])
        off = block.row0 if mode == "rows" else block.col0
        out[i] = {"keys": sel[mine] + off, "vals": cur[mine]}
    return out


def _positions(ids: np.ndarray, units: np.ndarray) -> np.ndarray:
    """Positions in the sorted ``ids`` of those ``units`` that are among them."""
    at = np.searchsorted(ids, units)
    ok = at < ids.shape[0]
    at = at[ok]
    return at[ids[at] == units[ok]]
