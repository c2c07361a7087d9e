"""The scikit-learn model-selection contract on a real cluster (issue 22 item 1):
``clone`` with a client, ``GridSearchCV`` with the default backend (the fits share
the current client) and under ``joblib.parallel_backend("dask")`` (each fit runs in a
task on a one-thread worker and must not deadlock waiting on its own training
tasks), and ``feature_names_in_`` from DataFrames."""

from __future__ import annotations

from collections.abc import Iterator

import joblib
import numpy as np
import pandas as pd
import pytest
from distributed import Client, LocalCluster
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from daskangel import models
from daskangel.errors import InvalidArgumentError

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def client() -> Iterator[Client]:
    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
        ) as c,
        Client(c) as cl,
    ):
        yield cl


def _frame(n: int = 400) -> tuple[pd.DataFrame, pd.Series]:
    rng = np.random.default_rng(0)
    X = pd.DataFrame(rng.normal(size=(n, 4)), columns=["age", "income", "clicks", "days"])
    y = pd.Series((X.to_numpy() @ np.array([1.5, -2.0, 1.0, 0.5]) > 0).astype(int))
    return X, y


def test_clone_shares_the_client_and_ps(client: Client) -> None:
    est = models.LogisticRegression(client=client, max_iter=1, alpha=1e-3)
    twin = clone(est)
    assert twin is not est and twin.client is client and twin.alpha == 1e-3
    X, y = _frame()
    twin.fit(X, y)
    assert not hasattr(clone(twin), "n_features_in_")  # a clone is unfitted


def test_grid_search_with_the_default_backend(client: Client) -> None:
    X, y = _frame()
    search = GridSearchCV(
        models.LogisticRegression(max_iter=2, random_state=0),
        {"alpha": [1e-4, 1e-2], "learning_rate": [0.05, 0.2]},
        cv=2,
    ).fit(X, y)
    assert len(search.cv_results_["params"]) == 4
    assert np.isfinite(search.cv_results_["mean_test_score"]).all()
    assert search.best_score_ > 0.85
    assert search.best_estimator_.predict(X).shape == (len(X),)


def test_grid_search_under_the_dask_joblib_backend_does_not_deadlock(client: Client) -> None:
    X, y = _frame()
    pipe = make_pipeline(StandardScaler(), models.LogisticRegression(max_iter=2, random_state=0))
    with joblib.parallel_backend("dask"):
        search = GridSearchCV(
            pipe,
            {
                "logisticregression__alpha": [1e-4, 1e-2],
                "logisticregression__learning_rate": [0.05, 0.2],
            },
            cv=2,
        ).fit(X, y)
    assert len(search.cv_results_["params"]) == 4
    assert np.isfinite(search.cv_results_["mean_test_score"]).all()
    assert search.best_score_ > 0.85


def test_feature_names_from_dataframes(client: Client) -> None:
    X, y = _frame()
    clf = models.LogisticRegression(max_iter=1).fit(X, y)
    assert clf.feature_names_in_.tolist() == ["age", "income", "clicks", "days"]
    clf.predict(X)
    with pytest.raises(InvalidArgumentError, match="feature names should match"):
        clf.predict(X[["income", "age", "clicks", "days"]])
    with pytest.raises(InvalidArgumentError, match=r"unseen at fit: \['views'\]"):
        clf.predict(X.rename(columns={"days": "views"}))
    clf.predict(X.to_numpy())  # no names: nothing to check
    clf.fit(X.to_numpy(), y)  # a fit from scratch without names forgets them
    assert not hasattr(clf, "feature_names_in_")
    with pytest.raises(TypeError, match="all input features have string names"):
        models.LogisticRegression(max_iter=1).fit(X.rename(columns={"age": 0}), y)


def test_feature_names_in_every_family(client: Client) -> None:
    """GBDT and LDA take feature_names_in_ from a DataFrame and check it at predict /
    transform, as the linear models do."""
    X, y = _frame(200)
    gb = models.GBDTClassifier(n_estimators=2, max_depth=2, min_samples_leaf=5).fit(X, y)
    assert gb.feature_names_in_.tolist() == ["age", "income", "clicks", "days"]
    with pytest.raises(InvalidArgumentError, match="feature names should match"):
        gb.predict(X[["income", "age", "clicks", "days"]])
    counts = pd.DataFrame(
        np.random.default_rng(1).poisson(1.0, size=(60, 5)), columns=list("abcde")
    )
    lda = models.LDA(n_topics=2, max_iter=1, random_state=0).fit(counts)
    assert lda.feature_names_in_.tolist() == list("abcde")
    assert lda.transform(counts).shape == (60, 2)
    with pytest.raises(InvalidArgumentError, match=r"unseen at fit: \['z'\]"):
        lda.transform(counts.rename(columns={"e": "z"}))
