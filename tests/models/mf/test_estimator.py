"""MatrixFactorization with SGD on a real LocalCluster: learning, predicting, recommending,
incremental training, saving; every optimiser and protocol."""

from __future__ import annotations

import pickle
from typing import Any

import dask
import numpy as np
import pandas as pd
import pytest
from distributed import Client
from sklearn.base import clone

import daskangel as angel
from daskangel import _snapshot_format as fmt
from daskangel.models import MatrixFactorization

from .conftest import FAST, bias_only_rmse

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def fitted(client: Client, data: Any) -> MatrixFactorization:
    train, test = data
    mf = MatrixFactorization(
        n_factors=8, max_iter=20, learning_rate=0.05, clocks_per_epoch=2, **FAST
    )
    return mf.fit(train, eval_set=test)


def test_sgd_learns_the_planted_factors(fitted: MatrixFactorization, data: Any) -> None:
    train, test = data
    rmse = fitted.rmse(test)
    assert rmse < 0.75 * bias_only_rmse(train, test)
    assert fitted.score(test) == pytest.approx(-rmse)
    h = fitted.history_
    assert list(h.epoch) == list(range(1, 21))
    assert h.train_rmse.iloc[-1] < h.train_rmse.iloc[0]
    assert h.eval_rmse.iloc[-1] == pytest.approx(rmse, rel=1e-4)  # last epoch = the model
    assert fitted.user_factors_.shape == (fitted.n_users_, 8)
    assert fitted.item_factors_.shape == (fitted.n_items_, 8)
    assert fitted.user_biases_.shape == (fitted.n_users_,)
    # the tasks reported every epoch all had finished (the dashboard's figures): the same
    # as history_ (the last one is reported by nobody: no clock follows it)
    rep = fitted.train_result_.history.dropna(subset=["epoch"]).drop_duplicates("epoch")
    assert rep.epoch.astype(int).tolist() == list(range(1, 20))
    want = h.set_index("epoch").loc[rep.epoch.astype(int), ["train_rmse", "eval_rmse"]]
    np.testing.assert_allclose(rep[["train_rmse", "eval_rmse"]], want, rtol=1e-9)


def test_predict_in_input_order_and_unknowns_never_nan(
    fitted: MatrixFactorization, data: Any
) -> None:
    _, test = data
    p = fitted.predict(test)
    rev = fitted.predict(test.iloc[::-1])
    np.testing.assert_allclose(p, rev[::-1])
    lo, hi = fitted.rating_range_
    assert (p >= lo).all() and (p <= hi).all()
    odd = pd.DataFrame({"user": [-5, 100, -5], "item": ["nope", "nope", "it3"]})
    q = fitted.predict(odd)
    assert np.isfinite(q).all()
    assert q[0] == pytest.approx(fitted.global_mean_)
    assert q[1] == pytest.approx(fitted.global_mean_ + fitted.user_biases_[0], rel=1e-5)
    arr = fitted.predict(test[["user", "item"]].to_numpy(dtype=object))
    np.testing.assert_allclose(arr, p)


def test_dask_pairs_give_a_dask_series(fitted: MatrixFactorization, data: Any) -> None:
    import dask.dataframe as dd

    _, test = data
    got = fitted.predict(dd.from_pandas(test, npartitions=3, sort=False))
    np.testing.assert_allclose(got.compute().values, fitted.predict(test), rtol=1e-6)


def test_recommend_and_similar_items(fitted: MatrixFactorization, data: Any) -> None:
    train, _ = data
    users = [train.user.iloc[0], 424242, train.user.iloc[1]]
    rec = fitted.recommend(users, n=5)
    assert list(rec.columns) == ["user", "rank", "item", "score"]
    assert rec.user.tolist() == [users[0]] * 5 + [424242] * 5 + [users[2]] * 5
    for u in (users[0], users[2]):
        mine = rec[rec.user == u]
        assert mine["rank"].tolist() == [1, 2, 3, 4, 5]
        assert (np.diff(mine.score.values) <= 1e-9).all()
        assert not set(mine.item) & set(train[train.user == u].item)  # seen ones left out
        p = fitted.predict(pd.DataFrame({"user": [u] * 5, "item": mine.item.values}))
        unclipped = np.minimum(mine.score.values, fitted.rating_range_[1])
        np.testing.assert_allclose(np.minimum(p, fitted.rating_range_[1]), unclipped, rtol=1e-4)
    anyone = fitted.recommend(users[:1], n=5, exclude_seen=False)
    assert len(anyone) == 5
    sim = fitted.similar_items(["it1", "it2"], n=4)
    assert list(sim.columns) == ["item", "rank", "similar", "score"]
    assert "it1" not in set(sim[sim["item"] == "it1"].similar)
    assert (sim.score <= 1 + 1e-6).all()
    with pytest.raises(angel.errors.InvalidArgumentError, match="not items this model"):
        fitted.similar_items(["nope"])


