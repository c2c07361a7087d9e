"""The compiled kernels against plain numpy (no cluster)."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import roc_auc_score

from daskangel.data._batch import CSRBatch
from daskangel.errors import InvalidArgumentError
from daskangel.models._core import auc_from_hist, epoch_order, should_stop
from daskangel.models.linear._adagrad16 import MAX_ROWS, adagrad_delta, adagrad_ws
from daskangel.models.linear._adaptive import _adagrad_batch, adagrad_sgd
from daskangel.models.linear._kernels import (
    HINGE,
    HUBER,
    LOGISTIC,
    SOFTMAX,
    SQ_HINGE,
    SQUARED,
    batch_keys,
    eval_rows,
    eval_stats,
    grad_batch,
    grad_rows,
    margins,
    put_rows,
)
from daskangel.models.linear._local_sgd import _local_sgd_scaled, _local_sgd_scaled1, local_sgd
from daskangel.models.linear._task import split_rows


def _csr(n: int = 40, d: int = 12, seed: int = 0) -> sp.csr_matrix:
    rng = np.random.default_rng(seed)
    return sp.random(n, d, density=0.3, format="csr", random_state=rng, dtype=np.float64)


def _loss_np(kind: int, m: np.ndarray, y: np.ndarray, eps: float = 1.0) -> np.ndarray:
    if kind == LOGISTIC:
        return np.logaddexp(0, -y * m)
    if kind == HINGE:
        return np.maximum(0, 1 - y * m)
    if kind == SQ_HINGE:
        return np.maximum(0, 1 - y * m) ** 2
    r = m - y
    if kind == SQUARED:
        return 0.5 * r * r
    return np.where(np.abs(r) <= eps, 0.5 * r * r, eps * np.abs(r) - 0.5 * eps * eps)


@pytest.mark.parametrize("kind", [LOGISTIC, HINGE, SQ_HINGE, SQUARED, HUBER])
def test_grad_rows_matches_finite_differences(kind: int) -> None:
    X = _csr()
    rng = np.random.default_rng(1)
    y = rng.choice([-1.0, 1.0], X.shape[0]) if kind <= SQ_HINGE else rng.normal(size=X.shape[0])
    W = rng.normal(size=(X.shape[1] + 1, 1)) * 0.3
    rows = np.arange(X.shape[0])
    G = np.zeros_like(W)
    loss = grad_rows(X.indptr, X.indices, X.data, y, rows, W, kind, 1.0, True, G)
    m = X @ W[:-1, 0] + W[-1, 0]
    assert loss == pytest.approx(_loss_np(kind, m, y).sum())
    h = 1e-6
    for j in [0, 3, X.shape[1]]:
        Wp, Wm = W.copy(), W.copy()
        Wp[j] += h
        Wm[j] -= h
        fp = _loss_np(kind, X @ Wp[:-1, 0] + Wp[-1, 0], y).sum()
        fm = _loss_np(kind, X @ Wm[:-1, 0] + Wm[-1, 0], y).sum()
        assert G[j, 0] == pytest.approx((fp - fm) / (2 * h), rel=1e-4, abs=1e-6)


def test_softmax_gradient_and_margins() -> None:
    X = _csr()
    rng = np.random.default_rng(2)
    y = rng.integers(0, 3, X.shape[0]).astype(np.float64)
    W = rng.normal(size=(X.shape[1] + 1, 3))
    M = margins(X.indptr, X.indices, X.data, W, True)
    np.testing.assert_allclose(M, X @ W[:-1] + W[-1])
    G = np.zeros_like(W)
    loss = grad_rows(
        X.indptr, X.indices, X.data, y, np.arange(X.shape[0]), W, SOFTMAX, 0.0, True, G
    )
    P = np.exp(M - M.max(1, keepdims=True))
    P /= P.sum(1, keepdims=True)
    assert loss == pytest.approx(-np.log(P[np.arange(len(y)), y.astype(int)]).sum())
    P[np.arange(len(y)), y.astype(int)] -= 1
    np.testing.assert_allclose(G[:-1], X.T @ P, rtol=1e-10)
    np.testing.assert_allclose(G[-1], P.sum(0), rtol=1e-10)
    # a minibatch's: G scratch (garbage on its keys), W written from pulled float32 rows
    rows = np.array([4, 1, 7])
    keys = np.append(batch_keys(X.indptr, X.indices, rows, np.zeros(1, np.uint64)), X.shape[1])
    W2 = np.zeros_like(W)
    put_rows(W2, keys, W[keys].astype(np.float32))
    np.testing.assert_array_equal(W2[keys], W[keys].astype(np.float32))
    G2 = np.full_like(W, 7.0)
    lb, g = grad_batch(X.indptr, X.indices, X.data, y, rows, W2, SOFTMAX, 0.0, True, G2, keys, 0.5)
    G3 = np.zeros_like(W)
    lr = grad_rows(X.indptr, X.indices, X.data, y, rows, W2, SOFTMAX, 0.0, True, G3)
    assert lb == lr
    np.testing.assert_array_equal(g, 0.5 * G3[keys])


def test_local_sgd_lazy_l2_equals_eager_updates() -> None:
    """Per-row SGD with lazy regularisation gives the weights of the eager loop."""
    X = _csr(30, 8, 3)
    rng = np.random.default_rng(3)
    y = rng.choice([-1.0, 1.0], X.shape[0])
    W = rng.normal(size=(9, 1)) * 0.1
    order = rng.permutation(X.shape[0])
    eta, alpha = 0.1, 0.05
    lazy = W.copy()
    local_sgd(
        X.indptr, X.indices, X.data, y, order, lazy, LOGISTIC, 0.0, True, eta, alpha, 0.0, 1, False
    )
    eager = W.copy()
    for r in order:
        x = X[r].toarray().ravel()
        m = x @ eager[:-1, 0] + eager[-1, 0]
        d = -y[r] / (1 + np.exp(y[r] * m))
        eager[:-1, 0] -= eta * d * x
        eager[-1, 0] -= eta * d
        eager[:-1, 0] *= 1 - eta * alpha  # the step's decay (bias not regularised)
    np.testing.assert_allclose(lazy, eager, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize(("batch", "alpha", "l1"), [(1, 0.05, 0.0), (1, 0.0, 0.02), (3, 0.05, 0.0)])
def test_adagrad_lazy_regularisation_equals_eager_updates(
    batch: int, alpha: float, l1: float
) -> None:
    """``adaptive=True``'s local AdaGrad (the packed one-row kernel and the general
    minibatch one) gives the weights and squared-gradient sums of the eager loop:
    step ``-eta g / sqrt(G)`` after ``G += g**2``, then every feature's L2 decay and
    L1 shrinkage at its own step ``eta / sqrt(G)``."""
    X = _csr(30, 8, 4)
    rng = np.random.default_rng(4)
    y = rng.choice([-1.0, 1.0], X.shape[0])
    W = rng.normal(size=(9, 1)) * 0.3
    G = np.zeros((9, 1))
    G[:4] = rng.random((4, 1))  # sums from earlier rounds; the others' step is eta
    order = rng.permutation(X.shape[0])
    eta = 0.2
    got = []
    for kernel in (adagrad_sgd, _adagrad_batch):  # the dispatch (packed at batch 1), general
        Wl, Gl = W.copy(), G.copy()
        kernel(X.indptr, X.indices, X.data, y, order, Wl, Gl, np.arange(8),
               LOGISTIC, 0.0, True, eta, alpha, l1, batch)  # fmt: skip
        got.append((Wl, Gl))
    w, g = W[:, 0].copy(), G[:, 0].copy()
    Xd = X.toarray()
    for a in range(0, len(order), batch):
        rows = order[a : a + batch]
        m = Xd[rows] @ w[:-1] + w[-1]
        d = -y[rows] / (1 + np.exp(y[rows] * m))
        grad = np.append(Xd[rows].T @ d, d.sum()) / len(rows)
        on = np.append(np.abs(Xd[rows]).sum(0) > 0, True) & (grad != 0)
        g[on] += grad[on] ** 2
        w[on] -= eta * grad[on] / np.sqrt(g[on])
        rate = np.where(g > 0, eta / np.sqrt(np.where(g > 0, g, 1.0)), eta)[:-1]
        w[:-1] *= 1 - rate * alpha  # the bias is not regularised
        w[:-1] = np.sign(w[:-1]) * np.maximum(np.abs(w[:-1]) - rate * l1, 0.0)
    # the packed kernel keeps the weights float32 during the pass (see _adagrad16)
    for (Wl, Gl), rtol in zip(got, (1e-6, 1e-9), strict=True):
        np.testing.assert_allclose(Gl[:, 0], g, rtol=rtol)
        np.testing.assert_allclose(Wl[:, 0], w, rtol=rtol, atol=rtol * 1e-3)


@pytest.mark.parametrize(("alpha", "l1"), [(0.0, 0.0), (0.05, 0.0), (0.0, 0.02)])
def test_adagrad16_untouched_weights_come_back_exactly_and_chunks_agree(
    alpha: float, l1: float
) -> None:
    """The 16-byte workspace rounds weights to float32 only for the pass: keys no row
    touches come back bit for bit without regularisation (with it every key decays),
    whatever the workspace held; rows cut in chunks (the float32 last-step counter's
    limit) give the same weights as one pass, to float32's precision."""
    X = _csr(50, 12, 7).tolil()
    X[:, [3, 9]] = 0.0  # two features no row touches
    X = X.tocsr()
    X.eliminate_zeros()
    rng = np.random.default_rng(7)
    y = rng.choice([-1.0, 1.0], X.shape[0])
    W0 = rng.normal(size=(13, 1)) * np.pi  # not float32 values
    G0 = rng.random((13, 1))
    order = rng.permutation(X.shape[0])
    out = []
    for chunk in (MAX_ROWS, 7, 1):
        W, G = W0.copy(), G0.copy()
        ws = rng.normal(size=(13, 2))  # any content
        adagrad_ws(X.indptr, X.indices, X.data, y, order, ws, np.arange(13), W, G,
                   LOGISTIC, 0.0, True, 0.2, alpha, l1, chunk)  # fmt: skip
        out.append((W, G))
    W, G = out[0]
    if alpha + l1 == 0:
        np.testing.assert_array_equal(W[[3, 9]], W0[[3, 9]])
    for Wc, Gc in out[1:]:
        np.testing.assert_allclose(Wc, W, rtol=1e-5, atol=1e-9)  # (a rounding a chunk)
        np.testing.assert_allclose(Gc, G, rtol=1e-6)


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 1000),
    alpha=st.sampled_from([0.0, 0.05]),
    l1=st.sampled_from([0.0, 0.02]),
    share=st.sampled_from([1.0, 0.375]),
    has_bias=st.booleans(),
)
def test_adagrad_delta_is_the_pushed_change_of_adagrad_ws(
    seed: int, alpha: float, l1: float, share: float, has_bias: bool
) -> None:
    """What ma-sgd pushes, made in the workspace (``adagrad_delta``), equals
    ``(W - W0) * share`` and ``(G - G0) * share`` of ``adagrad_ws`` from the same start:
    the sums and the intercept to the bit, a weight to a rounding of ``W0`` (the old
    way added the float32 change to ``W0`` and took ``W0`` off again); ``W0`` and
    ``G0`` are left as they were."""
    X = _csr(40, 12, seed)
    rng = np.random.default_rng(seed)
    y = rng.choice([-1.0, 1.0], X.shape[0])
    W0 = rng.normal(size=(13, 1)) * np.pi
    G0 = rng.random((13, 1)) * 10
    order = rng.permutation(X.shape[0])
    slots = np.arange(13 if has_bias else 12)
    W0, G0 = W0[: slots.shape[0]], G0[: slots.shape[0]]
    W, G = W0.copy(), G0.copy()
    args = (X.indptr, X.indices, X.data, y, order)
    loss = adagrad_ws(*args, np.empty((13, 2)), slots, W, G, LOGISTIC, 0.0, has_bias, 0.2,
                      alpha, l1)  # fmt: skip
    W0c, G0c = W0.copy(), G0.copy()
    loss2, dW, dG = adagrad_delta(*args, np.empty((13, 2)), slots, W0, G0, LOGISTIC, 0.0,
                                  has_bias, 0.2, alpha, l1, share)  # fmt: skip
    np.testing.assert_array_equal(W0, W0c)
    np.testing.assert_array_equal(G0, G0c)
    assert loss2 == loss
    np.testing.assert_array_equal(dG, (G - G0) * share)
    if has_bias:
        assert dW[-1, 0] == (W[-1, 0] - W0[-1, 0]) * share
    np.testing.assert_allclose(dW, (W - W0) * share, rtol=0, atol=4e-16 * np.abs(W0).max())


