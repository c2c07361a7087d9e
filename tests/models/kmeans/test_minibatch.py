"""MiniBatchKMeans on a real 2-worker LocalCluster (the k-means|| fits are in test_kmeans)."""

from __future__ import annotations

from typing import Any

import dask.array as da
import numpy as np
import pytest
import scipy.sparse as sp
from distributed import Client
from sklearn.base import clone
from sklearn.cluster import KMeans as SkKMeans
from sklearn.datasets import make_blobs

from daskangel.models import KMeans, MiniBatchKMeans
from daskangel.models.kmeans._minibatch import sculley_delta
from daskangel.models.kmeans._parallel import oversample
from daskangel.models.kmeans._rows import rows_of_batch

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def blobs() -> np.ndarray:
    X, _ = make_blobs(n_samples=4000, n_features=6, centers=8, cluster_std=1.0, random_state=4)
    return X


def _inertia(X: np.ndarray, C: np.ndarray) -> float:
    return float(((X[:, None, :] - C[None]) ** 2).sum(-1).min(1).sum())


def test_sculley_rate_and_oversampling() -> None:
    c = np.array([[0.0], [5.0]])
    # centre 0 has absorbed 3 rows: 2 more with sum 8 move it by (8 - 0) / 5
    d = sculley_delta(c, np.array([[8.0], [0.0]]), np.array([2.0, 0.0]), np.array([3.0, 1.0]), 1)
    assert d.ravel().tolist() == [1.6, 0.0]
    # two tasks of equal counts add up to one global batch
    half = sculley_delta(c, np.array([[4.0], [0.0]]), np.array([1.0, 0.0]), np.array([3.0, 1.0]), 2)
    assert (2 * half).ravel().tolist() == [1.6, 0.0]
    rng = np.random.default_rng(0)
    assert oversample(np.array([0.0, 1.0]), 1.0, 10.0, rng).tolist() == [1]  # p = min(1, .)
    assert oversample(np.ones(3), 0.0, 1.0, rng).size == 0


def test_take_keeps_only_the_batch_columns() -> None:
    from daskangel.data._batch import CSRBatch

    X = sp.csr_matrix(np.array([[0, 1.0, 0, 2.0], [3.0, 0, 0, 0], [0, 0, 4.0, 0]]))
    r = rows_of_batch(CSRBatch.from_arrays(X.indptr, X.indices, X.data, np.zeros(3), 40), 40)
    assert r.dense is None  # 4 of 120 entries: CSR
    sub = r.take(np.array([0, 2]))
    assert sub.keys.tolist() == [1, 2, 3]
    assert sub.row(0).tolist() == [1.0, 0.0, 2.0] and sub.row(1).tolist() == [0.0, 4.0, 0.0]


@pytest.mark.parametrize("sync", ["bsp", "ssp:1"])
def test_minibatch_close_to_lloyd(client: Client, blobs: Any, sync: str) -> None:
    X = blobs
    sk = SkKMeans(n_clusters=8, n_init=3, random_state=0).fit(X)
    mb = MiniBatchKMeans(n_clusters=8, init="k-means++", batch_size=800, max_iter=2, sync=sync,
                         random_state=0).fit(X)  # fmt: skip
    assert _inertia(X, mb.cluster_centers_) <= 1.05 * _inertia(X, sk.cluster_centers_)
    assert mb.inertia_ == pytest.approx(_inertia(X, mb.cluster_centers_), rel=1e-4)
    assert (mb.predict(X) == mb.labels_).mean() >= 0.995
    assert list(mb.history_.iteration) == [1, 2] and mb.n_iter_ == 2
    assert mb.cluster_sizes_.sum() == pytest.approx(2 * 4000, rel=0.05)  # rows absorbed
    if sync == "bsp":  # a read barrier per step: one random_state, one model
        again = clone(mb).fit(X)
        np.testing.assert_allclose(again.cluster_centers_, mb.cluster_centers_, rtol=1e-12)
        assert list(again.history_.inertia) == pytest.approx(list(mb.history_.inertia), rel=1e-12)


def test_minibatch_on_dask_keeps_labels_distributed(client: Client, blobs: Any) -> None:
    X = da.from_array(blobs, chunks=(1000, 6))
    mb = MiniBatchKMeans(n_clusters=8, init="k-means++", batch_size=500, max_iter=2,
                         random_state=0).fit(X)  # fmt: skip
    assert isinstance(mb.labels_, da.Array)
    assert (mb.labels_.compute() == mb.predict(blobs)).mean() >= 0.995


def test_minibatch_refuses_bad_sync_for_lloyd(client: Client, blobs: Any) -> None:
    with pytest.raises(ValueError, match="algorithm"):
        KMeans(algorithm="elkan").fit(blobs)
