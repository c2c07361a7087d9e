"""Factorization machines on a real cluster: planted interactions, solvers, inputs, state, bad input."""

from __future__ import annotations

import pickle

import dask
import dask.array as da
import numpy as np
import pandas as pd
import pytest
from distributed import Client
from sklearn.datasets import dump_svmlight_file
from sklearn.linear_model import LogisticRegression as SkLR
from sklearn.metrics import r2_score, roc_auc_score

import daskangel as angel
from daskangel import models
from daskangel.errors import InvalidArgumentError

from .conftest import planted_pairs

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def pairs() -> tuple:
    X, y = planted_pairs(n=5000)
    return X[:3500], y[:3500], X[3500:], y[3500:]


def test_fm_beats_logistic_regression_on_planted_interactions(client: Client, pairs) -> None:
    X, y, Xt, yt = pairs
    labels = np.array(["no", "yes"])
    fm = models.FMClassifier(
        solver="ma-sgd", learning_rate=0.05, power_t=0.0, max_iter=6, validation_fraction=0.1
    ).fit(X, labels[y])
    assert fm.classes_.tolist() == ["no", "yes"]
    auc_fm = roc_auc_score(yt, fm.predict_proba(Xt)[:, 1])
    auc_lr = roc_auc_score(yt, SkLR().fit(X, y).predict_proba(Xt)[:, 1])
    assert auc_fm > 0.95 and auc_fm > auc_lr + 0.1, (auc_fm, auc_lr)
    assert set(fm.predict(Xt[:20])) <= {"no", "yes"}
    np.testing.assert_allclose(fm.predict_proba(Xt[:5]).sum(axis=1), 1.0)
    h = fm.history_
    assert list(h.epoch) == list(range(1, len(h) + 1))
    assert {"train_loss", "val_loss", "val_auc", "val_logloss", "val_accuracy"} <= set(h)
    assert h.train_loss.iloc[-1] < h.train_loss.iloc[0] and h.val_auc.iloc[-1] > 0.95
    assert fm.factors_.shape == (X.shape[1], 8) and fm.coef_.shape == (X.shape[1],)


@pytest.mark.parametrize(
    ("solver", "lr"), [("adam", 0.05), ("adagrad", 0.05), ("ftrl", 1.0), ("sgd", 1.0)]
)
def test_server_side_solvers_learn_the_interaction_repeatably(
    client: Client, pairs, solver, lr
) -> None:
    X, y, Xt, yt = pairs
    fm = models.FMClassifier(solver=solver, learning_rate=lr, batch_size=125, max_iter=2)
    fm.fit(X, y)
    assert fm.n_iter_ == 2
    # under BSP the tasks' gradients of a clock are summed and stepped once: a second
    # fit with the same random_state is the same model, to the rounding of the float64
    # sums of 4 tasks' gradients in arrival order (the flaky CI failure came from the
    # optimiser stepping each task's gradient in arrival order: whole percents)
    again = models.FMClassifier(solver=solver, learning_rate=lr, batch_size=125, max_iter=2)
    np.testing.assert_allclose(again.fit(X, y)._w, fm._w, rtol=1e-9, atol=1e-12)
    assert fm.history_.train_loss.iloc[-1] < fm.history_.train_loss.iloc[0]
    # two epochs of 14 synchronous steps: the adaptive rules already use the
    # interaction, FTRL and plain SGD (small start factors, small gradients) have the
    # linear part
    auc = roc_auc_score(yt, fm.decision_function(Xt))
    assert auc > {"adam": 0.85, "adagrad": 0.85, "ftrl": 0.7, "sgd": 0.7}[solver], auc
    assert set(fm._arrays["state"]) == {
        "adam": {"m", "v", "t"}, "adagrad": {"h"}, "ftrl": {"z", "n"}, "sgd": set()
    }[solver]  # fmt: skip


def test_fm_regressor_recovers_planted_values(client: Client) -> None:
    X, y = planted_pairs(n=3000, regression=True)
    reg = models.FMRegressor(
        solver="ma-sgd", learning_rate=0.02, power_t=0.0, max_iter=8, validation_fraction=0.1
    ).fit(X[:2400], y[:2400])
    assert r2_score(y[2400:], reg.predict(X[2400:])) > 0.9
    assert {"val_rmse", "val_mae"} <= set(reg.history_)


