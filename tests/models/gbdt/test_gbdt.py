"""GBDT on the PS against a real 2-worker LocalCluster: structure, reference, inputs, errors."""

from __future__ import annotations

import json
import pickle
from typing import Any

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from distributed import Client

from daskangel import models
from daskangel.errors import InvalidArgumentError
from daskangel.models import GBDTClassifier, GBDTRegressor

from . import reference

pytestmark = pytest.mark.timeout(300)


# the module's cluster (tests/conftest.py) runs its workers in this process: each
# worker process would compile (fresh clone) or load every GBDT kernel again; the
# fits between processes (serialised plans, tasks, rows) run in bench_gbdt --smoke
IN_PROCESS = True


def _ints(n: int, d: int, seed: int, k: int = 40) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, k, size=(n, d)).astype(np.float64)


def test_planted_tree_is_recovered(client: Client) -> None:
    X = _ints(4000, 5, 0)
    # depth 2: x0 <= 19 ? (x2 <= 9 ? 1 : 3) : (x4 <= 29 ? 5 : 9)
    y = np.where(X[:, 0] <= 19, np.where(X[:, 2] <= 9, 1.0, 3.0), np.where(X[:, 4] <= 29, 5.0, 9.0))
    r = GBDTRegressor(n_estimators=1, learning_rate=1.0, max_depth=2, min_samples_leaf=1,
                      early_stopping=False).fit(X, y)  # fmt: skip
    doc = json.loads(r.to_json())
    nodes = {n["id"]: n for n in doc["trees"][0]["nodes"]}
    root = nodes[0]
    assert (root["feature"], root["threshold"]) == (0, 19.5)
    left, right = nodes[root["left"]], nodes[root["right"]]
    assert (left["feature"], left["threshold"]) == (2, 9.5)
    assert (right["feature"], right["threshold"]) == (4, 29.5)
    np.testing.assert_allclose(r.predict(X), y, atol=1e-9)
    assert r.feature_importances_[[1, 3]].sum() == 0.0
    assert r.feature_importances_.argmax() == 0


def test_equals_single_process_reference(client: Client) -> None:
    X = _ints(3000, 6, 1, k=30)
    X[np.random.default_rng(2).random(X.shape) < 0.1] = np.nan
    logit = (
        0.3 * np.nan_to_num(X[:, 0], nan=40) - 0.2 * np.nan_to_num(X[:, 1], nan=-5) + X[:, 2] % 3
    )
    y = (np.random.default_rng(3).random(3000) < 1 / (1 + np.exp(-(logit - 3)))).astype(float)
    kw = dict(n_estimators=5, learning_rate=0.3, max_depth=3)
    clf = GBDTClassifier(**kw, early_stopping=False, random_state=0).fit(X, y)  # type: ignore[arg-type]
    trees, base, _ = reference.fit(X, y, n_estimators=5, lr=0.3, max_depth=3)
    np.testing.assert_allclose(
        clf.decision_function(X), reference.predict(trees, base, X), rtol=1e-9, atol=1e-9
    )
    assert clf.n_estimators_ == 5


def test_save_load_and_pickle_give_identical_predictions(client: Client, tmp_path: Any) -> None:
    X = np.random.default_rng(0).normal(size=(2000, 4))
    y = (X[:, 0] + X[:, 1] ** 2 > 1).astype(int)
    clf = GBDTClassifier(n_estimators=8, max_depth=3, random_state=1).fit(X, y)
    p = clf.predict_proba(X)
    clf.save(str(tmp_path / "m"))
    back = models.load(str(tmp_path / "m"))
    np.testing.assert_array_equal(back.predict_proba(X), p)
    np.testing.assert_array_equal(back.classes_, clf.classes_)
    assert json.loads(back.to_json()) == json.loads(clf.to_json())
    local = pickle.loads(pickle.dumps(clf))
    np.testing.assert_array_equal(local.predict_proba(X), p)