@pytest.mark.parametrize("batch", [1, 4])
def test_local_sgd_lazy_average_equals_eager_mean_of_iterates(batch: int) -> None:
    """``average=True`` ends at the mean of the iterates after the steps of the
    second half of the pass (L2 applied lazily)."""
    X = _csr(30, 8, 3)
    rng = np.random.default_rng(4)
    y = rng.choice([-1.0, 1.0], X.shape[0])
    W = rng.normal(size=(9, 1)) * 0.1
    order = rng.permutation(X.shape[0])
    eta, alpha = 0.1, 0.05
    lazy = W.copy()
    _loss, steps = local_sgd(
        X.indptr,
        X.indices,
        X.data,
        y,
        order,
        lazy,
        LOGISTIC,
        0.0,
        True,
        eta,
        alpha,
        0.0,
        batch,
        True,
    )
    eager = W[:, 0].copy()
    total = np.zeros_like(eager)
    n_steps = -(-len(order) // batch)
    t0 = n_steps // 2
    for t, i in enumerate(range(0, len(order), batch)):
        rows = order[i : i + batch]
        Xb = X[rows].toarray()
        m = Xb @ eager[:-1] + eager[-1]
        d = -y[rows] / (1 + np.exp(y[rows] * m))
        eager[:-1] -= eta * (Xb.T @ d) / len(rows)
        eager[-1] -= eta * d.sum() / len(rows)
        eager[:-1] *= 1 - eta * alpha
        if t >= t0:
            total += eager
    assert steps == n_steps
    np.testing.assert_allclose(lazy[:, 0], total / (n_steps - t0), rtol=1e-9, atol=1e-12)


def test_batch_keys_and_split_rows() -> None:
    X = _csr(10, 20, 4)
    bits = np.zeros(1, np.uint64)
    for rows in ([1, 4], [0, 2, 3, 9], []):
        keys = batch_keys(X.indptr, X.indices, np.array(rows, np.int64), bits)
        assert keys.tolist() == sorted(set().union(*(X[r].indices.tolist() for r in rows)))
        assert not bits.any()  # zeroed again for the next call
    wide = sp.csr_matrix(
        (np.ones(5), np.array([700, 3, 64, 63, 129]), np.array([0, 3, 5])), shape=(2, 701)
    )
    bits = np.zeros(11, np.uint64)
    assert batch_keys(wide.indptr, wide.indices, np.array([1, 0]), bits).tolist() == [
        3,
        63,
        64,
        129,
        700,
    ]
    rows = CSRBatch.from_arrays(X.indptr, X.indices, X.data, np.arange(10), 20)
    d = split_rows(rows, index=0, fraction=0.3, seed=0, n_features=20, has_bias=True)
    assert d.train.n_rows == 7 and d.val.n_rows == 3
    assert d.keys[-1] == 20
    back = d.keys[d.train.indices]
    orig = np.concatenate([X[int(r)].indices for r in d.y_train])
    assert sorted(back.tolist()) == sorted(orig.tolist())


def test_auc_from_histograms_matches_sklearn() -> None:
    rng = np.random.default_rng(5)
    X = _csr(400, 10, 5)
    y = rng.choice([-1.0, 1.0], 400)
    W = rng.normal(size=(11, 1))
    st, hist = eval_stats(X.indptr, X.indices, X.data, y, W, LOGISTIC, 0.0, True, 4096)
    m = X @ W[:-1, 0] + W[-1, 0]
    assert st[0] == 400
    assert st[2] == ((m > 0) == (y > 0)).sum()
    assert auc_from_hist(hist[0], hist[1]) == pytest.approx(roc_auc_score(y > 0, m), abs=2e-3)


@pytest.mark.parametrize("kind", [LOGISTIC, HINGE])
def test_eval_rows_sums_over_shuffled_rows_with_empty_ones(kind: int) -> None:
    """Validation sums of rows in any order, empty rows and orders shorter than the
    row prefetch's look-ahead included: rows, the loss of ``kind``, the log-loss
    (its own sum, also when ``kind`` is logistic)."""
    rng = np.random.default_rng(6)
    X = _csr(60, 10, 6).tolil()
    X[[3, 17, 59], :] = 0.0  # empty rows (no entries at all)
    X = X.tocsr()
    y = rng.choice([-1.0, 1.0], 60)
    W = rng.normal(size=(11, 1))
    m = X @ W[:-1, 0] + W[-1, 0]
    for rows in (rng.permutation(60), np.array([17, 2]), np.array([59]), np.arange(0)):
        st, _hist = eval_rows(X.indptr, X.indices, X.data, y, rows, W, kind, 0.0, True, 64)
        assert st[0] == rows.shape[0]
        assert st[1] == pytest.approx(_loss_np(kind, m[rows], y[rows]).sum(), rel=1e-12)
        assert st[5] == pytest.approx(np.logaddexp(0, -y[rows] * m[rows]).sum(), rel=1e-12)


def test_should_stop_rule() -> None:
    h = [{"val_loss": v} for v in (1.0, 0.5, 0.49995, 0.4999, 0.49999)]
    assert should_stop(h, "val_loss", 1e-3, 3)
    assert not should_stop(h, "val_loss", 1e-6, 3)
    assert not should_stop(h[:3], "val_loss", 1e-3, 3)


def test_localise_matches_unique() -> None:
    """Bitmap + popcount ranks equal ``np.unique``'s, at word edges and the last feature."""
    rng = np.random.default_rng(5)
    n_features = 1000
    idx = np.concatenate([rng.integers(0, n_features, 500), [0, 63, 64, 127, 128, 999]])
    idx = idx.astype(np.int32)
    rows = CSRBatch.from_arrays([0, idx.size], idx, np.ones(idx.size), [1.0], n_features)
    d = split_rows(rows, index=0, fraction=0.0, seed=0, n_features=n_features, has_bias=False)
    u, inv = np.unique(idx, return_inverse=True)
    assert d.keys.tolist() == u.tolist()
    assert d.train.indices.tolist() == inv.ravel().tolist()


@pytest.mark.parametrize("kind", [LOGISTIC, HINGE, SQUARED, HUBER])
@pytest.mark.parametrize("average", [False, True])
def test_local_sgd_one_output_path_equals_general(kind: int, average: bool) -> None:
    """The flat K = 1, batch = 1 kernel gives the general scaled kernel's result."""
    X = _csr(50, 10, 6)
    rng = np.random.default_rng(7)
    y = rng.choice([-1.0, 1.0], X.shape[0])
    W = rng.normal(size=(11, 1)) * 0.1
    order = rng.permutation(X.shape[0])
    a, b = W.copy(), W.copy()
    args = (X.indptr, X.indices, X.data, y, order)
    la, _ = _local_sgd_scaled1(*args, a, kind, 0.5, True, 0.1, 0.05, average)
    lb, _ = _local_sgd_scaled(*args, b, kind, 0.5, True, 0.1, 0.05, 1, average)
    assert la == pytest.approx(lb)
    np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


def test_epoch_order_and_shuffled_split() -> None:
    o = epoch_order(1000, [1, 2, 3], block=64)
    assert sorted(o.tolist()) == list(range(1000))
    assert not np.array_equal(o, epoch_order(1000, [1, 2, 4], block=64))
    X = _csr(10, 20, 4)
    rows = CSRBatch.from_arrays(X.indptr, X.indices, X.data, np.arange(10), 20)
    d = split_rows(rows, index=0, fraction=0.3, seed=0, n_features=20, has_bias=True, shuffle=True)
    assert sorted(d.y_train.tolist() + d.y_val.tolist()) == list(range(10))
    back = d.keys[d.train.indices]
    orig = np.concatenate([X[int(r)].indices for r in d.y_train])
    assert back.tolist() == orig.tolist()  # rows in the shuffled order, each intact


@settings(max_examples=15, deadline=None)
@given(
    st.integers(0, 700),
    st.sampled_from([1, 2, 16, 64]),
    st.sampled_from([1, 3, 32]),
    st.sampled_from([np.int32, np.int64]),
)
def test_epoch_order_into_a_buffer_is_the_same_order(
    n: int, block: int, streams: int, dtype: Any
) -> None:
    seed = [n, block, streams]
    want = epoch_order(n, seed, block=block, streams=streams)
    buf = np.full(n, -1, dtype)
    got = epoch_order(n, seed, block=block, streams=streams, out=buf)
    assert got is buf and np.array_equal(got, want)
    with pytest.raises(InvalidArgumentError, match="out: expected"):
        epoch_order(n + 1, seed, block=block, streams=streams, out=buf)


@settings(max_examples=40, deadline=None)
@given(
    n_rows=st.integers(0, 60),
    cuts=st.lists(st.integers(0, 60), max_size=4),
    fraction=st.sampled_from([0.0, 0.25]),
    shuffle=st.booleans(),
    hot=st.sampled_from([0, 1, 3, 1000]),
    seed=st.integers(0, 3),
)
def test_split_rows_of_chunks_with_hot_slots_matches_one_batch(
    n_rows: int, cuts: list[int], fraction: float, shuffle: bool, hot: int, seed: int
) -> None:
    """Chunks read in place (slices of a parent too) and hot slots give the same rows,
    keys and split as one batch with keys in order; ``pos`` maps slots to keys."""
    n_features = 130  # three bitmap words, the last one partial
    rng = np.random.default_rng(seed)
    X = sp.random(n_rows, n_features, density=0.08, format="csr", random_state=seed)
    X.data = rng.normal(size=X.nnz).astype(np.float32)
    X.indices = X.indices.astype(np.int32)
    whole = CSRBatch.from_arrays(X.indptr, X.indices, X.data, np.arange(n_rows), n_features)
    edges = sorted({0, n_rows, *(c for c in cuts if c <= n_rows)})
    pieces = [whole.slice(a, b) for a, b in itertools.pairwise(edges)]
    kw = dict(index=1, fraction=fraction, seed=seed, n_features=n_features, has_bias=True)
    ref = split_rows(whole, shuffle=shuffle, **kw)  # type: ignore[arg-type]
    got = split_rows(pieces, shuffle=shuffle, hot=hot, **kw)  # type: ignore[arg-type]
    np.testing.assert_array_equal(got.keys, ref.keys)
    assert got.keys[-1] == n_features
    pos = np.arange(got.keys.size) if got.pos is None else got.pos
    assert sorted(pos.tolist()) == list(range(got.keys.size)) and pos[-1] == got.keys.size - 1
    for a, b in ((got.train, ref.train), (got.val, ref.val)):
        np.testing.assert_array_equal(a.labels, b.labels)
        np.testing.assert_array_equal(a.indptr, b.indptr)
        np.testing.assert_array_equal(got.keys[pos[a.indices]], ref.keys[b.indices])
        np.testing.assert_array_equal(a.data, b.data)
    if hot == 0:
        assert got.pos is None
    # the hot slots come first and hold the most frequent keys
    if got.pos is not None:
        freq = np.bincount(X.indices, minlength=n_features)
        n_hot = int((np.diff(got.pos) < 0).argmax()) if (np.diff(got.pos) < 0).any() else 0
        if n_hot:
            assert freq[got.keys[got.pos[:n_hot]]].min() >= 2
