"""How far Lloyd ends from scikit-learn's ``KMeans(n_init=3)`` on 20news tf-idf, by seeding.

A single-process model of daskangel's ``init='k-means||'`` (the same steps as
``daskangel.models.kmeans._parallel``: a uniform first row, ``rounds`` rounds
each drawing every row with probability ``min(1, ell * d^2 / phi)``, the
candidates weighted by the rows nearest to them, reduced to ``k`` with
scikit-learn's weighted k-means++ and Lloyd, ``n_init=10``), then Lloyd on every
row with scikit-learn from those centres (``tol=1e-4``, as daskangel's rule),
for seeds 0-3; and scikit-learn's own ``KMeans(n_init=1)`` for seeds 0-3.  The
inertia is against scikit-learn ``KMeans(n_init=3, random_state=0)``.

Run::

    python benchmarks/study_kmeans_seeding.py 2:5 10:5 20:5   # oversampling:rounds ...
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


def kmeans_parallel(X: Any, xn: np.ndarray, k: int, ell: float, rounds: int, seed: int) -> Any:
    from sklearn.cluster import KMeans

    def d2(C: np.ndarray) -> np.ndarray:
        return np.maximum(xn[:, None] - 2 * np.asarray(X @ C.T) + (C * C).sum(1)[None], 0)

    rng = np.random.default_rng(seed)
    cands = X[rng.integers(X.shape[0], size=1)].toarray()
    dist = d2(cands).min(1)
    for _ in range(rounds):
        new = np.flatnonzero(rng.random(X.shape[0]) < np.minimum(1, ell * k * dist / dist.sum()))
        if not new.size:
            break
        N = X[new].toarray()
        cands = np.vstack([cands, N])
        dist = np.minimum(dist, d2(N).min(1))
    w = np.bincount(d2(cands).argmin(1), minlength=cands.shape[0]).astype(float)
    km = KMeans(k, init="k-means++", n_init=10, random_state=seed)
    return km.fit(cands[w > 0], sample_weight=w[w > 0]).cluster_centers_


def main() -> None:
    from sklearn.cluster import KMeans
    from threadpoolctl import threadpool_limits

    X = read_20news_tfidf(data_root())
    if X is None:
        print("20news-bow not found: nothing to do")
        return
    k, xn = 20, np.asarray(X.multiply(X).sum(1)).ravel()
    with threadpool_limits(2):
        ref = inertia(X, KMeans(k, n_init=3, random_state=0).fit(X).cluster_centers_)
        print(f"scikit-learn KMeans(n_init=3, random_state=0): {ref:.6g}", flush=True)
        runs: list[tuple[str, float, int]] = [("scikit-learn k-means++ n_init=1", 0.0, 0)]
        for spec in sys.argv[1:] or ["2:5"]:
            a, b = spec.split(":")
            runs.append((f"k-means|| oversampling={a} rounds={b}", float(a), int(b)))
        for name, ell, rounds in runs:
            got = []
            for seed in range(4):
                t = time.perf_counter()
                if not rounds:
                    C = KMeans(k, n_init=1, random_state=seed).fit(X).cluster_centers_
                else:
                    C0 = kmeans_parallel(X, xn, k, ell, rounds, seed)
                    C = KMeans(k, init=C0, n_init=1, tol=1e-4).fit(X).cluster_centers_
                got.append(inertia(X, C) / ref - 1)
                print(f"  {name} seed {seed}: {got[-1]:+.2%} ({time.perf_counter() - t:.0f} s)",
                      flush=True)  # fmt: skip
            print(f"{name}: mean {np.mean(got):+.2%}, best {min(got):+.2%}", flush=True)


if __name__ == "__main__":
    main()
