"""ma-sgd on stored rows in place against the prepared (localised) path."""

from __future__ import annotations

from typing import Any

import dask
import numpy as np
import pytest
import scipy.sparse as sp
from distributed import Client
from hypothesis import given, settings
from hypothesis import strategies as st

import daskangel as angel
from daskangel import models
from daskangel.data._batch import CSRBatch
from daskangel.errors import InvalidArgumentError
from daskangel.models.linear._inplace import in_place_rows
from daskangel.models.linear._kernels import HINGE, LOGISTIC, SQUARED
from daskangel.models.linear._task import Plan, split_rows

from ..conftest import planted

pytestmark = pytest.mark.timeout(240)


def _plan(kind: int, alpha: float, average: bool, has_bias: bool) -> Plan:
    return Plan(
        weights="w", metrics="m", n_features=0, n_outputs=1, kind=kind, eps=1.0,
        has_bias=has_bias, task="classifier", classes=(0.0, 1.0), logloss=kind == LOGISTIC,
        solver="ma-sgd", eta0=0.1, power_t=0.5, alpha=alpha, l1=0.0, batch=1,
        local_steps=None, epochs=1, epoch0=0, val_fraction=0.2, seed=0, train_rows=(),
        rounds=1, tol=None, patience=1, monitor="val_loss", prune=True, nbins=64,
        average=average,
    )  # fmt: skip


