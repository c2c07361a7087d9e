"""MA-SVI (MA-LDA) on a real 2-worker LocalCluster, and its kernels against references."""

from __future__ import annotations

from typing import Any

import dask
import numpy as np
import pytest
import scipy.sparse as sp
from distributed import Client
from scipy.special import digamma as sp_digamma

import daskangel as angel
from daskangel.errors import InvalidArgumentError
from daskangel.models import LDA
from daskangel.models.lda import completion_log_likelihood, heldout_mask
from daskangel.models.lda._svi_fit import steps_and_scale, task_batch
from daskangel.models.lda._vb import batch_words, digamma, estep, expected_log_rows

from .corpora import planted_corpus

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def corpus() -> tuple[sp.csr_matrix, np.ndarray]:
    X, topics = planted_corpus()
    X = X.tolil()
    X[7, :] = 0  # an empty document: allowed, skipped
    return X.tocsr(), topics


def _svi(**kw: Any) -> LDA:
    base: dict[str, Any] = dict(
        n_topics=4, solver="ma-svi", doc_topic_prior=0.1, topic_word_prior=0.01, max_iter=10,
        batch_size=32, n_tasks=2, random_state=1, progress=False,
    )  # fmt: skip
    base.update(kw)
    return LDA(**base)


def _lam(m: LDA) -> tuple[np.ndarray, np.ndarray]:
    lam = np.asarray(m._ps.get_array(m._arrays["lam"]).get())
    s = np.asarray(m._ps.get_array(m._arrays["lamsum"]).get())[0]
    return lam, s


def _similarity(topics: np.ndarray, phi: np.ndarray) -> np.ndarray:
    a = topics / np.linalg.norm(topics, axis=1, keepdims=True)
    b = phi / np.linalg.norm(phi, axis=1, keepdims=True)
    return a @ b.T  # type: ignore[no-any-return]


def test_digamma_matches_scipy() -> None:
    x = np.concatenate([np.geomspace(1e-6, 1e6, 200), [0.1, 1.0, 5.999, 6.0, 6.001]])
    ours = np.array([digamma(v) for v in x])
    assert np.allclose(ours, sp_digamma(x), rtol=1e-10, atol=1e-10)


def test_estep_matches_scikit_learn() -> None:
    rng = np.random.default_rng(0)
    X = sp.csr_matrix(rng.poisson(0.6, (12, 30)).astype(np.float64))
    K, V = 3, 30
    lam = rng.gamma(100.0, 0.01, (V, K)) * rng.uniform(0.5, 3.0, (V, K))
    ebeta = np.zeros((V, K))
    docs = np.arange(12, dtype=np.int64)
    ip, ix = X.indptr.astype(np.int64), X.indices.astype(np.int64)
    mark = np.full(V, -1, np.int64)
    words = batch_words(docs, ip, ix, mark, 1)
    assert words.tolist() == np.unique(ix).tolist()
    expected_log_rows(words, lam, lam.sum(axis=0), 1.0, 0.0, 0.0, ebeta)
    gamma0 = rng.gamma(100.0, 0.01, (12, K))
    gamma = gamma0.copy()
    sstats = np.zeros((V, K))
    estep(docs, ip, ix, X.data, ebeta, 0.1, gamma, 1e-8, 500, sstats)
    # the reference: scikit-learn's E-step loop (``_update_doc_distribution``) run
    # from the same start (its helper draws the start itself)
    from sklearn.decomposition._online_lda_fast import _dirichlet_expectation_1d

    exp_beta = ebeta.T
    ref_s = np.zeros((K, V))
    for d in range(12):
        ids = X.indices[X.indptr[d] : X.indptr[d + 1]]
        cnts = X.data[X.indptr[d] : X.indptr[d + 1]]
        g = gamma0[d].copy()
        e = np.empty(K)
        _dirichlet_expectation_1d(g, 0.0, e)
        eb = exp_beta[:, ids]
        for _ in range(500):
            last = g
            norm = e @ eb + 1e-100
            g = e * ((cnts / norm) @ eb.T)
            _dirichlet_expectation_1d(g, 0.1, e)
            if np.mean(np.abs(last - g)) < 1e-8:
                break
        assert np.allclose(gamma[d], g, rtol=1e-6)
        norm = e @ eb + 1e-100
        ref_s[:, ids] += np.outer(e, cnts / norm) * eb
    assert np.allclose(sstats.T, ref_s, rtol=1e-6)


