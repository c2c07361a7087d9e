"""What one boosting task does with its rows: gradients, histograms, row partitions, margins.

A :class:`RowState` lives for one fit in one task.  It holds the margins of
every row (``(K, n)``: training rows, then validation rows), the gradients and
hessians of the training rows, and per tree of the round the rows ordered by
node (``_hist``).  The leader's commands (``_grower``) drive it:

* :meth:`start_round`: gradients at the current margins, this round's
  ``subsample`` of the rows, every sampled row in the root;
* :meth:`split`: apply the splits of the level above (``[k, node, feature,
  bin, missing_left, left, right]`` rows);
* :meth:`histograms`: the histograms of the nodes to build, side by side as
  the level's column triplets, and the histogram rows they touch;
* :meth:`residuals` (absolute loss): per leaf, a summary of ``y - margin``;
* :meth:`finish`: add the leaf values to the margins (rows in the partition
  by their node, the others by walking the tree) and sum the metrics;
* :meth:`replay` (a task starting at a later round: resumed, or rolled back
  to a snapshot): add the finished rounds' trees to every margin.

Example
-------
>>> st = RowState(plan, rows)                                  # doctest: +SKIP
>>> st.start_round(0); st.histograms([[0, 0, 0]])               # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._binning import DenseBins
from ._hist import (
    add_leaf_values,
    hist_dense,
    hist_sparse,
    split_dense,
    split_sparse,
    walk_dense,
    walk_sparse,
)
from ._losses import N_STATS, eval_sums, gradients, gradients_loss
from ._plan import Plan
from ._rows import Rows
from ._sketch import prune

__all__ = ["RowState"]


class RowState:
    """One task's rows during a fit (see the module docstring)."""

    def __init__(self, plan: Plan, rows: Rows) -> None:
        self.plan = plan
        self.rows = rows
        K, n, nt = plan.K, rows.n, rows.n_train
        self.margin = np.empty((K, n))
        self.margin[:] = np.asarray(plan.baseline, np.float64)[:, None]
        self.g = np.zeros((K, nt))
        self.h = np.zeros((K, nt))
        self.order = np.empty((K, nt), np.int32)
        self.buf = np.empty(nt, np.int32)  # the right rows of a node being cut
        self.start = np.zeros((K, plan.max_nodes), np.int64)
        self.count = np.zeros((K, plan.max_nodes), np.int64)
        self.unsampled = np.zeros(0, np.int64)
        self.tmp = np.zeros((plan.spec.n_total, 3))
        self.val_rows = np.arange(nt, n, dtype=np.int64)
        self.fresh = False  # g, h are the gradients at the current margins (finish made them)

    # -- a round ------------------------------------------------------------------------

    def start_round(self, it: int, index: int) -> list[list[float]]:
        """Gradients, this round's sample, every sampled row in the root; root totals."""
        p, r = self.plan, self.rows
        nt = r.n_train
        if not self.fresh:
            gradients(p.loss, self.margin, r.y, 0, nt, p.delta, self.g, self.h)
        self.fresh = False
        if p.subsample < 1.0:
            rng = np.random.default_rng([int(p.seed) & 0xFFFFFFFF, 104729, int(it), int(index)])
            keep = rng.random(nt) < p.subsample
            sampled = np.flatnonzero(keep).astype(np.int32)
            self.unsampled = np.flatnonzero(~keep).astype(np.int64)
        else:
            sampled = np.arange(nt, dtype=np.int32)
        ns = sampled.shape[0]
        self.ns = ns
        totals = []
        for k in range(p.K):
            self.order[k, :ns] = sampled
            self.start[k, 0] = 0
            self.count[k, 0] = ns
            gk, hk = self.g[k], self.h[k]
            if ns < nt:
                gk, hk = gk[sampled], hk[sampled]
            totals.append([float(gk.sum()), float(hk.sum()), float(ns)])
        return totals

    def split(self, splits: list[list[int]]) -> None:
        """Cut every split node's rows into its children."""
        if not splits:
            return
        a = np.asarray(splits, np.int64).reshape(-1, 7)
        b = self.rows.bins
        for k in range(self.plan.K):
            s = a[a[:, 0] == k]
            if not s.shape[0]:
                continue
            order = self.order[k, : self.ns]
            # contiguous columns: one compiled signature of the split kernels, not two
            c = np.ascontiguousarray(s.T)
            args = (c[1], c[2], c[3], c[4].astype(np.bool_), c[5], c[6])
            if isinstance(b, DenseBins):
                split_dense(b.cols, b.missing, order, self.start[k], self.count[k], *args, self.buf)
            else:
                split_sparse(
                    b.indptr, b.hrows, self.plan.spec.offsets, order, self.start[k],
                    self.count[k], *args, self.buf,
                )  # fmt: skip

    def histograms(self, build: list[list[int]]) -> tuple[np.ndarray, np.ndarray | None]:
        """``(values, rows)``: the built nodes' histograms as column triplets, in
        ``build`` order (``[k, node, column]`` rows); ``rows`` is ``None`` for all
        histogram rows, else the touched ones (``values`` holds only those)."""
        b = self.rows.bins
        B = self.plan.spec.n_total
        out = np.empty((B, 3 * len(build)))
        off = self.plan.spec.offsets
        tmp = self.tmp
        for i, (k, node, _col) in enumerate(build):
            tmp[:] = 0.0
            a = int(self.start[k, node])
            e = a + int(self.count[k, node])
            order = self.order[k]
            if isinstance(b, DenseBins):
                hist_dense(b.codes, b.missing, off, order, a, e, self.g[k], self.h[k], tmp)
            else:
                hist_sparse(b.indptr, b.hrows, order, a, e, self.g[k], self.h[k], tmp)
            out[:, 3 * i : 3 * i + 3] = tmp
        touched = np.flatnonzero(out[:, 2::3].any(axis=1)) if len(build) else np.zeros(0, np.int64)
        if touched.shape[0] >= 0.6 * B:
            return out, None
        return out[touched], touched

    def replay(self, T: np.ndarray) -> None:
        """Add trees ``T`` (``(n_trees, max_nodes, NF)`` rows of the trees array, the
        finished rounds' in order) to every row's margin, as their rounds added them."""
        p, b = self.plan, self.rows.bins
        rows = np.arange(self.rows.n, dtype=np.int64)
        for t in range(T.shape[0]):
            feat, tbin = T[t, :, 0].astype(np.int64), T[t, :, 2].astype(np.int64)
            mleft = T[t, :, 3] > 0.5
            left, right = T[t, :, 4].astype(np.int64), T[t, :, 5].astype(np.int64)
            value = np.ascontiguousarray(T[t, :, 6])
            m = self.margin[t % p.K]
            if isinstance(b, DenseBins):
                walk_dense(b.codes, b.missing, rows, feat, tbin, mleft, left, right, value, m)
            else:
                walk_sparse(
                    b.indptr, b.hrows, p.spec.offsets, rows, feat, tbin, mleft, left, right,
                    value, m,
                )  # fmt: skip
        self.fresh = False

    # -- the end of a round ---------------------------------------------------------------

    def residuals(self, trees: list[dict[str, list[Any]]]) -> list[list[Any]]:
        """Per leaf of the partition's sampled rows: ``[k, node, values, weights]`` of
        a summary of ``y - margin`` (the absolute loss's leaf medians)."""
        out: list[list[Any]] = []
        y = self.rows.y
        for k, t in enumerate(trees):
            feat = np.asarray(t["feat"])
            for node in np.flatnonzero(feat < 0):
                a = int(self.start[k, node])
                rows = self.order[k, a : a + int(self.count[k, node])]
                if rows.shape[0] == 0:
                    continue
                uv, cnt = np.unique(y[rows] - self.margin[k, rows], return_counts=True)
                v, w = prune(uv, cnt.astype(np.float64), self.plan.renew_points)
                out.append([k, int(node), v.tolist(), w.tolist()])
        return out

    def finish(self, trees: list[dict[str, list[Any]]]) -> dict[str, Any]:
        """Add the round's trees to every margin; this task's metric sums after it."""
        p, r = self.plan, self.rows
        b = r.bins
        for k, t in enumerate(trees):
            feat = np.asarray(t["feat"], np.int64)
            tbin = np.asarray(t["tbin"], np.int64)
            mleft = np.asarray(t["mleft"], np.bool_)
            left = np.asarray(t["left"], np.int64)
            right = np.asarray(t["right"], np.int64)
            value = np.asarray(t["value"], np.float64)
            leaves = np.flatnonzero(feat < 0)
            add_leaf_values(
                self.order[k, : self.ns], self.start[k], self.count[k], leaves, value[leaves],
                self.margin[k],
            )  # fmt: skip
            for rows in (self.unsampled, self.val_rows):
                if not rows.shape[0]:
                    continue
                if isinstance(b, DenseBins):
                    walk_dense(
                        b.codes, b.missing, rows, feat, tbin, mleft, left, right, value,
                        self.margin[k],
                    )  # fmt: skip
                else:
                    walk_sparse(
                        b.indptr, b.hrows, p.spec.offsets, rows, feat, tbin, mleft, left,
                        right, value, self.margin[k],
                    )  # fmt: skip
        nt = r.n_train
        # the next round's gradients with the loss: one pass, one exp a row
        train = gradients_loss(p.loss, self.margin, r.y, 0, nt, p.delta, self.g, self.h)
        self.fresh = True
        stats = np.zeros(N_STATS)
        neg = np.zeros(p.nbins)
        pos = np.zeros(p.nbins)
        if r.n > nt:
            eval_sums(p.loss, self.margin, r.y, nt, r.n, p.delta, p.nbins, stats, neg, pos)
        out: dict[str, Any] = {"train": [float(train), float(nt)], "stats": stats.tolist()}
        if p.loss == 0 and r.n > nt:
            nz = np.flatnonzero(neg + pos)
            out["auc"] = [nz.tolist(), neg[nz].tolist(), pos[nz].tolist()]
        return out
