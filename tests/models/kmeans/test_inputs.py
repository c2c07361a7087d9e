"""KMeans on every input kind: scipy.sparse CSR (kept sparse), dask arrays, libsvm Datasets."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dask
import dask.array as da
import numpy as np
import pytest
import scipy.sparse as sp
from distributed import Client
from sklearn.cluster import KMeans as SkKMeans
from sklearn.datasets import dump_svmlight_file

import daskangel as angel
from daskangel.models import KMeans
from daskangel.models.kmeans._rows import rows_of_batch

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def sparse_blobs() -> sp.csr_matrix:
    """Rows that each use 8 of 400 features, in 5 groups with their own features."""
    rng = np.random.default_rng(0)
    n, d, g = 600, 400, 5
    rows, cols, vals = [], [], []
    for i in range(n):
        grp = i % g
        core = np.arange(grp * 80, grp * 80 + 4)  # every row of a group shares these
        extra = rng.choice(np.arange(grp * 80 + 4, grp * 80 + 80), size=4, replace=False)
        rows += [i] * 8
        cols += core.tolist() + extra.tolist()
        vals += (3.0 + rng.random(4)).tolist() + (1.0 + rng.random(4)).tolist()
    return sp.csr_matrix((vals, (rows, cols)), shape=(n, d), dtype=np.float64)


def _inertia(X: Any, C: np.ndarray) -> float:
    X = sp.csr_matrix(X, dtype=np.float64)
    xn = np.asarray(X.multiply(X).sum(1)).ravel()
    d2 = xn[:, None] - 2 * np.asarray(X @ C.T) + (C * C).sum(1)[None]
    return float(np.maximum(d2, 0).min(1).sum())


def test_sparse_rows_stay_csr() -> None:
    from daskangel.data._batch import CSRBatch

    X = sp.random(50, 1000, density=0.01, format="csr", random_state=0)
    b = CSRBatch.from_arrays(X.indptr, X.indices, X.data, np.zeros(50), 1000)
    r = rows_of_batch(b, 1000)
    assert r.dense is None  # 1 % dense: no (50, 1000) block was made
    assert r.keys.size == np.unique(X.indices).size  # only the used columns


def test_sparse_input_matches_sklearn(client: Client, sparse_blobs: Any) -> None:
    X = sparse_blobs
    sk = SkKMeans(n_clusters=5, n_init=3, random_state=0).fit(X)
    km = KMeans(n_clusters=5, init="k-means++", random_state=0, max_iter=30).fit(X)
    assert _inertia(X, km.cluster_centers_) <= 1.01 * _inertia(X, sk.cluster_centers_)
    assert (km.predict(X) == km.labels_).mean() >= 0.995
    assert km.score(X) == pytest.approx(-_inertia(X, km.cluster_centers_), rel=1e-4)


def test_dask_array_gives_dask_labels(client: Client) -> None:
    rng = np.random.default_rng(2)
    centres = rng.normal(0, 8, (4, 6))
    Xn = (centres[rng.integers(0, 4, 2000)] + rng.normal(size=(2000, 6))).astype(np.float64)
    X = da.from_array(Xn, chunks=(500, 6))
    km = KMeans(n_clusters=4, init="k-means++", random_state=0).fit(X)
    assert isinstance(km.labels_, da.Array)
    lab = km.labels_.compute()
    pred = km.predict(X)
    assert isinstance(pred, da.Array)
    assert (pred.compute() == lab).mean() >= 0.995
    # rows in input order: the local prediction agrees row by row
    assert (km.predict(Xn) == lab).mean() >= 0.995
    assert km.transform(X).shape == (2000, 4)


def test_libsvm_dataset_in_input_order(client: Client, sparse_blobs: Any, tmp_path: Path) -> None:
    X = sparse_blobs
    path = tmp_path / "blobs.svm"
    dump_svmlight_file(X, np.zeros(X.shape[0]), str(path), zero_based=True)
    ds = angel.data.read_libsvm(str(path), n_features=X.shape[1], zero_based=True)
    km = KMeans(n_clusters=5, init="k-means||", random_state=0, max_iter=30).fit(ds)
    assert isinstance(km.labels_, da.Array)
    sk = SkKMeans(n_clusters=5, n_init=3, random_state=0).fit(X)
    assert _inertia(X, km.cluster_centers_) <= 1.01 * _inertia(X, sk.cluster_centers_)
    # labels_, predict and transform of a Dataset are in the file's row order: they
    # agree row by row with the local predictions of the same rows
    lab = km.labels_.compute()
    assert (lab == km.predict(X)).mean() >= 0.995
    assert (km.predict(ds).compute() == lab).mean() >= 0.995
    np.testing.assert_allclose(km.transform(ds).compute(), km.transform(X), rtol=1e-5, atol=1e-6)


def _split_columns(n: int = 400, half: int = 20) -> sp.csr_matrix:
    """Rows of the first half use columns [0, half), the others [half, 2 half):
    each of two tasks sees only its own columns."""
    rng = np.random.default_rng(0)
    cols = np.concatenate(
        [rng.choice(half, 3, replace=False) + (0 if i < n // 2 else half) for i in range(n)]
    )
    vals = rng.exponential(1.0, 3 * n)
    return sp.csr_matrix((vals, cols, np.arange(0, 3 * n + 1, 3)), shape=(n, 2 * half))


def test_sparse_tasks_on_their_own_columns_and_empty_rows(client: Client) -> None:
    # A task pulls only its rows' columns of the centres, but a distance needs each
    # centre's whole norm: with norms over the pulled columns only, 15-20 % of these
    # rows went to a centre whose mass sits on the other task's columns.
    X = _split_columns()
    km = KMeans(n_clusters=6, init="random", random_state=0, n_tasks=2, max_iter=20).fit(X)
    assert (km.predict(X) == km.labels_).all()
    assert km.inertia_ == pytest.approx(_inertia(X, km.cluster_centers_), rel=1e-6)
    X = sp.vstack([X[:4], sp.csr_matrix((2, X.shape[1]))]).tocsr()  # two empty rows last
    C = km.cluster_centers_
    want = ((X.toarray()[:, None, :] - C[None]) ** 2).sum(-1).argmin(1)
    assert km.predict(X).tolist() == want.tolist()


def test_float32_accumulators_in_many_blocks_match_float64(
    client: Client, sparse_blobs: Any
) -> None:
    # what a 1 M-feature fit uses (float32 accumulators cut into many column blocks,
    # centres pulled transposed in float32) on a small set: the model of the float64
    # fit in one block, to float32 rounding
    from daskangel.models.kmeans._psfs import Geometry

    X = sparse_blobs
    kw: dict[str, Any] = dict(n_clusters=5, init=X[:5].toarray(), max_iter=30, n_tasks=2)
    ref = KMeans(**kw).fit(X)
    small = {"daskangel.kmeans.block-bytes": 2000, "daskangel.kmeans.float32-above": 0}
    with dask.config.set(small):
        g = Geometry.for_data(X.shape[1], 2, 5, 5)
        assert g.n_blocks == 40 and g.dtype(300) == "float32"
        km = KMeans(**kw).fit(X)
    assert km.n_iter_ == ref.n_iter_
    assert (np.asarray(km.labels_) == np.asarray(ref.labels_)).all()
    np.testing.assert_allclose(km.cluster_centers_, ref.cluster_centers_, rtol=1e-5, atol=1e-6)
    assert km.inertia_ == pytest.approx(ref.inertia_, rel=1e-5)
    km.close()
    ref.close()