def test_every_input_gives_the_same_predictions_in_order(client: Client, pairs, tmp_path) -> None:
    X, y, Xt, _yt = pairs
    fm = models.FMClassifier(solver="ma-sgd", max_iter=2).fit(X.toarray(), y)
    want = fm.decision_function(Xt)
    # ma-sgd under BSP: one random_state, one model (to the rounding of the servers'
    # float64 sums of the two tasks' deltas, which arrive in either order)
    again = models.FMClassifier(solver="ma-sgd", max_iter=2).fit(X.toarray(), y)
    np.testing.assert_allclose(again._w, fm._w, rtol=1e-12, atol=1e-15)
    dense = Xt.toarray()
    np.testing.assert_allclose(fm.decision_function(dense), want)
    np.testing.assert_allclose(fm.decision_function(pd.DataFrame(dense)), want)
    dX = da.from_array(dense, chunks=(300, -1))
    got = fm.predict_proba(dX)
    assert hasattr(got, "dask")
    np.testing.assert_allclose(got.compute()[:, 1], fm.predict_proba(Xt)[:, 1])
    ds = angel.data.from_array(Xt, np.zeros(Xt.shape[0]))
    np.testing.assert_allclose(np.asarray(fm.decision_function(ds)), want, rtol=1e-6)
    # a libsvm file cut in 3 partitions: predictions come back in the file's order
    path = tmp_path / "test.svm"
    dump_svmlight_file(Xt, _yt, str(path), zero_based=True)
    with dask.config.set({"daskangel.data.split-bytes": path.stat().st_size // 7}):
        fds = angel.data.read_libsvm(str(path), zero_based=True).persist(n_partitions=3)
    assert len(fds.partitions) == 3 and fds.n_features <= Xt.shape[1]
    assert sorted(np.concatenate(fds.positions()).tolist()) == list(range(Xt.shape[0]))
    got = np.asarray(fm.predict_proba(fds))[:, 1]
    np.testing.assert_allclose(got, fm.predict_proba(Xt)[:, 1], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(np.asarray(fm.predict(fds)), fm.predict(Xt))
    assert roc_auc_score(_yt, got) > 0.7
    wide = angel.data.from_array(np.hstack([dense, np.ones((dense.shape[0], 2))]))
    with pytest.raises(InvalidArgumentError, match=r"50 features.*expecting 48"):
        fm.predict(wide)
    # training from dask arrays (from a Dataset: the FFM test's libffm file)
    fm3 = models.FMClassifier(solver="ma-sgd", learning_rate=0.05, power_t=0.0, max_iter=2).fit(
        da.from_array(X.toarray(), chunks=(1000, -1)), da.from_array(y, chunks=1000)
    )
    assert roc_auc_score(y, fm3.decision_function(X)) > 0.75


def test_partial_fit_save_load_and_pickle(client: Client, pairs, tmp_path) -> None:
    X, y, Xt, _yt = pairs
    fm = models.FMClassifier(solver="adam", learning_rate=0.05, batch_size=500)
    fm.partial_fit(X, y, classes=[0, 1])
    fm.partial_fit(X, y)
    assert fm.t_ == 2 and list(fm.history_.epoch) == [1, 2]
    want = fm.predict_proba(Xt)
    fm.save(str(tmp_path / "fm"))
    back = models.load(str(tmp_path / "fm"))
    assert type(back) is models.FMClassifier and back.t_ == 2
    np.testing.assert_allclose(back.predict_proba(Xt), want, rtol=1e-6)
    assert set(back._arrays["state"]) == {"m", "v", "t"}
    back.partial_fit(X, y)  # continues the clock and the Adam state
    assert back.t_ == 3 and list(back.history_.epoch) == [1, 2, 3]
    clone = pickle.loads(pickle.dumps(fm))
    np.testing.assert_allclose(clone.predict_proba(Xt), want)


def test_bad_input_is_refused_and_the_model_is_unchanged(client: Client, pairs) -> None:
    X, y, _Xt, _yt = pairs
    fm = models.FMClassifier(solver="adam", max_iter=1, batch_size=500).fit(X, y)
    before = np.asarray(fm.ps_array.get()).copy()
    Xn = X.toarray()
    Xn[7, 3] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        fm.partial_fit(Xn, y)
    dn = da.from_array(Xn, chunks=(1000, -1))
    with pytest.raises(InvalidArgumentError, match="X: expected finite values"):
        fm.partial_fit(dn, da.from_array(y, chunks=1000))
    wide = angel.data.from_array(np.hstack([X.toarray(), np.ones((X.shape[0], 2))]), y)
    with pytest.raises(InvalidArgumentError, match="features"):
        fm.partial_fit(wide)
    with pytest.raises(InvalidArgumentError, match="exactly 2 classes"):
        models.FMClassifier(max_iter=1).fit(X, np.arange(X.shape[0]) % 3)
    with pytest.raises(InvalidArgumentError, match="n_factors"):
        fm.set_params(n_factors=0).partial_fit(X, y)
    fm.set_params(n_factors=8)
    np.testing.assert_array_equal(np.asarray(fm.ps_array.get()), before)
    assert fm.t_ == 1


def _write_ffm(path, X, y) -> None:  # type: ignore[no-untyped-def]
    """Planted rows as libsvm-ffm lines: feature j is in field j // 8."""
    X = X.tocsr()
    with open(path, "w") as f:
        for r in range(X.shape[0]):
            cols = X.indices[X.indptr[r] : X.indptr[r + 1]]
            f.write(f"{y[r]} " + " ".join(f"{j // 8}:{j}:1" for j in cols) + "\n")


def test_ffm_fields_from_a_libffm_file_a_dataframe_and_bad_maps(
    client: Client, pairs, tmp_path
) -> None:
    X, y, Xt, yt = pairs
    fields = np.arange(X.shape[1]) // 8
    _write_ffm(tmp_path / "train.ffm", X, y)
    _write_ffm(tmp_path / "test.ffm", Xt, yt)
    ds = angel.data.read_libffm(str(tmp_path / "train.ffm"))
    np.testing.assert_array_equal(ds.fields, fields)
    ffm = models.FFMClassifier(learning_rate=0.05, power_t=0.0, max_iter=4, validation_fraction=0.1)
    ffm.fit(ds)  # fields from the file
    np.testing.assert_array_equal(ffm.fields_, fields)
    assert ffm.classes_.tolist() == [0.0, 1.0]  # the labels the Dataset carries
    assert ffm.factors_.shape == (48, 6 * 4)
    want = ffm.decision_function(Xt)
    auc = roc_auc_score(yt, want)
    auc_lr = roc_auc_score(yt, SkLR().fit(X, y).predict_proba(Xt)[:, 1])
    assert auc > 0.9 and auc > auc_lr + 0.05, (auc, auc_lr)
    assert {"val_auc", "train_loss"} <= set(ffm.history_)
    with dask.config.set(
        {"daskangel.data.split-bytes": (tmp_path / "test.ffm").stat().st_size // 3}
    ):
        tds = angel.data.read_libffm(str(tmp_path / "test.ffm")).persist(n_partitions=2)
    np.testing.assert_allclose(np.asarray(ffm.decision_function(tds)), want, rtol=1e-5, atol=1e-6)
    # a bad field map is refused before anything on the PS changes
    before = np.asarray(ffm.ps_array.get()).copy()
    with pytest.raises(InvalidArgumentError, match="misses features: it has 47 entries"):
        ffm.set_params(fields=fields[:-1]).partial_fit(X, y)
    with pytest.raises(InvalidArgumentError, match="differ from the field map"):
        ffm.set_params(fields=fields[::-1]).partial_fit(X, y)
    with pytest.raises(InvalidArgumentError, match="needs the field of every feature"):
        models.FFMClassifier(max_iter=1).fit(X, y)
    np.testing.assert_array_equal(np.asarray(ffm.ps_array.get()), before)
    # column groups of a DataFrame
    df = pd.DataFrame(X[:1000].toarray(), columns=[f"c{j}" for j in range(48)])
    groups = {f"f{g}": [f"c{j}" for j in range(8 * g, 8 * g + 8)] for g in range(6)}
    f2 = models.FFMClassifier(fields=groups, max_iter=1).fit(df, y[:1000])
    np.testing.assert_array_equal(f2.fields_, fields)
    assert f2.predict(df.iloc[:5]).shape == (5,)
    five = dict(list(groups.items())[:5])
    with pytest.raises(InvalidArgumentError, match=r"columns \['c40'.* are in no group"):
        models.FFMClassifier(fields=five, max_iter=1).fit(df, y[:1000])
