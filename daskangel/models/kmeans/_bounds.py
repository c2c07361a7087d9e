"""Lloyd on dense rows with Hamerly's bounds: rows whose nearest centre cannot have moved are skipped.

Each row keeps its label ``a``, an upper bound ``u`` on its (Euclidean)
distance to centre ``a`` and a lower bound ``l`` on its distance to every
other centre (Hamerly, "Making k-means even faster", SDM 2010).  When the
centres move by ``delta_j``, ``u += delta_a`` and ``l -= max_{j != a} delta_j``;
a row with ``u <= max(l, s_a)`` (``s_a``: half the distance from centre ``a``
to its nearest other centre) keeps its label without touching its values.
Otherwise ``u`` is made exact with one dot product, and only if the test still
fails is the row queued: ``daskangel.kmeans.block-rows`` queued rows at a time
are copied into a buffer and assigned by one BLAS product against every
centre, as :func:`~._kernels.assign_dense` does for all rows.

The per-cluster sums and counts are kept by the task and updated only for rows
whose label changed, so an iteration reads the values of the queued rows only.
The labels are those of plain Lloyd (the bounds only skip rows whose nearest
centre provably did not change; floating point ties aside).  The inertia is
``sum ||x||^2 - 2 sum_j c_j . S_j + sum_j n_j ||c_j||^2`` (``S_j``, ``n_j``: the
sums and counts of cluster ``j``), which needs no per-row distance.

Example
-------
>>> import numpy as np
>>> X = np.array([[0.0, 0.0], [1.0, 0.0], [9.0, 9.0]], np.float32)
>>> b = Bounded(X, (X.astype(np.float64) ** 2).sum(1))
>>> out = b.step(np.array([[0.5, 0.0], [9.0, 9.0]]))
>>> out.labels.tolist(), round(out.inertia, 3), out.counts.tolist()
([0, 0, 1], 0.5, [2.0, 1.0])
>>> out = b.step(np.array([[0.5, 0.1], [9.0, 9.0]]))        # every row skipped
>>> out.labels.tolist(), round(out.inertia, 3), int(b.queued)
([0, 0, 1], 0.52, 0)
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from ... import config

__all__ = ["Bounded", "BoundedOut"]


@njit(nogil=True, cache=True)
def _flush(X, rows, nb, Xb, D, CT, cnorm, xnorm, labels, upper, lower, sums, counts):  # type: ignore[no-untyped-def]
    """Assign the ``nb`` queued rows (their values in ``Xb``, or ``X[rows[0]:...]``
    when ``Xb`` is empty: a contiguous run); returns how many changed label."""
    k = CT.shape[1]
    d = X.shape[1]
    Dv = D[:nb]
    if Xb.shape[0] == 0:
        s = rows[0]
        np.dot(X[s : s + nb], CT, Dv)
    else:
        np.dot(Xb[:nb], CT, Dv)
    changed = 0
    for i in range(nb):
        r = rows[i]
        best = np.inf
        second = np.inf
        bj = 0
        for j in range(k):
            v = cnorm[j] - 2.0 * Dv[i, j]
            if v < best:
                second = best
                best = v
                bj = j
            elif v < second:
                second = v
        xn = xnorm[r]
        b2 = xn + best
        s2 = xn + second
        upper[r] = math.sqrt(b2) if b2 > 0.0 else 0.0
        lower[r] = math.sqrt(s2) if s2 > 0.0 else 0.0
        old = labels[r]
        if old != bj:
            changed += 1
            labels[r] = bj
            counts[bj] += 1.0
            for c in range(d):
                sums[bj, c] += X[r, c]
            if old >= 0:
                counts[old] -= 1.0
                for c in range(d):
                    sums[old, c] -= X[r, c]
    return changed


@njit(nogil=True, cache=True)
def full_pass(X, xnorm, CT, cnorm, chunk, labels, upper, lower, sums, counts):  # type: ignore[no-untyped-def]
    """Every row against every centre (labels ``-1``: not yet counted)."""
    n = X.shape[0]
    k = CT.shape[1]
    b = max(1, min(chunk, n))
    D = np.empty((b, k), X.dtype)
    rows = np.empty(b, np.int64)
    none = np.empty((0, X.shape[1]), X.dtype)
    changed = 0
    for s in range(0, n, b):
        m = min(n, s + b) - s
        for i in range(m):
            rows[i] = s + i
        changed += _flush(X, rows, m, none, D, CT, cnorm, xnorm, labels, upper, lower, sums, counts)
    return changed


@njit(nogil=True, cache=True, fastmath={"reassoc", "contract"})  # the dot below vectorised
def bounded_pass(X, xnorm, C, CT, cnorm, drift, half, chunk, labels, upper, lower, sums, counts):  # type: ignore[no-untyped-def]
    """One pruned pass (module docstring); returns ``(queued rows, changed labels)``."""
    n, d = X.shape
    k = CT.shape[1]
    j1 = 0
    for j in range(k):
        if drift[j] > drift[j1]:
            j1 = j
    m1 = drift[j1]
    m2 = 0.0
    for j in range(k):
        if j != j1 and drift[j] > m2:
            m2 = drift[j]
    b = max(1, min(chunk, n))
    D = np.empty((b, k), X.dtype)
    Xb = np.empty((b, d), X.dtype)
    rows = np.empty(b, np.int64)
    nb = 0
    queued = 0
    changed = 0
    for r in range(n):
        a = labels[r]
        u = upper[r] + drift[a]
        low = lower[r] - (m2 if a == j1 else m1)
        lower[r] = low
        bound = low if low > half[a] else half[a]
        if u <= bound:
            upper[r] = u
            continue
        dot = 0.0
        for c in range(d):
            dot += X[r, c] * C[a, c]
        dd = xnorm[r] - 2.0 * dot + cnorm[a]
        u = math.sqrt(dd) if dd > 0.0 else 0.0
        upper[r] = u
        if u <= bound:
            continue
        rows[nb] = r
        Xb[nb, :] = X[r, :]
        nb += 1
        queued += 1
        if nb == b:
            changed += _flush(X, rows, nb, Xb, D, CT, cnorm, xnorm, labels, upper, lower,
                              sums, counts)  # fmt: skip
            nb = 0
    if nb:
        changed += _flush(X, rows, nb, Xb, D, CT, cnorm, xnorm, labels, upper, lower, sums, counts)
    return queued, changed


class BoundedOut:
    """What a task pushes after one bounded pass (the fields of :class:`~._kernels.Assigned`
    that :func:`~._lloyd.task_values` reads, plus the re-seed candidates)."""

    __slots__ = ("counts", "far", "far_dist", "inertia", "labels", "sums")

    def __init__(self, labels: np.ndarray, inertia: float, sums: np.ndarray,
                 counts: np.ndarray, far: np.ndarray, far_dist: np.ndarray) -> None:  # fmt: skip
        self.labels, self.inertia, self.sums, self.counts = labels, inertia, sums, counts
        self.far, self.far_dist = far, far_dist


class Bounded:
    """A task's dense rows with their labels and bounds across Lloyd iterations."""

    def __init__(self, X: np.ndarray, xnorm: np.ndarray) -> None:
        n = X.shape[0]
        self.X, self.xnorm = X, np.asarray(xnorm, np.float64)
        self.labels = np.full(n, -1, np.int32)
        self.upper = np.zeros(n)
        self.lower = np.zeros(n)
        self.sums: np.ndarray | None = None
        self.counts: np.ndarray | None = None
        self.last: np.ndarray | None = None
        self.queued = n
        self.sum_xnorm = float(self.xnorm.sum())

    def step(self, C: np.ndarray, n_far: int = 0) -> BoundedOut:
        """Assign every row to the nearest of ``C`` (k, d); ``n_far`` re-seed candidates."""
        C = np.ascontiguousarray(C, np.float64)
        k, d = C.shape
        CT = np.ascontiguousarray(C.T, dtype=self.X.dtype)
        cnorm = (C * C).sum(axis=1)
        chunk = max(1, int(config.get("daskangel.kmeans.block-rows")))
        if self.last is None or self.sums is None or self.counts is None:
            self.sums, self.counts = np.zeros((k, d)), np.zeros(k)
            full_pass(self.X, self.xnorm, CT, cnorm, chunk, self.labels, self.upper,
                      self.lower, self.sums, self.counts)  # fmt: skip
            self.queued = self.X.shape[0]
        else:
            drift = np.sqrt(((C - self.last) ** 2).sum(axis=1))
            self.queued, _ = bounded_pass(self.X, self.xnorm, C, CT, cnorm, drift, _half_gap(C, cnorm),
                                          chunk, self.labels, self.upper, self.lower, self.sums,
                                          self.counts)  # fmt: skip
        self.last = C
        sums, counts = self.sums.copy(), self.counts.copy()
        inertia = self.sum_xnorm - 2.0 * float((C * sums).sum()) + float(counts @ cnorm)
        far, far_dist = self._farthest(C, cnorm, n_far)
        return BoundedOut(self.labels, max(inertia, 0.0), sums, counts, far, far_dist)

    def _farthest(self, C: np.ndarray, cnorm: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray]:
        """Up to ``m`` rows with the largest upper bounds and their exact squared distances
        (> 0 only)."""
        from ._psfs import farthest

        far = farthest(self.upper, m)
        if not far.size:
            return far, np.zeros(0)
        x = self.X[far].astype(np.float64)
        c = C[self.labels[far]]
        dist = np.maximum(((x - c) ** 2).sum(axis=1), 0.0)
        keep = dist > 0
        return far[keep], dist[keep]


def _half_gap(C: np.ndarray, cnorm: np.ndarray) -> np.ndarray:
    """Half the distance from each centre to its nearest other centre (inf when k = 1)."""
    k = C.shape[0]
    if k < 2:
        return np.full(k, np.inf)
    G = cnorm[:, None] + cnorm[None, :] - 2.0 * (C @ C.T)
    np.fill_diagonal(G, np.inf)
    return 0.5 * np.sqrt(np.maximum(G.min(axis=1), 0.0))
