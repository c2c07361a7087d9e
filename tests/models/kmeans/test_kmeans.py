"""KMeans on a real 2-worker LocalCluster: quality against scikit-learn, the contract, errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dask
import numpy as np
import pytest
from distributed import Client
from sklearn.cluster import KMeans as SkKMeans
from sklearn.datasets import make_blobs

from daskangel.errors import InvalidArgumentError
from daskangel.models import KMeans, load
from daskangel.models.kmeans._bounds import Bounded
from daskangel.models.kmeans._init import take_share
from daskangel.models.kmeans._kernels import assign_dense_blocks, row_norms
from daskangel.models.kmeans._psfs import CentreNorms, Geometry, centres_of, farthest

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def blobs() -> tuple[np.ndarray, np.ndarray]:
    X, y = make_blobs(n_samples=3000, n_features=8, centers=6, cluster_std=1.5, random_state=0)
    return X.astype(np.float32), y


def _inertia(X: np.ndarray, C: np.ndarray) -> float:
    d2 = ((X.astype(np.float64)[:, None, :] - C[None, :, :]) ** 2).sum(-1)
    return float(d2.min(axis=1).sum())


# -- units (no cluster) ---------------------------------------------------------------------


def test_dense_kernel_matches_brute_force() -> None:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(1000, 5)).astype(np.float32)
    C = rng.normal(size=(7, 5))
    with dask.config.set({"daskangel.kmeans.block-rows": 300}):  # 3 chunks and a partial one
        out = assign_dense_blocks(X, row_norms(X), C, True)
    d2 = ((X.astype(np.float64)[:, None, :] - C[None]) ** 2).sum(-1)
    assert (out.labels == d2.argmin(1)).mean() > 0.999
    assert out.inertia == pytest.approx(d2.min(1).sum(), rel=1e-5)
    assert out.counts.sum() == 1000
    for j in range(7):
        np.testing.assert_allclose(out.sums[j], X[out.labels == j].sum(0), rtol=1e-5, atol=1e-4)


def test_bounded_lloyd_gives_plain_lloyds_labels_sums_and_inertia() -> None:
    """Hamerly's bounds skip rows, not results: every iteration equals the full pass."""
    X, _ = make_blobs(n_samples=3000, n_features=6, centers=9, cluster_std=2.0, random_state=2)
    X = X.astype(np.float32)
    xn = row_norms(X)
    C = X[:9].astype(np.float64)  # a poor start: clusters move, split and merge
    b = Bounded(X, xn)
    with dask.config.set({"daskangel.kmeans.block-rows": 64}):
        for it in range(8):
            got, want = b.step(C, 3), assign_dense_blocks(X, xn, C, True)
            assert (got.labels == want.labels).mean() > 0.999, it
            assert got.inertia == pytest.approx(want.inertia, rel=1e-6)
            np.testing.assert_allclose(got.counts, want.counts, atol=1.0)
            np.testing.assert_allclose(got.sums, want.sums, rtol=1e-4, atol=20.0)
            far = np.argsort(-b.upper, kind="stable")[:3]
            assert got.far.tolist() == far.tolist()
            np.testing.assert_allclose(got.far_dist, want.dist[far], rtol=1e-4)
            C = want.sums / np.maximum(want.counts, 1.0)[:, None]
    assert b.queued < X.shape[0] // 2  # the bounds did skip rows


