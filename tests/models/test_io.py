"""Model I/O, incremental training, inputs and outputs of every kind."""

from __future__ import annotations

import gc
import pickle
import threading
from pathlib import Path

import dask.array as da
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import zarr
from distributed import Client
from sklearn.datasets import dump_svmlight_file

import daskangel as angel
from daskangel import models
from daskangel.models._core import _estimator as _core_estimator

from .conftest import planted

pytestmark = pytest.mark.timeout(240)


def test_save_load_round_trip_gives_identical_predictions(client: Client, tmp_path: Path) -> None:
    X, y, _ = planted(n=1000)
    clf = models.LogisticRegression(solver="ftrl", max_iter=3, learning_rate=0.5).fit(X, y)
    url = str(tmp_path / "lr")
    clf.save(url)
    group = zarr.open_group(url, mode="r")  # plain zarr reads the weights
    assert clf._arrays["weights"] in list(group.keys())
    back = models.load(url)
    assert type(back) is models.LogisticRegression
    assert back.get_params()["solver"] == "ftrl"
    np.testing.assert_array_equal(back.predict_proba(X), clf.predict_proba(X))
    np.testing.assert_array_equal(back.coef_, clf.coef_)
    assert back.t_ == clf.t_ == 3
    pd.testing.assert_frame_equal(back.history_, clf.history_, check_dtype=False)
    # the optimiser's state came back too (FTRL's z and n), co-partitioned with w
    assert set(back._arrays["state"]) == {"z", "n"}
    again = models.load(url)  # loaded twice in one cluster: fresh names, same values
    assert again._arrays["weights"] != back._arrays["weights"]
    np.testing.assert_array_equal(again.coef_, clf.coef_)


def test_incremental_training_continues_from_the_saved_clock(
    client: Client, tmp_path: Path
) -> None:
    X, y, _ = planted(n=1000, seed=4)
    # one task: a run is then deterministic (with several, Angel's BSP lets a task's pull
    # see deltas other tasks pushed earlier in the same clock)
    ds = angel.data.from_array(X, y).persist(n_partitions=1)
    kw = {"max_iter": 2, "early_stopping": False, "random_state": 3}
    a = models.LogisticRegression(**kw).fit(ds)
    url = f"file://{tmp_path / 'm'}"
    a.save(url)
    b = models.load(url)
    b.set_params(warm_start=True)
    b.fit(ds)
    assert b.t_ == 4 and b.n_iter_ == 2
    assert list(b.history_.epoch) == [1, 2, 3, 4]
    # the same as four epochs in one go: schedule and shuffles continue from epoch 2
    c = models.LogisticRegression(**{**kw, "max_iter": 4}).fit(ds)
    np.testing.assert_allclose(b.coef_, c.coef_, rtol=1e-6, atol=1e-7)
    ds.release()
    d = models.LogisticRegression(**kw).fit(X, y)
    d.partial_fit(X, y)
    assert d.t_ == 3 and list(d.history_.epoch) == [1, 2, 3]


def test_pickled_model_predicts_without_a_ps_and_trains_again(client: Client) -> None:
    X, y, _ = planted(n=600)
    clf = models.LinearSVC(max_iter=3).fit(X, y)
    blob = pickle.dumps(clf)
    back = pickle.loads(blob)
    np.testing.assert_array_equal(back.predict(X), clf.predict(X))
    back.set_params(warm_start=True, max_iter=1)
    back.fit(X, y)  # uploads the pulled weights to a new context
    assert back.t_ == 4


def test_predict_on_dask_collections_returns_dask_collections(client: Client) -> None:
    X, y, _ = planted(n=900)
    clf = models.LogisticRegression(max_iter=3).fit(
        da.from_array(X, chunks=300), da.from_array(y, chunks=300)
    )
    Xd = da.from_array(X, chunks=(200, 20))
    p = clf.predict(Xd)
    assert isinstance(p, da.Array)
    np.testing.assert_array_equal(p.compute(), clf.predict(X))
    pr = clf.predict_proba(Xd)
    assert isinstance(pr, da.Array) and pr.shape == (900, 2)
    np.testing.assert_allclose(pr.compute(), clf.predict_proba(X))
    df = dd.from_pandas(pd.DataFrame(X, columns=[f"f{i}" for i in range(20)]), npartitions=3)
    np.testing.assert_array_equal(np.asarray(clf.predict(df).compute()), clf.predict(X))
    reg = models.LinearRegression(max_iter=3).fit(
        df, dd.from_pandas(pd.Series(X @ np.ones(20)), npartitions=3)
    )
    assert isinstance(reg.predict(Xd), da.Array)


