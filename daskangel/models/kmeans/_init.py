"""Starting centres, and the data's statistics, taken on the workers holding the rows.

* :func:`data_stats`: rows, column sums and ``sum ||x||^2`` of every partition,
  added up: the mean per-feature variance that scales ``tol`` (as scikit-learn
  does) and the row count checked against ``n_clusters``;
* :func:`sample_rows`: a seeded uniform sample of rows without replacement,
  each partition sending only its share (the client never reads the data);
* :func:`initial_centres`: ``init='random'`` (``k`` distinct sampled rows),
  ``'k-means++'`` (scikit-learn's greedy k-means++ on a sample of at most
  ``daskangel.kmeans.init-sample`` rows), ``'lloyd-sample'`` (k-means on a
  uniform sample, below) or a given ``(k, d)`` array.

``'lloyd-sample'`` (the default): a seeded uniform sample of
``daskangel.kmeans.init-sample-per-cluster`` rows per cluster (at most
``init-sample``) comes to the driver and scikit-learn's ``KMeans`` (greedy
k-means++, ``n_init=10``) clusters it; the centres of its best run start
Lloyd's iterations on every row.  Each centre is then the mean of about a
hundred rows, not one row: on l2-normalised tf-idf (20news) the seeds that
k-means++ and k-means|| pick by D^2 sampling are mostly isolated documents,
which stay clusters of 1-10 rows while one cluster takes half the rows (Lloyd
does not leave that minimum: +1.1 to +1.8 % inertia over scikit-learn
``KMeans(n_init=3)``'s best seed, against +0.0 to +0.2 % from a sample's
centres; ``benchmarks/RESULTS.md``).

Example
-------
>>> import numpy as np
>>> take_share(np.array([0, 3, 5, 9]), np.array([0, 4, 10]), 1).tolist()
[1, 5]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from ... import config
from ...errors import InvalidArgumentError
from ._params import INITS
from ._rows import part_matrix

__all__ = [
    "DataStats",
    "data_stats",
    "initial_centres",
    "sample_lloyd",
    "sample_rows",
    "take_share",
]


@dataclass(frozen=True, slots=True)
class DataStats:
    """Rows per partition and the mean per-feature variance of the data."""

    rows: tuple[int, ...]
    mean_variance: float

    @property
    def n(self) -> int:
        return int(sum(self.rows))


def _stats(part: Any, d: int) -> tuple[int, np.ndarray, float]:
    X = part_matrix(part, d)
    n = int(X.shape[0])
    colsum, sq, finite = np.zeros(d), 0.0, True
    blocks: Any
    if sp.issparse(X):
        blocks = [np.asarray(X.data, np.float64)]
        colsum = np.asarray(X.sum(axis=0), np.float64).ravel()
    else:  # float64 a block of rows at a time: no full-size temporary
        blocks = (np.asarray(X[s : s + 65536], np.float64) for s in range(0, n, 65536))
    for B in blocks:
        finite = finite and bool(np.isfinite(B).all())
        sq += float(np.vdot(B, B))
        if B.ndim == 2:
            colsum += B.sum(axis=0)
    if not finite:
        raise InvalidArgumentError(
            f"X: expected finite values (KMeans needs finite input), got NaN or infinite "
            f"values in partition {part.index}"
        )
    return n, colsum, sq


def data_stats(ds: Any, d: int) -> DataStats:
    """Statistics of a persisted Dataset (computed on its workers)."""
    parts = ds.client.gather(ds.map_partitions(_stats, d)) if ds.partitions else []
    rows = tuple(int(p[0]) for p in parts)
    n = sum(rows)
    if n == 0:
        return DataStats(rows, 0.0)
    colsum = np.sum([p[1] for p in parts], axis=0)
    sq = float(sum(p[2] for p in parts))
    mean = colsum / n
    var = max(sq / n - float(mean @ mean), 0.0) / max(d, 1)
    return DataStats(rows, var)


def take_share(ids: np.ndarray, bounds: np.ndarray, index: int) -> np.ndarray:
    """The global row ids of ``ids`` (sorted) inside partition ``index``, made local."""
    lo, hi = int(bounds[index]), int(bounds[index + 1])
    a, b = np.searchsorted(ids, [lo, hi])
    return ids[a:b] - lo


def _rows(part: Any, ids: np.ndarray, bounds: np.ndarray, d: int) -> Any:
    local = take_share(ids, bounds, int(part.index))
    X = part_matrix(part, d)
    return sp.csr_matrix(X[local], dtype=np.float64)


def sample_rows(ds: Any, stats: DataStats, size: int, seed: int, d: int) -> sp.csr_matrix:
    """``size`` distinct rows drawn uniformly (seeded), as one CSR matrix."""
    n = stats.n
    size = min(int(size), n)
    ids = np.sort(
        np.random.default_rng([int(seed) & 0xFFFFFFFF, 4231]).choice(n, size, replace=False)
    )
    bounds = np.concatenate([[0], np.cumsum(stats.rows)])
    blocks = [b for b in ds.client.gather(ds.map_partitions(_rows, ids, bounds, d)) if b.shape[0]]
    if not blocks:
        return sp.csr_matrix((0, d))
    M = sp.vstack(blocks).tocsr()
    # back to the sampled order (partition order is id order; shuffle with the seed)
    perm = np.random.default_rng([int(seed) & 0xFFFFFFFF, 4232]).permutation(M.shape[0])
    return M[perm]


def check_init_array(init: Any, k: int, d: int) -> np.ndarray:
    """A given ``init`` as a ``(k, d)`` float64 array, or a clear error."""
    arr = np.asarray(init, dtype=np.float64) if not sp.issparse(init) else init.toarray()
    if arr.ndim != 2 or arr.shape != (k, d):
        raise InvalidArgumentError(
            f"init: expected an array of initial centres of shape (n_clusters, n_features) = "
            f"({k}, {d}), got shape {arr.shape}"
        )
    if not np.isfinite(arr).all():
        raise InvalidArgumentError(
            f"init: expected finite initial centres, got {int((~np.isfinite(arr)).sum())} NaN "
            "or infinite values"
        )
    return np.array(arr, dtype=np.float64)


def initial_centres(init: Any, ds: Any, stats: DataStats, k: int, d: int, seed: int) -> np.ndarray:
    """The ``(k, d)`` starting centres (see the module docstring)."""
    if not isinstance(init, str):
        return check_init_array(init, k, d)
    if init == "random":
        return np.asarray(sample_rows(ds, stats, k, seed, d).toarray(), np.float64)
    if init == "lloyd-sample":
        return sample_lloyd(ds, stats, k, d, seed)
    if init == "k-means++":
        from sklearn.cluster import kmeans_plusplus

        size = max(k, int(config.get("daskangel.kmeans.init-sample")))
        S = sample_rows(ds, stats, size, seed, d)
        centres, _ = kmeans_plusplus(S, k, random_state=int(seed) & 0x7FFFFFFF)
        return np.asarray(centres.toarray() if sp.issparse(centres) else centres, np.float64)
    raise InvalidArgumentError(
        f"init: expected one of {list(INITS)} or an array of shape (n_clusters, n_features), "
        f"got {init!r}"
    )


def sample_lloyd(ds: Any, stats: DataStats, k: int, d: int, seed: int) -> np.ndarray:
    """``init='lloyd-sample'``: the centres of k-means on a seeded uniform sample
    (see the module docstring)."""
    from sklearn.cluster import KMeans as SkKMeans

    per = max(1, int(config.get("daskangel.kmeans.init-sample-per-cluster")))
    size = max(k, min(per * k, int(config.get("daskangel.kmeans.init-sample"))))
    S: Any = sample_rows(ds, stats, size, seed, d)
    if S.nnz >= float(config.get("daskangel.kmeans.dense-density")) * S.shape[0] * d:
        S = S.toarray()  # dense rows: scikit-learn's dense kernels
    km = SkKMeans(n_clusters=k, init="k-means++", n_init=10, random_state=int(seed) & 0x7FFFFFFF)
    return np.asarray(km.fit(S).cluster_centers_, np.float64)
