"""The leader's side of growing one round's trees, level by level (two-phase split finding).

Per level the leader holds the *open* nodes (those that may still split) of
every tree of the round, each with its totals ``(G, H, n)`` and its *terms*:
the signed histogram slots whose sum is its histogram (a built node is its own
slot; its sibling is the parent's terms minus the built slot).  It

1. runs :class:`~._psfs.FindSplits` over the histogram array: every server
   scans its features and returns one candidate per node; the best over
   servers is kept (phase two, on the PS);
2. accepts the splits whose gain is positive (the largest gains first when
   ``max_leaf_nodes`` binds), creates the children, and picks for every split
   with an open child the smaller child (fewer rows) to be built by the
   workers next level, in the next column triplet of that level's section;
3. answers the next command: ``grow`` (splits to apply, nodes to build) or
   ``leaves`` (the last splits and the finished trees).

Node arrays are ``(K, max_nodes)``; node 0 is a tree's root, children are
numbered in creation order.  Byte counts per level go to :attr:`levels`
(``{"tree", "level", "open", "pushed", "psf_sent", "psf_received",
"whole"}``; ``whole``: what pushing every task's histogram of every open node
to one client would have moved).

Example
-------
>>> g = Grower(plan, hist_array)                                  # doctest: +SKIP
>>> cmd = g.start(0)  # {"op": "grow", "level": 0, "splits": [], "build": [[0, 0, 0]]}  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._plan import Plan, level_cap
from ._psfs import FindSplits

__all__ = ["NODE_FIELDS", "Grower"]

# fields of a node in a tree row of the ``trees`` array
NODE_FIELDS = ("feat", "thr", "tbin", "mleft", "left", "right", "value", "gain", "count", "hess")


class Grower:
    """Leader state of one boosting round (see the module docstring)."""

    def __init__(self, plan: Plan, hist: Any) -> None:
        self.plan = plan
        self.hist = hist
        self.levels: list[dict[str, Any]] = []
        F = plan.spec.n_features
        self.usable = np.flatnonzero(plan.spec.n_bins > 0)
        self.n_features = F

    # -- a round ------------------------------------------------------------------------

    def start(self, it: int) -> dict[str, Any]:
        p = self.plan
        K, M = p.K, p.max_nodes
        self.it = it
        self.level = 0
        self.f = {k: np.zeros((K, M)) for k in NODE_FIELDS}
        self.f["feat"][:] = -1
        self.f["left"][:] = -1
        self.f["right"][:] = -1
        self.depth = np.zeros((K, M), np.int64)
        self.G = np.zeros((K, M))
        self.n_nodes = [1] * K
        self.leaves = [1] * K
        self.allow = self._colsample(it)
        base = p.col_base[0]
        self.terms: dict[tuple[int, int], list[tuple[int, float]]] = {
            (k, 0): [(base + 3 * k, 1.0)] for k in range(K)
        }
        self.open = [(k, 0) for k in range(K)]
        self.pushed = 0
        return {"op": "grow", "level": 0, "splits": [],
                "build": [[k, 0, base + 3 * k] for k in range(K)]}  # fmt: skip

    def _colsample(self, it: int) -> np.ndarray | None:
        p = self.plan
        if p.colsample >= 1.0:
            return None
        rng = np.random.default_rng([int(p.seed) & 0xFFFFFFFF, 7411, int(it)])
        n = max(1, round(p.colsample * self.usable.shape[0]))
        allow = np.zeros(self.n_features, np.uint8)
        allow[rng.choice(self.usable, size=min(n, self.usable.shape[0]), replace=False)] = 1
        return allow

    def set_roots(self, totals: np.ndarray) -> None:
        """Root totals ``(K, 3)`` summed over the tasks."""
        for k in range(self.plan.K):
            self.G[k, 0] = totals[k, 0]
            self.f["hess"][k, 0] = totals[k, 1]
            self.f["count"][k, 0] = totals[k, 2]
            self.f["value"][k, 0] = self._leaf_value(totals[k, 0], totals[k, 1])
        self.open = [(k, 0) for k in range(self.plan.K) if self._can_split(k, 0)]

    def _leaf_value(self, G: float, H: float) -> float:
        return float(-G / (H + self.plan.reg_lambda)) if H + self.plan.reg_lambda > 0 else 0.0

    def _can_split(self, k: int, n: int) -> bool:
        p = self.plan
        return bool(
            self.depth[k, n] < p.max_depth
            and self.f["count"][k, n] >= 2 * p.min_samples_leaf
            and self.f["hess"][k, n] >= 2 * p.min_child_weight
        )

    def after_level(self, pushed: int) -> dict[str, Any]:
        """Find, choose and apply this level's splits; the next command."""
        p = self.plan
        self.pushed += pushed
        best = self._find() if self.open else None
        cands = []
        if best is not None:
            for i, (k, n) in enumerate(self.open):
                if best["feature"][i] >= 0 and best["gain"][i] > 1e-12:
                    cands.append((float(best["gain"][i]), i, k, n))
        if p.max_leaf_nodes > 0:  # the largest gains first while leaves are left
            cands.sort(key=lambda c: (-c[0], c[1]))
        splits: list[list[int]] = []
        build: list[list[int]] = []
        nxt: list[tuple[int, int]] = []
        terms: dict[tuple[int, int], list[tuple[int, float]]] = {}
        lvl = self.level + 1
        slot = 0
        cap = level_cap(lvl, p.max_leaf_nodes) if lvl < p.max_depth else 0
        for gain, i, k, n in cands:
            if p.max_leaf_nodes > 0 and self.leaves[k] + 1 > p.max_leaf_nodes:
                continue
            assert best is not None
            lc, rc = self._split(k, n, gain, best, i)
            splits.append([k, n, int(self.f["feat"][k, n]), int(self.f["tbin"][k, n]),
                           int(self.f["mleft"][k, n]), lc, rc])  # fmt: skip
            if lvl >= p.max_depth:
                continue
            ol, orr = self._can_split(k, lc), self._can_split(k, rc)
            if not (ol or orr) or slot >= cap * p.K:
                continue
            small, big = (lc, rc) if self.f["count"][k, lc] <= self.f["count"][k, rc] else (rc, lc)
            col = p.col_base[lvl] + 3 * slot
            slot += 1
            build.append([k, small, col])
            terms[(k, small)] = [(col, 1.0)]
            terms[(k, big)] = [*self.terms[(k, n)], (col, -1.0)]
            nxt.extend((k, c) for c in (lc, rc) if self._can_split(k, c))
        self.level = lvl
        self.open = sorted(nxt)
        self.terms = {key: terms[key] for key in self.open}
        if build and self.open:
            return {"op": "grow", "level": lvl, "splits": splits, "build": build}
        return {"op": "leaves", "splits": splits, "trees": self.tree_lists()}

    def _split(
        self, k: int, n: int, gain: float, best: dict[str, np.ndarray], i: int
    ) -> tuple[int, int]:
        p, f = self.plan, self.f
        feat, b = int(best["feature"][i]), int(best["bin"][i])
        f["feat"][k, n] = feat
        f["tbin"][k, n] = b
        f["thr"][k, n] = p.spec.threshold(feat, b)
        f["mleft"][k, n] = int(best["missing_left"][i])
        f["gain"][k, n] = gain
        lc, rc = self.n_nodes[k], self.n_nodes[k] + 1
        self.n_nodes[k] += 2
        self.leaves[k] += 1
        f["left"][k, n], f["right"][k, n] = lc, rc
        GL, HL, CL = float(best["g_left"][i]), float(best["h_left"][i]), float(best["n_left"][i])
        G, H, C = self.G[k, n], f["hess"][k, n], f["count"][k, n]
        for c, (g, h, cnt) in ((lc, (GL, HL, CL)), (rc, (G - GL, H - HL, C - CL))):
            self.G[k, c] = g
            f["hess"][k, c] = h
            f["count"][k, c] = cnt
            f["value"][k, c] = self._leaf_value(g, h)
            self.depth[k, c] = self.depth[k, n] + 1
        return lc, rc

    def _find(self) -> dict[str, np.ndarray]:
        p = self.plan
        ptr = [0]
        cols: list[int] = []
        signs: list[float] = []
        totals = np.zeros((len(self.open), 3))
        for j, (k, n) in enumerate(self.open):
            for c, s in self.terms[(k, n)]:
                cols.append(c)
                signs.append(s)
            ptr.append(len(cols))
            totals[j] = (self.G[k, n], self.f["hess"][k, n], self.f["count"][k, n])
        func = FindSplits(
            np.asarray(ptr, np.int64), np.asarray(cols, np.int64), np.asarray(signs),
            totals, p.reg_lambda, p.min_child_weight, float(p.min_samples_leaf),
            offsets=p.spec.offsets, allow=self.allow,
        )  # fmt: skip
        res: dict[str, np.ndarray] = self.hist.psf(func)
        n_blocks = self.hist.meta.layout.n_blocks
        n_servers = len(set(self.hist.meta.servers))
        sent = n_servers * (8 * (len(ptr) + 2 * len(cols)) + totals.nbytes)
        sent += 9 * (self.n_features + n_blocks)  # each server's share of offsets and allow
        got = n_blocks * 7 * 8 * len(self.open)
        B = p.spec.n_total
        self.levels.append({
            "tree": self.it, "level": self.level, "open": len(self.open), "pushed": self.pushed,
            "psf_sent": sent, "psf_received": got, "whole": p.n_tasks * len(self.open) * B * 24,
        })  # fmt: skip
        self.pushed = 0
        return res

    # -- the finished trees -----------------------------------------------------------------

    def tree_lists(self, lr: float | None = None) -> list[dict[str, list[Any]]]:
        """Per tree, the node arrays workers walk (values scaled by the learning rate)."""
        p = self.plan
        lr = p.learning_rate if lr is None else lr
        out = []
        for k in range(p.K):
            m = self.n_nodes[k]
            out.append({
                "feat": self.f["feat"][k, :m].astype(np.int64).tolist(),
                "tbin": self.f["tbin"][k, :m].astype(np.int64).tolist(),
                "mleft": self.f["mleft"][k, :m].astype(np.int64).tolist(),
                "left": self.f["left"][k, :m].astype(np.int64).tolist(),
                "right": self.f["right"][k, :m].astype(np.int64).tolist(),
                "value": (self.f["value"][k, :m] * lr).tolist(),
            })  # fmt: skip
        return out

    def renew(self, summaries: list[list[Any]]) -> None:
        """Leaf values = weighted medians of the tasks' residual summaries."""
        per: dict[tuple[int, int], tuple[list[float], list[float]]] = {}
        for s in summaries:
            for k, node, v, w in s:
                vv, ww = per.setdefault((int(k), int(node)), ([], []))
                vv.extend(v)
                ww.extend(w)
        for (k, node), (v, w) in per.items():
            va, wa = np.asarray(v), np.asarray(w)
            o = np.argsort(va, kind="stable")
            cw = np.cumsum(wa[o])
            self.f["value"][k, node] = float(va[o][np.searchsorted(cw, 0.5 * cw[-1])])

    def tree_rows(self) -> np.ndarray:
        """``(K, max_nodes * NF)`` rows of the trees array (values scaled)."""
        p = self.plan
        stack = [self.f[k] * (p.learning_rate if k == "value" else 1.0) for k in NODE_FIELDS]
        return np.stack(stack, axis=-1).reshape(p.K, -1)