def test_missing_values_follow_the_learnt_direction(client: Client) -> None:
    rng = np.random.default_rng(4)
    X = rng.normal(size=(3000, 2))
    y = (X[:, 0] > 0.5).astype(int)
    miss = rng.random(3000) < 0.2
    X[miss, 0] = np.nan
    y[miss] = 1  # missing means class 1, though most present values are class 0
    clf = GBDTClassifier(n_estimators=3, max_depth=1, learning_rate=1.0, early_stopping=False).fit(
        X, y
    )
    nodes = json.loads(clf.to_json())["trees"][0]["nodes"]
    assert nodes[0]["feature"] == 0 and nodes[0]["missing_left"] is False  # NaN joins x > 0.5
    assert (clf.predict(X[miss]) == 1).all()
    # sparse input: an unstored entry is missing; here its absence marks class 1
    S = sp.random(
        3000, 3, density=0.5, random_state=5, format="csr", data_rvs=lambda n: rng.uniform(1, 2, n)
    )
    ys = (S[:, 0].toarray().ravel() == 0).astype(int)
    sclf = GBDTClassifier(n_estimators=2, max_depth=1, learning_rate=1.0, early_stopping=False).fit(
        S, ys
    )
    assert (sclf.predict(S) == ys).all()
    assert sclf.unstored_missing_


def test_multiclass_staged_inputs_and_resume(client: Client, tmp_path: Any) -> None:
    import dask.array as da

    rng = np.random.default_rng(6)
    X = rng.normal(size=(3000, 3))
    y = np.digitize(X[:, 0] + 0.5 * X[:, 1], [-0.5, 0.5])  # 3 classes
    labels = np.array(["a", "b", "c"])[y]
    kw: dict[str, Any] = dict(
        n_estimators=5, max_depth=3, learning_rate=0.3, early_stopping=False, subsample=0.8,
        colsample_bytree=0.7, random_state=0, n_tasks=2,  # 2 tasks: sums of 2, exact
    )  # fmt: skip
    url = str(tmp_path / "snap")
    clf = GBDTClassifier(**kw, snapshot=url, snapshot_every=2).fit(X, labels)
    _check_resume(clf, X, labels, url, kw)
    assert clf.n_trees_per_iteration_ == 3 and list(clf.classes_) == ["a", "b", "c"]
    p = clf.predict_proba(X)
    np.testing.assert_allclose(p.sum(axis=1), 1.0)
    assert (clf.predict(X) == labels).mean() > 0.9
    staged = list(clf.staged_predict_proba(X))
    assert len(staged) == 5
    np.testing.assert_allclose(staged[-1], p)
    Xd = da.from_array(X, chunks=700)
    np.testing.assert_allclose(clf.predict_proba(Xd).compute(), p)
    assert (clf.predict(Xd).compute() == clf.predict(X)).all()
    # dask input to fit gives the same model as numpy input
    clf2 = GBDTClassifier(**kw).fit(Xd, da.from_array(labels, chunks=700))  # type: ignore[arg-type]
    assert (clf2.predict(X) == labels).mean() > 0.9


def _check_resume(
    clf: GBDTClassifier, X: np.ndarray, labels: np.ndarray, url: str, kw: dict[str, Any]
) -> None:
    """A fresh fit resumed from the snapshot ``clf``'s fit took after 2 of its 5 rounds
    ends with exactly its trees and history; another model, other parameters or other
    data are refused before anything is made."""
    from daskangel import _snapshot_format as fmt

    # the newest 2 of the snapshots at clocks 0 (the rollback's start), 2 and 4 (skipped
    # while the one at 2 still writes)
    at = {_clock(url, v): v for v in fmt.list_versions(url)}
    t = min(c for c in at if c > 0)
    assert t in (2, 4), at
    got = GBDTClassifier(**kw).fit(X, labels, resume=fmt.join(url, at[t]))
    assert sorted(set(got.level_stats_["tree"])) == list(range(t, 5))  # it grew those only
    assert got.n_estimators_ == clf.n_estimators_ == 5
    np.testing.assert_array_equal(got._tree_array(), clf._tree_array())
    np.testing.assert_array_equal(got.decision_function(X), clf.decision_function(X))
    pd.testing.assert_frame_equal(got.history_, clf.history_)  # rounds 1, 2 from the PS
    got.close()
    y = (labels == "a").astype(float)
    bad = [
        (GBDTRegressor(**kw), X, y, "taken by a gbdtclassifier fit; this is a gbdtregressor"),
        (GBDTClassifier(**{**kw, "learning_rate": 0.2}), X, labels, "other parameters"),
        (GBDTClassifier(**kw), 2 * X, labels, "other data"),
    ]
    for est, Xb, yb, msg in bad:
        with pytest.raises(InvalidArgumentError, match=f"^resume: .*{msg}"):
            est.fit(Xb, yb, resume=url)
        assert not hasattr(est, "n_features_in_")


