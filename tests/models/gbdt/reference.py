"""A single-process GBDT in plain numpy: the reference the distributed fit must equal.

Same bins (one per distinct value, cut half-way, as the sketch gives for at
most ``max_bins`` distinct values), same gain, constraints, missing handling
and tie rules (first feature, first bin, missing-right first) as ``_psfs``.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def cuts_of(X: np.ndarray) -> list[np.ndarray]:
    out = []
    for f in range(X.shape[1]):
        v = np.unique(X[~np.isnan(X[:, f]), f])
        out.append(v[:-1] + (v[1:] - v[:-1]) / 2)
    return out


def _best(b: np.ndarray, g: np.ndarray, h: np.ndarray, nb: list[int], p: dict[str, Any]) -> Any:
    G, H, C = g.sum(), h.sum(), float(len(g))
    lam, mcw, msl = p["lam"], p["mcw"], p["msl"]
    parent = G * G / (H + lam)
    best = (0.0, None)
    for f in range(b.shape[1]):
        miss = b[:, f] < 0
        col = np.where(miss, 0, b[:, f])
        hg = np.bincount(col[~miss], g[~miss], nb[f])
        hh = np.bincount(col[~miss], h[~miss], nb[f])
        hc = np.bincount(col[~miss], None, nb[f]).astype(float)
        mg, mh, mc = G - hg.sum(), H - hh.sum(), C - hc.sum()
        has = mc >= 0.5
        lg = lh = lc = 0.0
        for t in range(nb[f]):
            lg, lh, lc = lg + hg[t], lh + hh[t], lc + hc[t]
            for ml in (0, 1) if has else (0,):
                GL, HL, CL = lg + ml * mg, lh + ml * mh, lc + ml * mc
                if msl > CL or msl > C - CL or mcw > HL or mcw > H - HL:
                    continue
                gain = GL * GL / (HL + lam) + (G - GL) ** 2 / (H - HL + lam) - parent
                if gain > best[0]:
                    mleft = ml if has else int(lc >= C - lc)
                    best = (gain, (f, t, mleft))
    return best


def fit(X: np.ndarray, y: np.ndarray, *, n_estimators: int, lr: float, max_depth: int,
        msl: int = 20, mcw: float = 1e-3, lam: float = 0.0) -> tuple[list[Any], float, list[np.ndarray]]:  # fmt: skip
    """Binary log-loss boosting; returns (trees, baseline, cuts)."""
    cuts = cuts_of(X)
    b = np.full(X.shape, -1, np.int64)
    for f, c in enumerate(cuts):
        ok = ~np.isnan(X[:, f])
        b[ok, f] = np.searchsorted(c, X[ok, f], side="left")
    nb = [len(c) + 1 for c in cuts]
    prior = y.mean()
    base = float(np.log(prior / (1 - prior)))
    m = np.full(len(y), base)
    p = {"lam": lam, "mcw": mcw, "msl": msl}
    trees = []
    for _ in range(n_estimators):
        pr = 1 / (1 + np.exp(-m))
        g, h = pr - y, np.maximum(pr * (1 - pr), 1e-16)
        nodes: list[dict[str, Any]] = [{"rows": np.arange(len(y)), "depth": 0}]
        level = [0]
        while level:
            nxt = []
            for i in level:
                nd = nodes[i]
                r = nd["rows"]
                if nd["depth"] >= max_depth or len(r) < 2 * msl or h[r].sum() < 2 * mcw:
                    continue
                gain, sp = _best(b[r], g[r], h[r], nb, p)
                if sp is None or gain <= 1e-12:
                    continue
                f, t, ml = sp
                col = b[r, f]
                go = np.where(col < 0, bool(ml), col <= t)
                nd.update(feat=f, thr=cuts[f][t] if t < len(cuts[f]) else np.inf, ml=ml,
                          left=len(nodes), right=len(nodes) + 1)  # fmt: skip
                for part in (r[go], r[~go]):
                    nodes.append({"rows": part, "depth": nd["depth"] + 1})
                nxt += [nd["left"], nd["right"]]
            level = nxt
        for nd in nodes:
            if "feat" not in nd:
                r = nd["rows"]
                nd["value"] = lr * -g[r].sum() / (h[r].sum() + lam)
                m[r] += nd["value"]
        trees.append(nodes)
    return trees, base, cuts


def predict(trees: list[Any], base: float, X: np.ndarray) -> np.ndarray:
    out = np.full(X.shape[0], base)
    for nodes in trees:
        for r in range(X.shape[0]):
            n = nodes[0]
            while "feat" in n:
                x = X[r, n["feat"]]
                go = bool(n["ml"]) if np.isnan(x) else x <= n["thr"]
                n = nodes[n["left"] if go else n["right"]]
            out[r] += n["value"]
    return out
