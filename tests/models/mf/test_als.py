"""MatrixFactorization with solver='als' on a real LocalCluster: ALS-WR (explicit) and
Hu-Koren-Volinsky implicit ALS, local and distributed input, and the row-solve kernels."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest
from distributed import Client

import daskangel as angel
from daskangel.models import MatrixFactorization
from daskangel.models.mf._als_kernels import als_rows, cg_rows, gram

from .conftest import FAST, bias_only_rmse

pytestmark = pytest.mark.timeout(240)


def test_als_rows_solve_the_regularised_least_squares() -> None:
    rng = np.random.default_rng(0)
    K, n_rows, n_other = 3, 4, 6
    Y = rng.normal(size=(n_other, K + 1)).astype(np.float32)
    indptr = np.array([0, 3, 3, 7, 9])
    slot = np.array([0, 2, 5, 1, 2, 3, 4, 0, 5])
    r = rng.normal(size=9).astype(np.float32)
    X = np.ones((n_rows, K + 1), np.float32)
    lam, mu = 0.3, 0.5
    als_rows(indptr, slot, r, Y, X, mu, lam, True)
    for row in range(n_rows):
        s, e = indptr[row], indptr[row + 1]
        if s == e:
            assert (X[row] == 0).all()  # no ratings: the regulariser's minimiser
            continue
        A = np.concatenate([Y[slot[s:e], :K], np.ones((e - s, 1))], axis=1).astype(np.float64)
        t = r[s:e] - mu - Y[slot[s:e], K]
        want = np.linalg.solve(A.T @ A + lam * (e - s) * np.eye(K + 1), A.T @ t)
        np.testing.assert_allclose(X[row], want, rtol=1e-4, atol=1e-5)


def test_cg_rows_converge_to_the_weighted_solution() -> None:
    rng = np.random.default_rng(1)
    K, n_other, alpha, reg = 4, 8, 5.0, 0.1
    Y = rng.normal(size=(n_other, K + 1)).astype(np.float32)
    Y[:, K] = 0
    indptr, slot = np.array([0, 3]), np.array([1, 4, 6])
    r = np.array([1.0, 2.0, 1.0], np.float32)
    X = np.zeros((1, K + 1), np.float32)
    G = gram(Y, K) + reg * np.eye(K)
    cg_rows(indptr, slot, r, Y, X, G, alpha, 50)
    C = np.ones(n_other)
    C[slot] += alpha * r
    pref = np.zeros(n_other)
    pref[slot] = 1
    Yk = Y[:, :K].astype(np.float64)
    want = np.linalg.solve(Yk.T @ (C[:, None] * Yk) + reg * np.eye(K), Yk.T @ (C * pref))
    np.testing.assert_allclose(X[0, :K], want, rtol=1e-3, atol=1e-4)


@pytest.fixture(scope="module")
def fitted(client: Client, data: Any) -> MatrixFactorization:
    train, test = data
    return MatrixFactorization(n_factors=6, solver="als", max_iter=8, **FAST).fit(
        train, eval_set=test
    )


def test_explicit_als_learns_the_planted_factors(fitted: MatrixFactorization, data: Any) -> None:
    train, test = data
    rmse = fitted.rmse(test)
    assert rmse < 0.6 * bias_only_rmse(train, test)
    h = fitted.history_
    assert list(h.epoch) == list(range(1, 9))
    assert h.train_rmse.iloc[-1] < h.train_rmse.iloc[0]
    assert (np.diff(h.train_rmse.to_numpy()) <= 1e-4).all()  # exact solves never go up
    assert h.eval_rmse.iloc[-1] == pytest.approx(rmse, rel=1e-4)
    rep = fitted.train_result_.history.dropna(subset=["epoch"]).drop_duplicates("epoch")
    assert rep.epoch.astype(int).tolist() == list(range(1, 8))  # reported to the dashboard
    assert len(fitted.recommend([train.user.iloc[0]], n=3)) == 3


def test_dask_input_trains_the_same_model(
    client: Client, fitted: MatrixFactorization, data: Any
) -> None:
    import dask.dataframe as dd

    train, test = data
    m = MatrixFactorization(n_factors=6, solver="als", max_iter=8, **FAST).fit(
        dd.from_pandas(train, npartitions=3, sort=False)
    )
    np.testing.assert_allclose(m.predict(test), fitted.predict(test), rtol=1e-4, atol=1e-4)
    m.close()


def test_validation_and_partial_fit(client: Client, data: Any) -> None:
    train, _ = data
    m = MatrixFactorization(
        n_factors=4, solver="als", max_iter=3, validation_fraction=0.1, **FAST
    ).fit(train)
    assert "val_rmse" in m.history_ and m.history_.val_rmse.notna().all()
    new = pd.DataFrame({"user": [1, 1, 2], "item": ["it0", "zz", "zz"], "rating": [4.0, 2, 3]})
    m.partial_fit(new)
    assert m.item_ids_[-1] == "zz" and len(m.history_) == 4
    assert np.isfinite(m.predict(new)).all()
    m.close()


def test_implicit_als_ranks_held_out_positives_and_resumes(
    client: Client, data: Any, tmp_path: Any
) -> None:
    """Implicit ALS ranks held-out positives; a fit resumed in a fresh context from
    the snapshot its context took at clock 7 (of 12: mid-iteration, Gram blocks on
    the PS) ends with exactly the same factors and history (issue 20 item 4)."""
    train, test = data
    pos_tr, pos_te = train[train.rating > 3.3], test[test.rating > 3.3]
    kw: dict[str, Any] = {"n_factors": 6, "solver": "als", "feedback": "implicit", "max_iter": 6}
    url = str(tmp_path / "ckpt")
    with angel.PSContext(client, snapshot=url, snapshot_every=7) as ps:
        m = MatrixFactorization(ps=ps, **kw, **FAST).fit(pos_tr[["user", "item"]])
        _check_ranking(m, pos_tr, pos_te, train.item.nunique())
        ref = (m.user_factors_, m.item_factors_, m.history_.to_numpy(float))
    with angel.PSContext(client) as fresh:
        got = MatrixFactorization(ps=fresh, **kw, **FAST)
        got.fit(pos_tr[["user", "item"]], resume=url)
        assert int(got.train_result_.history.clock.min()) == 7
        np.testing.assert_array_equal(got.user_factors_, ref[0])
        np.testing.assert_array_equal(got.item_factors_, ref[1])
        np.testing.assert_array_equal(got.history_.to_numpy(float), ref[2])


def _check_ranking(m: Any, pos_tr: pd.DataFrame, pos_te: pd.DataFrame, n_items: int) -> None:
    h = m.history_
    assert h.loss.iloc[-1] < h.loss.iloc[0]
    users = sorted(set(pos_te.user) & set(pos_tr.user))
    rec = m.recommend(users, n=5)
    truth = pos_te.groupby("user").item.apply(set)
    hits = sum(len(set(g.item) & truth[u]) for u, g in rec.groupby("user"))
    precision = hits / (5 * len(users))
    seen = pos_tr.groupby("user").item.size().reindex(users).to_numpy()
    chance = float(np.mean(truth.reindex(users).map(len).to_numpy() / (n_items - seen)))
    assert precision > 2 * chance
    p = m.predict(pos_te[["user", "item"]])
    assert np.isfinite(p).all() and np.ptp(p) > 0.1  # scores, not clipped to the range [1, 1]


def test_als_refuses_stale_sync(client: Client, data: Any) -> None:
    train, _ = data
    with pytest.raises(angel.errors.InvalidArgumentError, match="sync: solver='als'"):
        MatrixFactorization(solver="als", sync="ssp:1", **FAST).fit(train)