def _clock(url: str, version: str) -> int:
    """The clock of a snapshot version (-1: not written to the end)."""
    from daskangel import _snapshot_format as fmt

    try:
        return int(fmt.read_manifest(fmt.join(url, version))["clock"])
    except FileNotFoundError:
        return -1


def test_dataset_input(client: Client, tmp_path: Any) -> None:
    import daskangel as angel

    rng = np.random.default_rng(7)
    X = (rng.random((2000, 8)) < 0.3).astype(float)
    y = np.where(X[:, 0] + X[:, 3] > 0, 1, -1)
    path = tmp_path / "d.svm"
    with open(path, "w") as f:
        for row, lab in zip(X, y, strict=True):
            f.write(f"{lab} " + " ".join(f"{j + 1}:1" for j in np.flatnonzero(row)) + "\n")
    ds = angel.data.read_libsvm(str(path), n_features=8)
    clf = GBDTClassifier(n_estimators=5, max_depth=2, early_stopping=False).fit(ds)
    assert list(clf.classes_) == [-1.0, 1.0]
    pred = clf.predict(ds).compute()
    assert pred.shape == (2000,)
    assert (clf.predict(sp.csr_matrix(X)) == y).all()


def test_regression_losses_and_early_stopping(client: Client, tmp_path: Any) -> None:
    rng = np.random.default_rng(8)
    X = rng.normal(size=(4000, 3))
    y = 3 * X[:, 0] + rng.standard_t(2, size=4000)
    for loss in ("absolute_error", "huber"):
        r = GBDTRegressor(
            loss=loss, n_estimators=8, max_depth=3, learning_rate=0.5, early_stopping=False
        ).fit(X, y)
        mae0 = np.abs(y - np.median(y)).mean()
        assert np.abs(r.predict(X) - y).mean() < 0.7 * mae0
    noisy = rng.normal(size=4000)
    kw: dict[str, Any] = dict(
        n_estimators=200, max_depth=4, learning_rate=0.3, early_stopping=True, n_iter_no_change=3,
        random_state=0, n_tasks=2,
    )  # fmt: skip
    url = str(tmp_path / "snap")
    r = GBDTRegressor(**kw, snapshot=url, snapshot_every=2).fit(X, noisy)
    assert r.n_estimators_ < 200
    assert "val_rmse" in r.history_.columns
    assert len(r.level_stats_) > 0
    # resumed from the newest snapshot: the validation rows' margins and the history
    # come back, so early stopping stops at the same round
    from daskangel import _snapshot_format as fmt

    at = {_clock(url, v): v for v in fmt.list_versions(url)}
    at.pop(-1, None)
    assert max(at) >= 2, at  # it stops after 4 rounds at least (n_iter_no_change=3)
    got = GBDTRegressor(**kw).fit(X, noisy, resume=fmt.join(url, at[max(at)]))
    assert got.n_estimators_ == r.n_estimators_
    pd.testing.assert_frame_equal(got.history_, r.history_)
    np.testing.assert_array_equal(got.predict(X), r.predict(X))


@pytest.mark.parametrize(
    ("make", "arg"),
    [
        (lambda: GBDTClassifier(max_depth=0), "max_depth"),
        (lambda: GBDTRegressor(loss="poisson"), "loss"),
        (lambda: GBDTClassifier(learning_rate=-1), "learning_rate"),
        (lambda: GBDTClassifier(max_bins=1), "max_bins"),
    ],
)
def test_bad_parameters_name_the_argument(make: Any, arg: str) -> None:
    X, y = np.zeros((10, 2)), np.arange(10) % 2
    with pytest.raises(InvalidArgumentError, match=f"^{arg}:"):
        make().fit(X, y)


