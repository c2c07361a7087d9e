"""A worker process killed in the middle of a Lloyd fit (snapshots on): the fit goes back
to the newest snapshot and converges to the model of the fit without the failure; and a
fresh fit resumed from the reference fit's snapshot (``fit(X, resume=url)``) ends with
exactly the reference model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dask
import numpy as np
import pytest
from distributed import Client
from sklearn.datasets import make_blobs

from daskangel.errors import InvalidArgumentError
from daskangel.models import KMeans
from tests.conftest import make_cluster
from tests.scheduler.test_recovery import FAST


def _arm(iteration: int, marker: str) -> None:
    dask.config.set(
        {"daskangel.kmeans.exit-at-iteration": iteration, "daskangel.kmeans.exit-marker": marker}
    )


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_worker_killed_mid_fit_converges_as_without(tmp_path: Path) -> None:
    X, _ = make_blobs(n_samples=1000, n_features=4, centers=6, cluster_std=2.0, random_state=5)
    init = X[:6].copy()  # a poor start: several iterations to converge
    kw: dict[str, Any] = dict(n_clusters=6, init=init, max_iter=100, n_tasks=2, snapshot_every=2)
    with (
        dask.config.set(FAST),
        make_cluster(n_workers=2, threads=1) as cluster,
        Client(cluster) as c,
    ):
        ref = KMeans(snapshot=str(tmp_path / "ref"), **kw).fit(X)
        assert 5 <= ref.n_iter_ < 100  # converged, after the iteration that kills
        _check_resume(ref, X, str(tmp_path / "ref"), kw)
        # the first task to push iteration 3 kills its worker (and the PS server on it)
        marker = tmp_path / "killed"
        c.run(_arm, 3, str(marker))
        km = KMeans(snapshot=str(tmp_path / "km"), **kw).fit(X)
        assert marker.exists()
        res: Any = km.train_result_
        assert res.rollbacks == 1, res
        assert km.n_iter_ == ref.n_iter_
        assert km.inertia_ == pytest.approx(ref.inertia_, rel=1e-9)
        np.testing.assert_allclose(km.cluster_centers_, ref.cluster_centers_, rtol=1e-9)
        assert (np.asarray(km.labels_) == np.asarray(ref.labels_)).all()
        km.close()
        ref.close()


def _check_resume(ref: KMeans, X: np.ndarray, url: str, kw: dict[str, Any]) -> None:
    """A fresh model (no snapshots) resumed from the newest snapshot of ``ref``'s fit."""
    plain = {k: v for k, v in kw.items() if k != "snapshot_every"}
    got = KMeans(**plain).fit(X, resume=url)
    start = int(got.train_result_.history.clock.min())
    # the newest snapshot may be the last clock's (taken while the tasks made their labels)
    assert 2 <= start <= ref.n_iter_ and start % 2 == 0, start
    assert got.n_iter_ == ref.n_iter_ and got.inertia_ == ref.inertia_
    np.testing.assert_array_equal(got.cluster_centers_, ref.cluster_centers_)
    np.testing.assert_array_equal(got.labels_, ref.labels_)
    h, r = got.history_, ref.history_.set_index("iteration")  # the iterations it ran
    assert list(h.iteration) == list(range(start, ref.n_iter_ + 1))
    np.testing.assert_array_equal(h.inertia, r.inertia.loc[h.iteration])
    with pytest.raises(InvalidArgumentError, match="n_init=1"):
        KMeans(n_clusters=6, n_init=2).fit(X, resume=url)
    got.close()


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_fit_resumes_on_more_workers_to_the_same_model(tmp_path: Path) -> None:
    """A snapshot of a Lloyd fit on 2 workers (2 PS servers) resumed on 3: the
    accumulators' layout depends on the data only (here 3 column blocks of 2
    features, spread 2 + 1 and then 1 + 1 + 1; before, the width followed the
    servers, 8 columns against 9, and the resume was refused as another model),
    and the resumed fit ends with exactly the model of the fit that ran through."""
    X, _ = make_blobs(n_samples=1000, n_features=6, centers=6, cluster_std=2.0, random_state=5)
    kw: dict[str, Any] = dict(n_clusters=6, init=X[:6].copy(), max_iter=100, n_tasks=2)
    url = str(tmp_path / "ref")
    blocks = {"daskangel.kmeans.block-bytes": 8 * 26 * 3}  # 26 rows: 2 tasks x (6 + 6 + 1)
    with (
        dask.config.set(FAST),
        dask.config.set(blocks),
        make_cluster(n_workers=2, threads=1) as cluster,
        Client(cluster) as c,
    ):
        ref = KMeans(snapshot=url, snapshot_every=2, **kw).fit(X)
        assert 5 <= ref.n_iter_ < 100 and len(ref._ps.servers) == 2
        cluster.scale(3)
        c.wait_for_workers(3, timeout=120)
        got = KMeans(**kw).fit(X, resume=url)
        assert len(got._ps.servers) == 3
        start = int(got.train_result_.history.clock.min())
        assert 2 <= start <= ref.n_iter_ and start % 2 == 0, start
        assert got.n_iter_ == ref.n_iter_ and got.inertia_ == ref.inertia_
        np.testing.assert_array_equal(got.cluster_centers_, ref.cluster_centers_)
        np.testing.assert_array_equal(got.labels_, ref.labels_)
        got.close()
        ref.close()
