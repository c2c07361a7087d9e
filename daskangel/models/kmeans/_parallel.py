"""k-means|| (Bahmani et al., 2012): a scalable k-means++, sampled on the workers.

1. one row drawn uniformly at random is the first candidate;
2. each of ``daskangel.kmeans.init-rounds`` rounds, every partition updates
   its rows' squared distance to the nearest candidate (kept on its worker as
   a future: the rows and distances never travel) and returns its cost; the
   driver adds them up to ``phi``; then each row joins the candidates
   independently with probability ``min(1, l * d^2(x) / phi)`` (``l =
   daskangel.kmeans.oversampling * n_clusters``), drawn on the worker with a
   seed of ``(seed, round, partition)`` — only the drawn rows come back, as CSR;
3. every partition counts the rows nearest to each candidate (the weights);
4. the weighted candidates (about ``l * rounds`` rows) are reduced to ``k``
   centres on the driver with scikit-learn's weighted k-means++ and a few
   weighted Lloyd steps.

A round is two round trips to the workers (the costs, then the draws): the new
candidates travel inside the next round's tasks, and the rows are the
partition's prepared rows (:mod:`._rows`, made once and kept for the Lloyd
iterations that follow), assigned by the same compiled kernels.  The driver
sees the candidates and per-partition sums only, never a pass over the data.

Example
-------
>>> import numpy as np
>>> oversample(np.array([0.0, 4.0, 4.0]), 8.0, 1.0, np.random.default_rng(0)).tolist()
[1, 2]
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from ... import config
from ._init import DataStats, sample_rows
from ._rows import TaskRows, rows_of

__all__ = ["kmeans_parallel", "oversample"]


def oversample(dist: np.ndarray, phi: float, ell: float, rng: np.random.Generator) -> np.ndarray:
    """Rows drawn with probability ``min(1, ell * dist / phi)`` (indices, ascending)."""
    if phi <= 0:
        return np.zeros(0, np.int64)
    p = np.minimum(1.0, ell * dist / phi)
    return np.flatnonzero(rng.random(dist.shape[0]) < p)


def _local(rows: TaskRows, C: sp.csr_matrix) -> tuple[np.ndarray, np.ndarray | None]:
    """Candidates ``C`` (CSR over every feature) on the columns the rows use, and
    their norms over every feature when that is not all of them."""
    if rows.all_columns:
        return np.asarray(C.toarray(), np.float64), None
    norms = np.asarray(C.multiply(C).sum(axis=1), np.float64).ravel()
    return np.asarray(C[:, rows.keys].toarray(), np.float64), norms


def _update(part: Any, prev: np.ndarray | None, new: sp.csr_matrix, d: int) -> np.ndarray:
    """Squared distance of each row to the nearest candidate, ``new`` ones included."""
    rows = rows_of(part, d)
    C, norms = _local(rows, new)
    dist = rows.assign(C, False, norms).dist
    return dist if prev is None else np.minimum(prev, dist)


def _cost(dist: np.ndarray) -> float:
    return float(dist.sum())


def _draw(
    part: Any, dist: np.ndarray, phi: float, ell: float, seed: int, rnd: int, d: int
) -> sp.csr_matrix:
    """The rows drawn this round, as CSR over every feature (float64)."""
    rng = np.random.default_rng([int(seed) & 0xFFFFFFFF, 911, int(rnd), int(part.index)])
    sub = rows_of(part, d).take(oversample(dist, phi, ell, rng))
    if sub.dense is not None:
        M = sp.csr_matrix(sub.dense.astype(np.float64))
        return sp.csr_matrix((M.data, M.indices, M.indptr), shape=(sub.n, d))
    cols = sub.keys[sub.indices] if sub.indices.size else np.zeros(0, np.int64)
    M = sp.csr_matrix((sub.data.astype(np.float64), cols, sub.indptr), shape=(sub.n, d))
    M.sort_indices()
    return M


def _weights(part: Any, cands: sp.csr_matrix, d: int) -> np.ndarray:
    rows = rows_of(part, d)
    C, norms = _local(rows, cands)
    lab = rows.assign(C, False, norms).labels
    return np.bincount(lab, minlength=cands.shape[0]).astype(np.float64)


def _reduce(cands: sp.csr_matrix, w: np.ndarray, k: int, seed: int) -> np.ndarray:
    """``k`` centres from the weighted candidates (k-means++ then weighted Lloyd)."""
    from sklearn.cluster import KMeans as SkKMeans

    keep = w > 0
    if keep.sum() >= k:
        cands, w = cands[keep], w[keep]
    if cands.shape[0] <= k:
        return np.asarray(cands.toarray(), np.float64)[:k]
    km = SkKMeans(n_clusters=k, init="k-means++", n_init=10, random_state=seed & 0x7FFFFFFF)
    km.fit(cands, sample_weight=w)
    return np.asarray(km.cluster_centers_, np.float64)


def kmeans_parallel(ds: Any, stats: DataStats, k: int, d: int, seed: int) -> np.ndarray:
    """``(k, d)`` starting centres by k-means|| (see the module docstring)."""
    client = ds.client
    rounds = max(1, int(config.get("daskangel.kmeans.init-rounds")))
    ell = float(config.get("daskangel.kmeans.oversampling")) * k
    pin = {"allow_other_workers": False, "pure": False}
    where = list(zip(ds.partitions, ds.workers, strict=True))
    new = sp.csr_matrix(sample_rows(ds, stats, 1, seed, d), dtype=np.float64)
    chosen = [new]
    dist: list[Any] = [None] * len(where)
    for rnd in range(rounds):
        dist = [
            client.submit(_update, p, prev, new, d, workers=[w], **pin)
            for (p, w), prev in zip(where, dist, strict=True)
        ]
        costs = [
            client.submit(_cost, f, workers=[w], **pin)
            for f, (_p, w) in zip(dist, where, strict=True)
        ]
        phi = float(sum(client.gather(costs)))
        if phi <= 0:
            break
        draws = [
            client.submit(_draw, p, f, phi, ell, seed, rnd, d, workers=[w], **pin)
            for (p, w), f in zip(where, dist, strict=True)
        ]
        got = [m for m in client.gather(draws) if m.shape[0]]
        if not got:
            break
        new = sp.vstack(got).tocsr()
        chosen.append(new)
    cands = sp.vstack(chosen).tocsr()
    if cands.shape[0] < k:  # very few distinct rows: top up with a uniform sample
        extra = sample_rows(ds, stats, k, seed + 1, d)
        cands = sp.vstack([cands, sp.csr_matrix(extra, dtype=np.float64)]).tocsr()
    w = np.sum(client.gather(ds.map_partitions(_weights, cands, d)), axis=0)
    return _reduce(cands, w, k, seed)