def test_centres_of_sums_tasks_and_reseeds_empty() -> None:
    g = Geometry(n_features=2, width=2, n_tasks=2, n_clusters=3, n_cand=1)
    A = np.zeros((g.n_rows, 3))
    A[g.cluster_rows(0)] = [[2.0, 4.0, 2.0], [1.0, 1.0, 1.0], [0.0, 0.0, 0.0]]
    A[g.cluster_rows(1)] = [[4.0, 2.0, 2.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
    A[g.cand_rows(0)] = [7.0, 7.0, 3.0]  # squared distance 3
    A[g.cand_rows(1)] = [8.0, 8.0, 5.0]  # the farthest: takes the empty cluster 2
    C, counts, moved = centres_of(A, g)
    assert C.tolist() == [[1.5, 1.5], [1.0, 1.0], [8.0, 8.0]]
    assert counts.tolist() == [4.0, 1.0, 0.0] and moved == 1
    A[g.cand_rows(0)] = A[g.cand_rows(1)] = 0.0  # no candidate: NaN, the caller keeps it
    assert np.isnan(centres_of(A, g)[0][2]).all()


def test_geometry_depends_on_the_data_not_the_servers() -> None:
    # blocks of at most block-bytes (as float64) over the T (k + m + 1) rows
    with dask.config.set({"daskangel.kmeans.block-bytes": 8 * 26 * 3}):
        g = Geometry.for_data(6, 2, 6, 6)  # 26 rows: 3 columns a block, 2 of them features
        assert (g.width, g.n_blocks, g.n_phys) == (2, 3, 9)
        assert g.block_shape == (26, 3) and g.count_cols().tolist() == [2, 5, 8]
    with dask.config.set({"daskangel.kmeans.block-bytes": "64MiB"}):
        assert Geometry.for_data(6, 2, 6, 6).n_blocks == 1
        g = Geometry.for_data(1_000_000, 2, 100, 8)
        assert g.n_blocks == 26 and g.width <= (64 << 20) // (8 * 218)
    with dask.config.set({"daskangel.kmeans.float32-above": "1GiB"}):
        assert g.dtype(5_000_000) == "float32"  # 3 x 218 x 1 M float64 = 5.2 GB
        assert g.dtype(2**24) == "float64"  # counts would no longer be exact
        assert Geometry.for_data(100, 2, 100, 8).dtype(5_000_000) == "float64"


def test_centre_norms_leave_out_the_count_column() -> None:
    # the (k, d + 1) mini-batch centres, d = 5, in blocks of 4 columns: [0, 4) and [4, 6)
    from types import SimpleNamespace

    C = np.arange(12.0).reshape(2, 6)
    f = CentreNorms(5)
    parts = {0: f.partition_get(SimpleNamespace(array=C[:, :4], col0=0)),
             1: f.partition_get(SimpleNamespace(array=C[:, 4:], col0=4))}  # fmt: skip
    np.testing.assert_allclose(f.merge(parts, []), (C[:, :5] ** 2).sum(1))


def test_farthest_and_share() -> None:
    assert farthest(np.array([1.0, 5.0, 5.0, 0.5]), 2).tolist() == [1, 2]
    assert farthest(np.array([]), 3).tolist() == []
    d = np.random.default_rng(0).integers(0, 5, 500).astype(float)  # ties at the boundary
    for m in (1, 7, 600):  # the largest first, ties by lower index: a stable sort's order
        assert farthest(d, m).tolist() == np.argsort(-d, kind="stable")[:m].tolist()
    assert take_share(np.array([0, 3, 5, 9]), np.array([0, 4, 10]), 0).tolist() == [0, 3]


# -- on the cluster -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fitted(client: Client, blobs: Any) -> KMeans:
    """One k-means|| + Lloyd fit the tests below read (and the last one refits)."""
    return KMeans(n_clusters=6, init="k-means||", random_state=0).fit(blobs[0])


def test_blobs_match_sklearn_inertia(fitted: KMeans, blobs: Any) -> None:
    X, _ = blobs
    sk = SkKMeans(n_clusters=6, n_init=3, random_state=0).fit(X)
    km = fitted
    C = km.cluster_centers_
    assert C.shape == (6, 8)
    ours = _inertia(X, C)
    assert ours <= 1.01 * _inertia(X, sk.cluster_centers_)
    assert km.inertia_ == pytest.approx(ours, rel=1e-4)
    assert (km.predict(X) == km.labels_).mean() >= 0.995
    assert km.labels_.shape == (3000,)
    assert km.n_iter_ >= 1 and km.n_iter_ <= 300
    h = km.history_
    assert list(h.iteration) == list(range(1, km.n_iter_ + 1))
    assert h.inertia.iloc[-1] <= h.inertia.iloc[0]
    assert km.score(X) == pytest.approx(-ours, rel=1e-4)
    D = km.transform(X[:5])
    assert D.shape == (5, 6)
    np.testing.assert_allclose(D.argmin(1), km.predict(X[:5]))
    assert int(km.cluster_sizes_.sum()) == 3000


def test_deterministic_and_init_options(client: Client, blobs: Any) -> None:
    X, _ = blobs
    a = KMeans(n_clusters=6, random_state=3, max_iter=50).fit(X)  # init='lloyd-sample'
    b = KMeans(n_clusters=6, random_state=3, max_iter=50).fit(X)
    assert _inertia(X, a.cluster_centers_) <= 1.01 * _inertia(
        X, SkKMeans(n_clusters=6, n_init=3, random_state=0).fit(X).cluster_centers_
    )
    # pushes of several tasks add up on the servers in arrival order: equal to rounding
    np.testing.assert_allclose(a.cluster_centers_, b.cluster_centers_, rtol=1e-9, atol=1e-9)
    init = X[:6].astype(np.float64)
    c = KMeans(n_clusters=6, init=init, max_iter=1).fit(X)
    # one Lloyd step from the given centres: the means of their assigned rows
    lab = ((X[:, None, :] - init[None]) ** 2).sum(-1).argmin(1)
    want = np.stack([X[lab == j].mean(0) for j in range(6)])
    np.testing.assert_allclose(c.cluster_centers_, want, rtol=1e-4, atol=1e-4)
    assert c.n_iter_ == 1


def test_empty_cluster_reseeded_from_farthest(client: Client) -> None:
    rng = np.random.default_rng(1)
    X = np.vstack([rng.normal(0, 0.1, (200, 2)), rng.normal(10, 0.1, (200, 2))])
    X = np.vstack([X, [[100.0, 100.0]]]).astype(np.float32)
    init = np.array([[0.0, 0.0], [10.0, 10.0], [-1000.0, -1000.0]])  # third: never nearest
    km = KMeans(n_clusters=3, init=init, max_iter=5).fit(X)
    C = km.cluster_centers_
    assert np.allclose(C[2], [100.0, 100.0], atol=1e-3)  # moved to the farthest point
    assert km.history_.reseeded.iloc[0] == 1


def test_save_load_predicts_the_same(fitted: KMeans, blobs: Any, tmp_path: Path) -> None:
    X, _ = blobs
    km = fitted
    km.save(str(tmp_path / "km"))
    back = load(str(tmp_path / "km"))
    np.testing.assert_array_equal(back.cluster_centers_, km.cluster_centers_)
    np.testing.assert_array_equal(back.predict(X), km.predict(X))
    assert back.inertia_ == km.inertia_ and back.n_iter_ == km.n_iter_


@pytest.mark.parametrize(
    ("kwargs", "X", "match"),
    [
        (
            {"n_clusters": 10},
            np.ones((5, 2)),
            "n_clusters: expected at most n_samples=5, got n_clusters=10",
        ),
        (
            {"n_clusters": 2, "init": np.zeros((3, 2))},
            np.ones((5, 2)),
            r"init: expected .*\(2, 2\), got shape \(3, 2\)",
        ),
        ({"n_clusters": 0}, np.ones((5, 2)), "n_clusters"),
        ({"init": "nope"}, np.ones((50, 2)), "init"),
        ({"n_clusters": 2}, np.array([[np.nan, 1.0], [1.0, 1.0], [2.0, 2.0]]), "NaN"),
        ({"n_clusters": 2}, np.array([[np.inf, 1.0], [1.0, 1.0], [2.0, 2.0]]), "infinity"),
    ],
)
def test_bad_input_is_refused(client: Client, kwargs: Any, X: Any, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        KMeans(**kwargs).fit(X)


def test_bad_input_leaves_a_fitted_model(fitted: KMeans, blobs: Any) -> None:
    X, _ = blobs
    before = fitted.cluster_centers_.copy()
    labels = fitted.predict(X)
    try:
        with pytest.raises(InvalidArgumentError):
            fitted.set_params(init=np.zeros((2, 8))).fit(X)
    finally:
        fitted.set_params(init="k-means||")
    np.testing.assert_array_equal(fitted.cluster_centers_, before)
    np.testing.assert_array_equal(fitted.predict(X), labels)