def test_libsvm_dataset_in_dask_predictions_out(client: Client, tmp_path: Path) -> None:
    X, y, _ = planted(n=1200, seed=6)
    Xs = sp.csr_matrix(np.where(np.abs(X) > 0.5, X, 0.0))
    path = tmp_path / "train.svm"
    dump_svmlight_file(Xs, 2 * y - 1, str(path), zero_based=False)
    ds = angel.data.read_libsvm(str(path), n_features=20).persist(n_partitions=3)
    clf = models.LogisticRegression(max_iter=4, sync="ssp:1").fit(ds)
    assert clf.classes_.tolist() == [-1.0, 1.0]
    pred = clf.predict(ds)
    assert isinstance(pred, da.Array) and pred.shape == (1200,)
    labels = 2.0 * y - 1  # predictions come in the file's (input) order, not the partitions'
    acc = float((pred.compute() == labels).mean())
    assert acc == pytest.approx(clf.score(Xs, labels), abs=1e-9)
    assert acc > 0.9
    ds.release()


def test_bad_inputs_are_refused_with_the_argument_named(client: Client) -> None:
    X, y, _ = planted(n=200)
    clf = models.LogisticRegression(max_iter=1).fit(X, y)
    with pytest.raises(ValueError, match="expecting 20 features"):
        clf.predict(X[:, :5])
    with pytest.raises(ValueError, match=r"NaN|infinity"):
        models.LogisticRegression(max_iter=1).fit(np.full((10, 2), np.nan), np.arange(10) % 2)
    with pytest.raises(ValueError, match="y:"):
        models.LogisticRegression(max_iter=1).fit(X)
    with pytest.raises(ValueError, match="classes"):
        clf.partial_fit(X, y + 5)
    with pytest.raises(angel.errors.SnapshotError, match="no saved daskangel model"):
        models.load("memory://nothing-here")


@pytest.mark.parametrize(
    "path",
    [
        "os:system",  # a model file is data: nothing outside daskangel.models is imported
        "builtins:eval",
        "sklearn.linear_model:LogisticRegression",  # an estimator, but not one of ours
        "daskangel.models:load",  # inside daskangel.models, but not an estimator
        "daskangel.models._core._estimator:PSEstimator",  # the abstract base
        "daskangel.models:os.system",
    ],
)
def test_load_refuses_a_class_that_is_not_a_daskangel_estimator(tmp_path: Path, path: str) -> None:
    import json

    sentinel = tmp_path / "ran"
    (tmp_path / "m").mkdir()
    doc = {
        "format": 2,
        "class": path,
        "params": {"command": f"touch {sentinel}", "source": f"open({str(sentinel)!r}, 'w')"},
        "attrs": {},
        "history": None,
        "arrays": {},
    }
    (tmp_path / "m" / "daskangel-model.json").write_text(json.dumps(doc))
    with pytest.raises(angel.errors.SnapshotError, match="daskangel"):
        models.load(str(tmp_path / "m"))
    assert not sentinel.exists()


class _Marker:
    """Queued after a context: the closer thread reached it, so it handled the context."""

    closed = False

    def __init__(self) -> None:
        self.reached = threading.Event()
        self.client = self

    status = "running"

    def close(self) -> None:
        self.reached.set()


@pytest.mark.timeout(60)
def test_a_collected_models_context_is_closed_without_a_thread_started_in_gc(
    client: Client,
) -> None:
    """A model fitted without ``ps=`` keeps a context of its own; once the model is
    garbage-collected the finalizer only queues the context and the long-lived closer
    thread closes it.  The finalizer starts no thread: CPython 3.11 may run GC inside
    ``sys._current_frames()`` (Dask's profiler, on the event loop) while holding the
    thread-list lock, and a thread started there never starts (the suite once hung in
    a GBDT fit with the loop blocked in ``Thread.start``)."""
    X, y, _ = planted(n=400)
    clf = models.LogisticRegression(max_iter=2, early_stopping=False).fit(X, y)
    ps = clf._ps
    assert not ps.closed
    started: list[threading.Thread] = []
    real_start = threading.Thread.start
    here = threading.current_thread()

    def spy(self: threading.Thread) -> None:  # records a thread this GC run starts
        if threading.current_thread() is here:
            started.append(self)
        real_start(self)

    threading.Thread.start = spy  # type: ignore[method-assign]
    try:
        del clf
        gc.collect()
    finally:
        threading.Thread.start = real_start  # type: ignore[method-assign]
    assert started == [], started
    marker = _Marker()
    _core_estimator._to_close.put(marker)  # type: ignore[arg-type]
    assert marker.reached.wait(30)
    assert ps.closed