def test_bad_labels_name_y(client: Client) -> None:
    X = np.random.default_rng(0).normal(size=(100, 2))
    y = np.ones(100)
    with pytest.raises(InvalidArgumentError, match=r"^y: .*at least 2 classes"):
        GBDTClassifier(n_estimators=2).fit(X, y)
    y = np.arange(100, dtype=float)
    y[5] = np.nan
    with pytest.raises(InvalidArgumentError, match=r"^y: .*NaN"):
        GBDTRegressor(n_estimators=2).fit(X, y)
    import dask.array as da

    with pytest.raises(InvalidArgumentError, match=r"^y: .*NaN"):
        GBDTRegressor(n_estimators=2).fit(da.from_array(X, chunks=50), da.from_array(y, chunks=50))


def test_pandas_and_dask_dataframe_inputs(client: Client) -> None:
    import dask.dataframe as dd

    rng = np.random.default_rng(9)
    X = rng.integers(0, 20, size=(1500, 3)).astype(float)
    y = (X[:, 0] > 9).astype(int)
    frame = pd.DataFrame(X, columns=["a", "b", "c"])
    kw = dict(n_estimators=3, max_depth=2, early_stopping=False, random_state=0)
    ref = GBDTClassifier(**kw).fit(X, y)  # type: ignore[arg-type]
    from_pd = GBDTClassifier(**kw).fit(frame, pd.Series(y))  # type: ignore[arg-type]
    np.testing.assert_array_equal(from_pd.predict_proba(frame), ref.predict_proba(X))
    ddf = dd.from_pandas(frame, npartitions=3)
    from_dd = GBDTClassifier(**kw).fit(ddf, dd.from_pandas(pd.Series(y), npartitions=3))  # type: ignore[arg-type]
    assert (from_dd.predict(X) == y).all()
    out = from_dd.predict(ddf)
    assert hasattr(out, "dask")
    np.testing.assert_array_equal(np.asarray(out.compute()), from_dd.predict(X))


def _job_series(dask_scheduler: Any, job: str) -> Any:
    return dask_scheduler.plugins["daskangel"].status.metrics.series(job)


def test_round_metrics_reach_the_runtime(client: Client, capsys: Any) -> None:
    """Every round's metrics go through ctx.report: the runtime's history (what the
    progress bar, ps.status() and the dashboard show) holds them, as does history_;
    the fit publishes history_ to the dashboard's metrics plot of its job (through
    _core's PSEstimator._append_history), one point per tree; the bar counts trees
    and stays at 4/4."""
    rng = np.random.default_rng(10)
    X = rng.normal(size=(4000, 3))
    y = (X[:, 0] + 0.3 * rng.normal(size=4000) > 0).astype(int)
    clf = GBDTClassifier(
        n_estimators=4, max_depth=2, progress=True, early_stopping=True, random_state=0
    ).fit(X, y)
    h = clf.train_result_.history
    reported = h.dropna(subset=["val_loss"]).sort_values("clock")
    assert len(reported) == clf.n_estimators_ == 4
    np.testing.assert_allclose(reported["val_loss"].to_numpy(), clf.history_["val_loss"].to_numpy())
    assert {"train_loss", "val_accuracy", "val_auc"} <= set(clf.history_.columns)
    assert clf.history_["val_auc"].iloc[-1] > 0.9
    assert list(clf.history_["iteration"]) == [1, 2, 3, 4]
    x, xs, cols = client.run_on_scheduler(_job_series, job=clf.train_result_.job)
    assert (x, xs) == ("iteration", [1.0, 2.0, 3.0, 4.0])
    for k in ("train_loss", "val_loss", "val_accuracy", "val_auc"):
        np.testing.assert_allclose(cols[k], clf.history_[k].to_numpy())
    err = capsys.readouterr().err
    assert "4/4" in err and "tree" in err
