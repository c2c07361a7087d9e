"""k-means|| (Bahmani et al., 2012): a scalable k-means++, sampled on the workers.

1. one row drawn uniformly at random is the first candidate;
2. each of ``daskangel.kmeans.init-rounds`` rounds, every partition updates
   its rows' squared distance to the nearest candidate (kept on its worker as
   a future: the rows and distances never travel), and the driver adds the cost
   ``phi``; then each row joins the candidates independently with probability
   ``min(1, l * d^2(x) / phi)`` (``l = daskangel.kmeans.oversampling *
   n_clusters``), drawn on the worker with a seed of ``(seed, round, partition)``
   — only the drawn rows come back;
3. every partition counts the rows nearest to each candidate (the weights);
4. the weighted candidates (about ``l * rounds`` rows) are reduced to ``k``
   centres on the driver with scikit-learn's weighted k-means++ and a few
   weighted Lloyd steps.

The driver sees the candidates and per-partition sums only, never a pass over
the data.

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
from ._predict import assign_local

__all__ = ["kmeans_parallel", "oversample"]


def oversample(dist: np.ndarray, phi: float, ell: float, rng: np.random.Generator) -> np.ndarray:
    """Rows drawn with probability ``min(1, ell * dist / phi)`` (indices, ascending)."""
    if phi <= 0:
        return np.zeros(0, np.int64)
    p = np.minimum(1.0, ell * dist / phi)
    return np.flatnonzero(rng.random(dist.shape[0]) < p)


def _matrix(part: Any, d: int) -> sp.csr_matrix:
    X = part.csr().to_scipy()
    if X.shape[1] > d:
        X = X[:, :d]
    return sp.csr_matrix((X.data, X.indices, X.indptr), shape=(X.shape[0], d))


def _update(part: Any, prev: np.ndarray | None, new: np.ndarray, d: int) -> np.ndarray:
    """Squared distance of each row to the nearest candidate, ``new`` ones included."""
    dist = assign_local(_matrix(part, d), new).dist
    return dist if prev is None else np.minimum(prev, dist)


def _cost(dist: np.ndarray) -> float:
    return float(dist.sum())


def _draw(
    part: Any, dist: np.ndarray, phi: float, ell: float, seed: int, rnd: int, d: int
) -> sp.csr_matrix:
    rng = np.random.default_rng([int(seed) & 0xFFFFFFFF, 911, int(rnd), int(part.index)])
    idx = oversample(dist, phi, ell, rng)
    return _matrix(part, d)[idx].astype(np.float64)


def _weights(part: Any, cands: np.ndarray, d: int) -> np.ndarray:
    lab = assign_local(_matrix(part, d), cands).labels
    return np.bincount(lab, minlength=cands.shape[0]).astype(np.float64)


def _reduce(cands: np.ndarray, w: np.ndarray, k: int, seed: int) -> np.ndarray:
    """``k`` centres from the weighted candidates (k-means++ then weighted Lloyd)."""
    from sklearn.cluster import KMeans as SkKMeans

    keep = w > 0
    if keep.sum() >= k:
        cands, w = cands[keep], w[keep]
    if cands.shape[0] <= k:
        return cands
    km = SkKMeans(n_clusters=k, init="k-means++", n_init=10, random_state=seed & 0x7FFFFFFF)
    km.fit(cands, sample_weight=w)
    return np.asarray(km.cluster_centers_, np.float64)


def kmeans_parallel(ds: Any, stats: DataStats, k: int, d: int, seed: int) -> np.ndarray:
    """``(k, d)`` starting centres by k-means|| (see the module docstring)."""
    client = ds.client
    rounds = max(1, int(config.get("daskangel.kmeans.init-rounds")))
    ell = float(config.get("daskangel.kmeans.oversampling")) * k
    first = np.asarray(sample_rows(ds, stats, 1, seed, d).toarray(), np.float64)
    chosen = [first]
    new = first
    dist: list[Any] = [None] * len(ds.partitions)
    for rnd in range(rounds):
        [nf] = client.scatter([new], broadcast=True)
        dist = [
            client.submit(
                _update, p, prev, nf, d, workers=[w], allow_other_workers=False, pure=False
            )
            for p, prev, w in zip(ds.partitions, dist, ds.workers, strict=True)
        ]
        phi = float(sum(client.gather([client.submit(_cost, f) for f in dist])))
        if phi <= 0:
            break
        draws = [
            client.submit(
                _draw,
                p,
                f,
                phi,
                ell,
                seed,
                rnd,
                d,
                workers=[w],
                allow_other_workers=False,
                pure=False,
            )
            for p, f, w in zip(ds.partitions, dist, ds.workers, strict=True)
        ]
        got = [m for m in client.gather(draws) if m.shape[0]]
        if not got:
            break
        new = np.asarray(sp.vstack(got).toarray(), np.float64)
        chosen.append(new)
    cands = np.unique(np.vstack(chosen), axis=0)
    [cf] = client.scatter([cands], broadcast=True)
    w = np.sum(client.gather(ds.map_partitions(_weights, cf, d)), axis=0)
    return _reduce(cands, w, k, seed)
