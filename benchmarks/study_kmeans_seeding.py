"""How far Lloyd ends from scikit-learn's ``KMeans(n_init=3)`` on 20news tf-idf, by seeding.

One-process models of daskangel's seedings, then Lloyd on every row with
scikit-learn from their centres (``tol=1e-4``, daskangel's rule), seeds 0-4;
the inertia is against scikit-learn ``KMeans(n_init=3, random_state=0)``
(17691.4), and ``small`` counts the final clusters of fewer than 20 rows.

Variants (arguments, any number):

* ``par:OVERSAMPLING:ROUNDS`` -- ``init='k-means||'``: a uniform first row,
  ``ROUNDS`` rounds each drawing every row with probability
  ``min(1, l d^2 / phi)`` (``l = OVERSAMPLING * k``), the candidates weighted
  by the rows nearest to them and reduced with scikit-learn's weighted greedy
  k-means++ and Lloyd (``n_init=10``), as ``daskangel.models.kmeans._parallel``;
* ``mix:U:OVERSAMPLING:ROUNDS`` -- the same with ``U`` uniform rows among the
  candidates from the start;
* ``sample:M`` -- ``init='lloyd-sample'``: scikit-learn ``KMeans(n_init=10)``
  on ``M`` uniform rows (``100 k`` by default in daskangel).

Run::

    python benchmarks/study_kmeans_seeding.py par:2:5 par:50:1 mix:1000:2:5 sample:500 sample:2000
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _data import data_root
from bench_kmeans import inertia, read_20news_tfidf

K = 20


def _d2(X: Any, xn: np.ndarray, C: np.ndarray) -> np.ndarray:
    return np.maximum(xn[:, None] - 2 * np.asarray(X @ C.T) + (C * C).sum(1)[None], 0)


def candidates(
    X: Any, xn: np.ndarray, first: np.ndarray, ell: float, rounds: int, rng: Any
) -> tuple[np.ndarray, np.ndarray]:
    """k-means|| candidates from the rows ``first``, with their weights."""
    cands = X[first].toarray()
    dist = _d2(X, xn, cands).min(1)
    for _ in range(rounds):
        p = np.minimum(1, ell * K * dist / dist.sum())
        new = np.flatnonzero(rng.random(X.shape[0]) < p)
        if not new.size:
            break
        N = X[new].toarray()
        cands = np.vstack([cands, N])
        dist = np.minimum(dist, _d2(X, xn, N).min(1))
    w = np.bincount(_d2(X, xn, cands).argmin(1), minlength=cands.shape[0]).astype(float)
    return cands, w


def seeding(X: Any, xn: np.ndarray, spec: str, seed: int) -> np.ndarray:
    from sklearn.cluster import KMeans

    rng = np.random.default_rng(seed)
    kind, *a = spec.split(":")
    if kind == "sample":
        idx = rng.choice(X.shape[0], int(a[0]), replace=False)
        return KMeans(K, n_init=10, random_state=seed).fit(X[idx]).cluster_centers_
    if kind == "par":
        first, ell, rounds = rng.integers(X.shape[0], size=1), float(a[0]), int(a[1])
    elif kind == "mix":
        first = rng.choice(X.shape[0], int(a[0]), replace=False)
        ell, rounds = float(a[1]), int(a[2])
    else:
        raise SystemExit(f"unknown variant {spec!r}")
    cands, w = candidates(X, xn, first, ell, rounds, rng)
    km = KMeans(K, init="k-means++", n_init=10, random_state=seed)
    return km.fit(cands[w > 0], sample_weight=w[w > 0]).cluster_centers_


def main() -> None:
    from sklearn.cluster import KMeans
    from threadpoolctl import threadpool_limits

    X = read_20news_tfidf(data_root())
    if X is None:
        print("20news-bow not found: nothing to do")
        return
    xn = np.asarray(X.multiply(X).sum(1)).ravel()
    with threadpool_limits(2):
        ref = inertia(X, KMeans(K, n_init=3, random_state=0).fit(X).cluster_centers_)
        print(f"scikit-learn KMeans(n_init=3, random_state=0): {ref:.6g}", flush=True)
        for spec in sys.argv[1:] or ["par:2:5", "sample:2000"]:
            got = []
            for seed in range(5):
                t = time.perf_counter()
                km = KMeans(K, init=seeding(X, xn, spec, seed), n_init=1, tol=1e-4).fit(X)
                small = int((np.bincount(km.labels_, minlength=K) < 20).sum())
                got.append(inertia(X, km.cluster_centers_) / ref - 1)
                print(f"  {spec} seed {seed}: {got[-1]:+.2%}, {small} clusters < 20 rows "
                      f"({time.perf_counter() - t:.0f} s)", flush=True)  # fmt: skip
            print(f"{spec}: mean {np.mean(got):+.2%}, worst {max(got):+.2%}", flush=True)


if __name__ == "__main__":
    main()