def test_pickle_save_load_and_clone(fitted: MatrixFactorization, data: Any, tmp_path: Any) -> None:
    _, test = data
    ref = fitted.predict(test)
    m2 = pickle.loads(pickle.dumps(fitted))
    np.testing.assert_allclose(m2.predict(test), ref, rtol=1e-6)
    assert len(m2.recommend([test.user.iloc[0]], n=3, exclude_seen=False)) == 3
    fitted.save(str(tmp_path / "m"))
    m3 = angel.models.load(str(tmp_path / "m"))
    np.testing.assert_allclose(m3.predict(test), ref, rtol=1e-6)
    assert m3.user_ids_.tolist() == fitted.user_ids_.tolist()
    assert m3.item_ids_.tolist() == fitted.item_ids_.tolist()
    pd.testing.assert_frame_equal(m3.history_, fitted.history_)
    with pytest.raises(angel.errors.InvalidArgumentError, match="exclude_seen"):
        m3.recommend([test.user.iloc[0]])
    c = clone(fitted)
    assert c.get_params() == fitted.get_params() and not hasattr(c, "n_users_")
    m3.close()


def test_partial_fit_adds_users_and_items(client: Client, data: Any) -> None:
    train, _ = data
    mf = MatrixFactorization(n_factors=4, max_iter=3, **FAST).fit(train)
    nu, ni = mf.n_users_, mf.n_items_
    before = mf.user_factors_.copy()
    new = pd.DataFrame({"user": [1, 1, 2], "item": ["it0", "zz", "zz"], "rating": [4.0, 2, 3]})
    mf.partial_fit(new)
    assert (mf.n_users_, mf.n_items_) == (nu + 2, ni + 1)
    assert mf.user_ids_[-2:].tolist() == [1, 2] and mf.item_ids_[-1] == "zz"
    assert len(mf.history_) == 4 and mf.t_ == 4
    unchanged = mf.user_factors_[:nu]
    np.testing.assert_allclose(unchanged, before, rtol=1e-6)  # the new ratings touch 2 new users
    assert np.isfinite(mf.predict(new)).all()


def test_sgd_fit_resumes_mid_epoch_to_the_same_model(
    client: Client, data: Any, tmp_path: Any
) -> None:
    """fit(..., resume=version) from the snapshot taken at clock 3 (mid-epoch 2 of 3,
    two clocks an epoch; the users' rows were written before it) ends, one task
    under BSP, with exactly the factors and the history of the fit that ran through."""
    train, _ = data
    url = tmp_path / "ckpt"
    kw: dict[str, Any] = {"n_factors": 4, "max_iter": 3, "n_tasks": 1, "sync": "bsp"}
    kw["clocks_per_epoch"] = 2
    with angel.PSContext(client, snapshot=str(url), snapshot_every=3) as ps:
        ref = MatrixFactorization(ps=ps, **kw, **FAST).fit(train)
        want = (ref.user_factors_, ref.item_factors_, ref.history_.to_numpy(float))
    versions = [str(v) for v in sorted(url.iterdir()) if v.name.startswith("v")]
    at3 = next(v for v in versions if fmt.read_manifest(v).get("clock") == 3)
    with angel.PSContext(client) as fresh:
        got = MatrixFactorization(ps=fresh, **kw, **FAST).fit(train, resume=at3)
        assert int(got.train_result_.history.clock.min()) == 3
        np.testing.assert_array_equal(got.user_factors_, want[0])
        np.testing.assert_array_equal(got.item_factors_, want[1])
        np.testing.assert_array_equal(got.history_.to_numpy(float), want[2])


@pytest.mark.parametrize("optimizer", ["adagrad", "adarevision"])
def test_server_side_optimisers_learn(client: Client, data: Any, optimizer: str) -> None:
    train, test = data
    mf = MatrixFactorization(
        n_factors=8,
        max_iter=15,
        optimizer=optimizer,
        batch_size=500,
        clocks_per_epoch=2,
        **FAST,
    ).fit(train, eval_set=test)
    assert mf._arrays["rule"] in ("AdaGrad", "AdaRevision")
    assert mf.rmse(test) < 0.9 * bias_only_rmse(train, test)
    assert mf.history_.eval_rmse.iloc[-1] < mf.history_.eval_rmse.iloc[0]


@pytest.mark.parametrize("sync", ["ssp:1", "asp"])
def test_ssp_and_asp(client: Client, data: Any, sync: str) -> None:
    train, test = data
    # SSP: every clock pulls all its rows, then trains ungrouped (as at scale, where a
    # clock has many ratings per row); ASP: the pipelined pull-group path
    group = 0 if sync == "ssp:1" else 10**9
    with dask.config.set({"daskangel.models.mf.group-ratings": group}):
        mf = MatrixFactorization(
            n_factors=8,
            max_iter=20,
            learning_rate=0.05,
            clocks_per_epoch=2,
            sync=sync,
            validation_fraction=0.1,
            **FAST,
        ).fit(train)
    assert mf.rmse(test) < 0.75 * bias_only_rmse(train, test)
    assert "val_rmse" in mf.history_


def test_item_bands_learn_as_well_as_one_band(client: Client) -> None:
    # dense enough that a clock trains >= group-ratings ratings per row of its band: the
    # kernel then walks the band's blocks itself (sgd_blocks) instead of the order
    from .conftest import planted_ratings, split

    train, test = split(planted_ratings(n_users=400, n_items=12, density=1.0, seed=2))
    rmse = {}
    for on in (True, False):
        with dask.config.set({"daskangel.models.mf.item-bands": on}):
            mf = MatrixFactorization(n_factors=4, max_iter=15, learning_rate=0.05, **FAST)
            mf.fit(train)
        assert mf.history_.train_rmse.iloc[-1] < mf.history_.train_rmse.iloc[0]
        rmse[on] = mf.rmse(test)
        mf.close()
    assert rmse[True] < 0.75 * bias_only_rmse(train, test)
    assert rmse[True] == pytest.approx(rmse[False], abs=0.05)