@settings(max_examples=40, deadline=None)
@given(
    n_rows=st.integers(1, 80),
    kind=st.sampled_from([LOGISTIC, HINGE, SQUARED]),
    alpha=st.sampled_from([0.0, 1e-3, 20.0]),  # 20: the scale renormalises every step
    average=st.booleans(),
    has_bias=st.booleans(),
    fraction=st.sampled_from([0.0, 0.3]),
    seed=st.integers(0, 5),
)
def test_in_place_steps_equal_the_prepared_path(
    n_rows: int,
    kind: int,
    alpha: float,
    average: bool,
    has_bias: bool,
    fraction: float,
    seed: int,
) -> None:
    """The same rows in the same order give the same weights, loss and validation
    sums on stored rows (global indices) as on localised rows (slots), plain or
    adaptive."""
    n_features = 150
    rng = np.random.default_rng(seed)
    X = sp.random(n_rows, n_features, density=0.06, format="csr", random_state=seed)
    X.data = rng.normal(size=X.nnz).astype(np.float32)
    labels = rng.integers(0, 2, n_rows).astype(np.float32)
    rows = CSRBatch.from_arrays(X.indptr, X.indices, X.data, labels, n_features)
    kw: dict[str, Any] = dict(
        index=2, fraction=fraction, seed=seed, n_features=n_features, has_bias=has_bias
    )
    ref = split_rows(rows, shuffle=False, **kw)
    got = in_place_rows(rows, block=3, streams=2, **kw)
    np.testing.assert_array_equal(got.keys, ref.keys)
    np.testing.assert_array_equal(labels[got.train_ids], ref.train.labels)
    np.testing.assert_array_equal(labels[got.val_ids], ref.val.labels)
    plan = _plan(kind, alpha, average, has_bias)
    y = 2.0 * labels.astype(np.float64) - 1.0
    ref.y_train, ref.y_val, got.y = y[got.train_ids], y[got.val_ids], y
    order = got.epoch_order([seed, 0, 2])
    assert sorted(order.tolist()) == got.train_ids.tolist()
    local = np.searchsorted(got.train_ids, order)  # the same rows as prepared positions
    W0 = rng.normal(size=(ref.keys.size, 1)) * 0.1
    Wr, Wg = W0.copy(), W0.copy()
    eta = 0.05
    loss_r = ref.local_sgd(local, Wr, plan, eta)
    loss_g = got.local_sgd(order, Wg, plan, eta)
    assert loss_g == pytest.approx(loss_r, rel=1e-12, abs=1e-12)
    np.testing.assert_allclose(Wg, Wr, rtol=1e-10, atol=1e-12)
    # adaptive=True (AdaGrad, lazy L2 and L1): the packed kernel on global indices
    G0 = rng.random((ref.keys.size, 1))
    ada = Plan(**{**plan.__dict__, "adaptive": True, "l1": 1e-3})
    Wr, Wg, Gr, Gg = W0.copy(), W0.copy(), G0.copy(), G0.copy()
    loss_r = ref.local_adagrad(local, Wr, Gr, ada, eta)
    loss_g = got.local_adagrad(order, Wg, Gg, ada, eta)
    assert loss_g == pytest.approx(loss_r, rel=1e-12, abs=1e-12)
    np.testing.assert_allclose(Wg, Wr, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(Gg, Gr, rtol=1e-12)
    ev_r, ev_g = ref.evaluate(Wr, plan), got.evaluate(Wg, plan)
    if ev_r is None:
        assert ev_g is None and got.val_ids.size == 0
    else:
        assert ev_g is not None
        np.testing.assert_allclose(ev_g[0], ev_r[0], rtol=1e-10, atol=1e-12)
        np.testing.assert_array_equal(ev_g[1], ev_r[1])


@settings(max_examples=60, deadline=None)
@given(n=st.integers(0, 300), block=st.integers(1, 20), streams=st.integers(1, 9))
def test_epoch_order_interleaves_blocks_of_adjacent_stored_rows(
    n: int, block: int, streams: int
) -> None:
    """Every row once; a block's rows in storage order, ``streams`` apart (interleaved
    with the other blocks of its group, fewer near the end); fresh each epoch."""
    rows = CSRBatch.from_arrays(np.arange(n + 1), np.arange(n), np.ones(n), np.zeros(n), n)
    d = in_place_rows(
        rows, index=0, fraction=0.0, seed=0, n_features=n, has_bias=False, block=block,
        streams=streams,
    )  # fmt: skip
    o = d.epoch_order([0, 1, 0])
    assert sorted(o.tolist()) == list(range(n))
    where = np.argsort(o)  # where each stored row comes in the epoch
    for b in range(0, n, block):
        gaps = np.diff(where[b : b + block])
        assert ((gaps >= 1) & (gaps <= streams)).all()
    if n // block >= 4:
        assert (d.epoch_order([0, 2, 0]) != o).any()  # a fresh order each epoch


def _cached_kinds(dask_worker: Any) -> list[str]:
    from daskangel.models._core import PREPARED as _PREPARED

    return sorted(type(e[1]).__name__ for e in _PREPARED.entries.values())


@pytest.mark.parametrize("in_place", [True, False])
def test_fit_in_place_or_prepared_recovers_the_planted_model(
    client: Client, in_place: bool
) -> None:
    """The driver's config picks the path; both fit the planted model alike, and a
    dataset spilled to disk always takes the prepared path."""
    X, y, w = planted(n=3000)
    for level in ("memory", "disk"):
        ds = angel.data.from_array(X, y).persist(n_partitions=2, storage=level)
        with dask.config.set({"daskangel.models.in-place": in_place}):
            clf = models.LogisticRegression(solver="ma-sgd", max_iter=6, random_state=1).fit(ds)
        kinds = {k for v in client.run(_cached_kinds).values() for k in v}
        expected = "InPlaceData" if in_place and level == "memory" else "TaskData"
        assert expected in kinds, (level, kinds)
        assert float(np.corrcoef(clf.coef_.ravel(), w)[0, 1]) > 0.99
        assert clf.score(X, y) > 0.96
        assert clf.history_.val_auc.iloc[-1] > 0.99
        clf.close()
        ds.release()
        del ds
        client.run(lambda: __import__("gc").collect())


def test_bad_in_place_block_config_is_refused_with_its_key(client: Client) -> None:
    X, y, _ = planted(n=300)
    clf = models.LogisticRegression(max_iter=1)
    bad = [
        ("in-place-block", 0, r"expected an int >= 1, got 0"),
        ("in-place-streams", 0, r"expected an int >= 1, got 0"),
        ("in-place", "no", r"expected true or false, got 'no'"),
        ("in-place-workspace", "lots", r"expected a byte size .*got 'lots'"),
    ]
    for key, value, message in bad:
        with (
            dask.config.set({f"daskangel.models.{key}": value}),
            pytest.raises(ValueError, match=rf"daskangel.models.{key}: {message}"),
        ):
            clf.fit(X, y)
        assert not getattr(clf, "_arrays", None)


def test_adaptive_fit_takes_the_in_place_path_at_16_bytes_a_feature(client: Client) -> None:
    """AdaGrad's in-place workspace is 16 bytes a feature (``_adagrad16``): a budget of
    exactly ``(n_features + 1) * 16`` bytes keeps an adaptive fit on the stored rows,
    one byte less sends it to the prepared path."""
    X, y, w = planted(n=600, d=20)
    need = (X.shape[1] + 1) * 16
    for budget, expected in ((need - 1, "TaskData"), (need, "InPlaceData")):
        ds = angel.data.from_array(X, y).persist(n_partitions=2)
        before = [k for v in client.run(_cached_kinds).values() for k in v]
        with dask.config.set({"daskangel.models.in-place-workspace": budget}):
            clf = models.LogisticRegression(max_iter=2, random_state=0).fit(ds)
        after = [k for v in client.run(_cached_kinds).values() for k in v]
        assert after.count(expected) > before.count(expected), (budget, before, after)
        assert clf.adaptive == "auto" and float(np.corrcoef(clf.coef_.ravel(), w)[0, 1]) > 0.9
        clf.close()
        ds.release()


def _pulled(ps: Any) -> dict[str, int]:
    st = ps.status(max_age=0)
    t = st[st.kind == "task"]
    return {str(i): int(b) for i, b in zip(t.id, t.bytes_out, strict=True)}


def test_fresh_bsp_fit_pulls_nothing_before_its_first_pass(client: Client) -> None:
    """A fresh fit's weights and AdaGrad sums are zeros on the servers, and under BSP no
    task pushes before every task has passed the first read barrier: its tasks start
    from zeros without pulling them (the task counters see no pulled byte).  A warm
    start pulls the model it continues from: the weights and the sums of each task's
    keys (21 keys here)."""
    X, y, _ = planted(n=600, d=20)
    with angel.PSContext(client) as ps:
        est = models.LogisticRegression(max_iter=1, early_stopping=False, ps=ps, warm_start=True)
        est.fit(X, y)
        fresh = _pulled(ps)
        assert fresh and set(fresh.values()) == {0}, fresh
        first = est.coef_.copy()
        est.fit(X, y)  # warm start: continues from the fitted (non-zero) model
        warm = {k: v for k, v in _pulled(ps).items() if k not in fresh}
        assert len(warm) == len(fresh) and set(warm.values()) == {2 * 21 * 8}, warm
        assert not np.array_equal(est.coef_, first)
        est.close()


def _pushed(ps: Any) -> list[int]:
    st = ps.status(max_age=0)
    return sorted(int(b) for b in st[st.kind == "task"].bytes_in)


def test_dense_pushes_send_the_whole_vector_and_land_the_same_model(client: Client) -> None:
    """A ma-sgd task whose keys are at least ``daskangel.models.dense-push`` of the vector
    pushes the whole vector past the update buffer: the task counters see 8 bytes a
    feature (31 with the intercept here, 10 features unused) for each array a round
    where keyed pushes send 8 bytes a used key (21), and the model is the same (the
    servers add the same values: zeros outside the task's keys)."""
    X, y, _ = planted(n=600, d=20)
    X = np.hstack([X, np.zeros((X.shape[0], 10))])  # 20 used features of 30
    fits = {}
    for frac in (0.5, 0.0):
        with dask.config.set({"daskangel.models.dense-push": frac}), angel.PSContext(client) as ps:
            est = models.LogisticRegression(
                max_iter=2, early_stopping=False, ps=ps, random_state=0
            ).fit(X, y)
            fits[frac] = (est.coef_.copy(), est.intercept_.copy(), _pushed(ps))
            est.close()
    # 2 arrays (weights, AdaGrad's sums) x 2 rounds a task, 10 keys more each (the
    # counters also hold the epochs' metrics rows, the same in both fits)
    more = [a - b for a, b in zip(fits[0.5][2], fits[0.0][2], strict=True)]
    assert more and more == [2 * 2 * 10 * 8] * len(more), (fits[0.5][2], fits[0.0][2])
    # (the servers sum the two tasks' pushes in arrival order: rounding at 1e-16)
    np.testing.assert_allclose(fits[0.5][0], fits[0.0][0], rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(fits[0.5][1], fits[0.0][1], rtol=1e-12, atol=1e-15)


def test_bad_dense_push_config_is_refused_with_its_key(client: Client) -> None:
    X, y, _ = planted(n=100, d=4)
    for bad in (1.5, -0.1, "half", True):
        with (
            dask.config.set({"daskangel.models.dense-push": bad}),
            pytest.raises(
                InvalidArgumentError, match=r"daskangel\.models\.dense-push: expected a fraction"
            ),
        ):
            models.LogisticRegression().fit(X, y)