def test_planted_topics_and_history(client: Client, corpus: Any) -> None:
    X, topics = corpus
    m = _svi().fit(X)
    sim = _similarity(topics, m.topic_word_)
    assert sim.max(axis=1).min() > 0.95
    assert sorted(sim.argmax(axis=1).tolist()) == [0, 1, 2, 3]
    h = m.history_
    assert list(h.sweep) == list(range(1, 11))
    assert h.heldout_ll.iloc[-1] > m.heldout_ll_before_
    assert (h.tokens_per_s > 0).all()
    # the in-training score of the final model is the public scorer on the held-out docs
    held = heldout_mask(X, 0.1, 1)
    ll, n = completion_log_likelihood(X[held], m.components_, 0.1, seed=1)
    assert abs(ll / n - h.heldout_ll.iloc[-1]) < 1e-9
    # lambda at rest: the PS holds lambda - eta and its exact column sums
    lam, s = _lam(m)
    assert np.allclose(lam.sum(axis=0), s, rtol=1e-9)
    assert np.allclose(m.components_, lam.T + 0.01)
    assert m.n_train_tokens_ == int(X[~held].sum())
    assert m.n_steps_ == 10 * 5  # ceil(135 docs / 32) steps a pass (the larger task)


def test_auto_batch_size() -> None:
    # 'auto': the largest task's documents over svi-steps-per-pass, at least svi-min-batch
    assert task_batch([8450, 8400], "auto") == 529  # ceil(8450 / 16)
    assert task_batch([1542, 1543], "auto") == 128  # the floor
    assert task_batch([1542], 300) == 300  # an int is taken as given
    with dask.config.set({"daskangel.lda.svi-steps-per-pass": 4, "daskangel.lda.svi-min-batch": 1}):
        assert task_batch([10, 9], "auto") == 3
        assert steps_and_scale([10, 9], "auto", 1, 0, 10.0, 0.7)[0] == 4
    assert steps_and_scale([8450, 8400], "auto", 1, 0, 10.0, 0.7)[0] == 16


def test_auto_batch_size_fit(client: Client, corpus: Any) -> None:
    X, _ = corpus
    # 135 documents a task, at most 128 a minibatch: 2 steps a pass
    with dask.config.set({"daskangel.lda.svi-min-batch": 128}):
        m = _svi(batch_size="auto", max_iter=2, evaluate_every=0).fit(X)
    assert m.n_steps_ == 2 * 2
    lam, s = _lam(m)
    assert np.allclose(lam.sum(axis=0), s, rtol=1e-9)


@pytest.mark.parametrize("sync", ["ssp:2", "asp"])
def test_stale_averaging_keeps_sums(client: Client, corpus: Any, sync: str) -> None:
    X, _ = corpus
    m = _svi(sync=sync, max_iter=6, evaluate_every=0, average_every=2).fit(X)
    lam, s = _lam(m)
    assert (lam > 0).all()  # lambda - eta = S mu >= 0: averaging never goes below the prior
    assert np.allclose(lam.sum(axis=0), s, rtol=1e-9)
    assert np.isfinite(m.history_.heldout_ll.iloc[-1])


def test_partial_fit_transform_save_load(client: Client, corpus: Any, tmp_path: Any) -> None:
    X, _ = corpus
    m = _svi(max_iter=3).fit(X)
    steps = m.n_steps_
    m.partial_fit(X)
    assert m.t_ == 4 and m.n_steps_ == steps + steps // 3
    assert list(m.history_.sweep) == [1, 2, 3, 4]
    th = m.transform(X)
    assert np.allclose(th.sum(axis=1), 1.0) and np.allclose(th[7], 0.25)
    m.save(str(tmp_path / "svi"))
    m2 = angel.models.load(str(tmp_path / "svi"))
    assert np.array_equal(m2.transform(X), th)
    assert m2.n_steps_ == m.n_steps_
    # a loaded model continues (its step sizes where they were)
    m2.partial_fit(X)
    assert m2.n_steps_ == m.n_steps_ + steps // 3
    with pytest.raises(InvalidArgumentError, match="solver"):
        m.set_params(solver="cgs").partial_fit(X)


BAD = [
    ({"parallelism": "model"}, "parallelism"),
    ({"batch_size": 0}, "batch_size"),
    ({"batch_size": "large"}, "batch_size"),
    ({"average_every": 0}, "average_every"),
    ({"learning_decay": 0.0}, "learning_decay"),
    ({"learning_decay": 1.5}, "learning_decay"),
    ({"learning_offset": -1.0}, "learning_offset"),
    ({"mean_change_tol": 0.0}, "mean_change_tol"),
    # exp(-1400): lambda's scale would underflow in one fit
    (
        {"max_iter": 100_000, "learning_offset": 1.0, "learning_decay": 0.5, "warm_start": True},
        "max_iter",
    ),
]


def test_bad_parameters_change_nothing(client: Client, corpus: Any) -> None:
    m = _svi(max_iter=1, evaluate_every=0).fit(corpus[0])
    before = _lam(m)
    good = m.get_params()
    for params, name in BAD:
        with pytest.raises(InvalidArgumentError, match=name):
            m.set_params(**params)
            if params.get("warm_start"):
                m.fit(corpus[0])
            else:
                m.partial_fit(corpus[0])
        m.set_params(**good)
    after = _lam(m)
    assert np.array_equal(before[0], after[0]) and np.array_equal(before[1], after[1])
