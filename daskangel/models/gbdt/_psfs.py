"""The PS functions of the GBDT: merging the sketches, and phase two of split finding.

* :class:`MergeSketches` runs on the sketch array (sparse, one row per feature,
  every task's summary points side by side as ``value, weight`` pairs): each
  server merges the summaries of its features and returns only their cut
  points (``_sketch.cuts_from_points``).
* :class:`FindSplits` runs on the histogram array (one row per bin, rows cut on
  feature edges so a server holds whole features; a level's node slots are
  column triplets ``g, h, count``).  Each server rebuilds every open node's
  histogram of its features (a built node is one slot; a sibling's is its
  parent's minus the built one, by a signed sum of slots), derives the missing
  values of each feature from the node's totals, scans every cut with the
  missing values sent left and right, and returns only the best
  ``(gain, feature, bin, missing-left, G_left, H_left, n_left)`` per node.  The
  caller keeps the best over servers (ties: the smaller feature).

The gain of a split is ``G_L^2 / (H_L + lambda) + G_R^2 / (H_R + lambda) -
G^2 / (H + lambda)``; a side with fewer than ``min_samples_leaf`` rows or less
than ``min_child_weight`` hessian is not a candidate.  When a node has no
missing value of a feature, unseen missing values go to the side with more
rows.

Example
-------
>>> import numpy as np
>>> D = np.array([[-2.0, 2.0, 2.0], [2.0, 2.0, 2.0]])  # one feature, two bins
>>> best = scan_block(D, np.array([0, 2]), np.ones(1, np.uint8), np.array([0, 1]),
...                   np.array([0]), np.array([1.0]), np.array([[0.0, 4.0, 4.0]]), 0.0, 0.0, 1.0)
>>> best[0].tolist(), best[2].tolist()
([4.0], [0])
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
from numba import njit

from ...ops import GetFunc
from ._sketch import cuts_from_points

__all__ = ["FindSplits", "MergeSketches", "scan_block"]


@njit(nogil=True, cache=True)
def scan_block(D, foff, allow, tptr, tcol, tsign, tot, lam, mcw, msl):  # type: ignore[no-untyped-def]
    """Best split per node over the features of one block (see the module docstring).

    ``D``: the block (bins x slot columns); feature ``i`` of the block owns rows
    ``foff[i] .. foff[i+1]-1``.  Node ``j``'s histogram is ``sum(tsign[t] *
    D[:, tcol[t]:tcol[t]+3])`` over its terms ``tptr[j] .. tptr[j+1]-1``.
    Returns ``(gain, local feature, bin, missing_left, GL, HL, CL)`` arrays.
    """
    n_nodes = tot.shape[0]
    nr = D.shape[0]
    nf = foff.shape[0] - 1
    out_gain = np.full(n_nodes, -np.inf)
    out_f = np.full(n_nodes, -1, np.int64)
    out_b = np.zeros(n_nodes, np.int64)
    out_ml = np.zeros(n_nodes, np.int64)
    out_gl = np.zeros(n_nodes)
    out_hl = np.zeros(n_nodes)
    out_cl = np.zeros(n_nodes)
    hg = np.empty(nr)
    hh = np.empty(nr)
    hc = np.empty(nr)
    for j in range(n_nodes):
        G = tot[j, 0]
        H = tot[j, 1]
        C = tot[j, 2]
        hg[:] = 0.0
        hh[:] = 0.0
        hc[:] = 0.0
        for t in range(tptr[j], tptr[j + 1]):
            c = tcol[t]
            s = tsign[t]
            for r in range(nr):
                hg[r] += s * D[r, c]
                hh[r] += s * D[r, c + 1]
                hc[r] += s * D[r, c + 2]
        parent = G * G / (H + lam)
        best = 0.0
        for i in range(nf):
            if not allow[i]:
                continue
            a = foff[i]
            b = foff[i + 1]
            if b <= a:
                continue
            sg = 0.0
            sh = 0.0
            sc = 0.0
            for r in range(a, b):
                sg += hg[r]
                sh += hh[r]
                sc += hc[r]
            mg = G - sg
            mh = H - sh
            mc = C - sc
            has_missing = mc >= 0.5
            if not has_missing:
                mg = 0.0
                mh = 0.0
                mc = 0.0
            lg = 0.0
            lh = 0.0
            lc = 0.0
            for r in range(a, b):
                lg += hg[r]
                lh += hh[r]
                lc += hc[r]
                for ml in range(2):
                    if ml == 1 and not has_missing:
                        break
                    GL = lg + ml * mg
                    HL = lh + ml * mh
                    CL = lc + ml * mc
                    CR = C - CL
                    HR = H - HL
                    if msl > CL or msl > CR or mcw > HL or mcw > HR:
                        continue
                    GR = G - GL
                    gain = GL * GL / (HL + lam) + GR * GR / (HR + lam) - parent
                    if gain > best:
                        best = gain
                        out_gain[j] = gain
                        out_f[j] = i
                        out_b[j] = r - a
                        out_ml[j] = ml if has_missing else (1 if lc >= C - lc else 0)
                        out_gl[j] = GL
                        out_hl[j] = HL
                        out_cl[j] = CL
    return out_gain, out_f, out_b, out_ml, out_gl, out_hl, out_cl


_FIELDS = ("gain", "feature", "bin", "missing_left", "g_left", "h_left", "n_left")


@dataclass(frozen=True, eq=False)
class FindSplits(GetFunc):
    """Best split of every open node, found where the histograms are (module docstring).

    ``offsets`` (histogram rows of each feature) and ``allow`` (features this
    tree may use) stay on the caller: each server is sent only its features'
    share (:meth:`split`).  Result: a dict of ``(n_nodes,)`` arrays named
    ``gain, feature, bin, missing_left, g_left, h_left, n_left`` (feature -1
    and gain ``-inf``: no valid split).
    """

    term_ptr: np.ndarray
    term_col: np.ndarray
    term_sign: np.ndarray
    totals: np.ndarray  # (n_nodes, 3): G, H, count
    reg_lambda: float = 0.0
    min_child_weight: float = 1e-3
    min_samples_leaf: float = 20.0
    offsets: np.ndarray | None = field(default=None, repr=False)
    allow: np.ndarray | None = field(default=None, repr=False)

    _local: ClassVar[tuple[str, ...]] = ("offsets", "allow")

    def params(self) -> dict[str, Any]:
        return {k: v for k, v in super().params().items() if k not in self._local}

    def split(self, metas: list[Any]) -> dict[int, dict[str, Any]]:
        assert self.offsets is not None
        off = np.asarray(self.offsets, np.int64)
        lay = metas[0].layout
        out: dict[int, dict[str, Any]] = {}
        for b in range(lay.n_blocks):
            r0, r1 = lay.block_rows(b)
            fa = int(np.searchsorted(off, r0, side="left"))
            fb = int(np.searchsorted(off, r1, side="left"))
            allow = (
                np.ones(fb - fa, np.uint8)
                if self.allow is None
                else np.asarray(self.allow[fa:fb], np.uint8)
            )
            out[b] = {"f0": fa, "foff": off[fa : fb + 1] - r0, "allow": allow}
        return out

    def partition_get(self, *parts: Any, **params: Any) -> dict[str, np.ndarray]:
        p = parts[0]
        res = scan_block(
            p.array, np.asarray(params["foff"], np.int64), np.asarray(params["allow"], np.uint8),
            np.asarray(self.term_ptr, np.int64), np.asarray(self.term_col, np.int64),
            np.asarray(self.term_sign, np.float64), np.asarray(self.totals, np.float64),
            float(self.reg_lambda), float(self.min_child_weight), float(self.min_samples_leaf),
        )  # fmt: skip
        out = dict(zip(_FIELDS, res, strict=True))
        out["feature"] = np.where(out["feature"] >= 0, out["feature"] + int(params["f0"]), -1)
        return out

    def merge(self, partials: dict[int, Any], metas: list[Any]) -> dict[str, np.ndarray]:
        n = self.totals.shape[0]
        best = {k: np.zeros(n) for k in _FIELDS}
        best["gain"][:] = -np.inf
        best["feature"] = np.full(n, -1, np.int64)
        for b in sorted(partials):
            r = partials[b]
            g = np.asarray(r["gain"])
            f = np.asarray(r["feature"])
            better = (g > best["gain"]) | (
                (g == best["gain"]) & (f >= 0) & ((best["feature"] < 0) | (f < best["feature"]))
            )
            for k in _FIELDS:
                best[k] = np.where(better, np.asarray(r[k]), best[k])
        for k in ("feature", "bin", "missing_left"):
            best[k] = best[k].astype(np.int64)
        return best


@dataclass(frozen=True, eq=False)
class MergeSketches(GetFunc):
    """Every feature's cut points from the tasks' summaries (module docstring).

    The sketch array is ``(n_features, n_tasks * 2 * points)``: task ``t``'s
    point ``i`` of feature ``f`` is ``(value, weight)`` at columns ``2 (t *
    points + i)`` and the next.  Result: ``(n_bins, cut_ptr, cuts)`` of all
    features.
    """

    max_bins: int = 255

    def partition_get(self, *parts: Any, **params: Any) -> dict[str, Any]:
        p = parts[0]
        r, c, v = p.entries()
        keys = np.asarray(p.keys)
        is_w = (c % 2) == 1
        wk = keys[is_w]
        pos = np.searchsorted(keys, wk - 1)
        pos_ok = np.minimum(pos, max(len(keys) - 1, 0))
        found = (pos < len(keys)) & (keys[pos_ok] == wk - 1) if len(keys) else np.zeros(0, bool)
        vals = np.where(found, np.asarray(v, np.float64)[pos_ok], 0.0) if len(keys) else wk * 0.0
        feat = r[is_w].astype(np.int64)
        wts = np.asarray(v, np.float64)[is_w]
        order = np.lexsort((vals, feat))
        nb, ptr, cuts = cuts_from_points(
            feat[order], vals[order], wts[order], p.shape[0], int(self.max_bins)
        )
        return {"row0": p.row0, "n_bins": nb, "cut_ptr": ptr, "cuts": cuts}

    def merge(self, partials: dict[int, Any], metas: list[Any]) -> Any:
        F = metas[0].shape[0]
        n_bins = np.zeros(F, np.int64)
        chunks: list[tuple[int, np.ndarray, np.ndarray]] = []
        for part in partials.values():
            r0 = int(part["row0"])
            nb = np.asarray(part["n_bins"], np.int64)
            n_bins[r0 : r0 + nb.shape[0]] = nb
            chunks.append((r0, np.asarray(part["cut_ptr"]), np.asarray(part["cuts"])))
        chunks.sort(key=lambda t: t[0])
        counts = np.zeros(F, np.int64)
        for r0, ptr, _ in chunks:
            counts[r0 : r0 + ptr.shape[0] - 1] = np.diff(ptr)
        cut_ptr = np.zeros(F + 1, np.int64)
        np.cumsum(counts, out=cut_ptr[1:])
        cuts = np.concatenate([c for _, _, c in chunks]) if chunks else np.zeros(0)
        return n_bins, cut_ptr, cuts
