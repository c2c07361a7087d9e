"""LDA on a real 2-worker LocalCluster: recovery, exact counts, transform, save/load, errors."""

from __future__ import annotations

from typing import Any

import dask
import dask.array as da
import numpy as np
import pytest
import scipy.sparse as sp
from distributed import Client

import daskangel as angel
from daskangel import _snapshot_format as fmt
from daskangel.errors import InvalidArgumentError, InvalidTypeError
from daskangel.models import LDA
from daskangel.models.lda import completion_log_likelihood, heldout_mask

from .corpora import planted_corpus

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def corpus() -> tuple[sp.csr_matrix, np.ndarray]:
    X, topics = planted_corpus()
    X = X.tolil()
    X[5, :] = 0  # an empty document: allowed, skipped
    return X.tocsr(), topics


def _counts(m: LDA) -> tuple[np.ndarray, np.ndarray]:
    nwk = np.asarray(m._ps.get_array(m._arrays["nwk"]).get())
    nk = np.asarray(m._ps.get_array(m._arrays["nk"]).get())[0]
    return nwk, nk


def _train_tokens(X: sp.csr_matrix, frac: float, seed: int) -> int:
    held = heldout_mask(X, frac, seed)
    return int(X[~held].sum())


def test_planted_topics_recovered(client: Client, corpus: Any) -> None:
    X, topics = corpus
    m = LDA(n_topics=4, doc_topic_prior=0.1, topic_word_prior=0.01, max_iter=20,
            evaluate_every=5, random_state=0, progress=False)  # fmt: skip
    m.fit(X)
    phi = m.topic_word_
    # every planted topic has a learned topic close to it (cosine similarity)
    sim = (topics / np.linalg.norm(topics, axis=1, keepdims=True)) @ (
        phi / np.linalg.norm(phi, axis=1, keepdims=True)
    ).T
    assert sim.max(axis=1).min() > 0.9
    assert sorted(sim.argmax(axis=1).tolist()) == [0, 1, 2, 3]
    h = m.history_
    assert list(h.sweep) == list(range(1, 21))
    scored = h.heldout_ll.dropna()
    assert list(h.sweep[h.heldout_ll.notna()]) == [5, 10, 15, 20]
    assert scored.iloc[-1] > scored.iloc[0] > m.heldout_ll_before_
    assert (h.tokens_per_s.dropna() > 0).all()
    # the in-training score is the public scorer applied to the held-out documents
    held = heldout_mask(X, 0.1, 0)
    ll, n = completion_log_likelihood(X[held], phi, 0.1, seed=0)
    assert abs(ll / n - h.heldout_ll.iloc[-1]) < 1e-9
    top = m.top_words(3, [f"w{i}" for i in range(X.shape[1])])
    assert len(top) == 4 and all(len(t) == 3 for t in top)
    # the live figures (the dashboard's) of finished sweeps, the same from every task
    live = m.train_result_.history.dropna(subset=["heldout_ll"])
    live = live[live.sweep >= 1]
    assert len(live) and (live.tokens_per_s > 0).all()
    for r in live.itertuples():
        assert r.heldout_ll == pytest.approx(h.heldout_ll[h.sweep == r.sweep].iloc[0], abs=1e-12)


def test_warp_recovers_planted_topics(client: Client, corpus: Any) -> None:
    """The WarpLDA sampler (the default past dense-max-topics topics) finds the planted
    topics as the exact one does, and its held-out score rises."""
    X, topics = corpus
    m = LDA(n_topics=4, doc_topic_prior=0.1, topic_word_prior=0.01, max_iter=30,
            sampler="warp", evaluate_every=10, random_state=0, progress=False)  # fmt: skip
    m.fit(X)
    phi = m.topic_word_
    sim = (topics / np.linalg.norm(topics, axis=1, keepdims=True)) @ (
        phi / np.linalg.norm(phi, axis=1, keepdims=True)
    ).T
    assert sim.max(axis=1).min() > 0.9
    assert sorted(sim.argmax(axis=1).tolist()) == [0, 1, 2, 3]
    scored = m.history_.heldout_ll.dropna()
    assert scored.iloc[-1] > scored.iloc[0] > m.heldout_ll_before_
    nwk, nk = _counts(m)
    assert (nwk >= 0).all() and np.array_equal(nwk.sum(axis=0), nk)
    assert int(nk.sum()) == _train_tokens(X, 0.1, 0) == m.n_train_tokens_
    uid = m._uid
    assert sum(client.run(_states_of, uid).values()) > 0  # the tokens' state, on the workers
    m.close()
    assert sum(client.run(_states_of, uid).values()) == 0  # gone with the model
    assert m.transform(X[:3]).shape == (3, 4)  # it still predicts


def _states_of(uid: str) -> int:
    from daskangel.models.lda._docs import STATES

    return sum(k[0] == uid for k in STATES)


@pytest.mark.parametrize(
    ("sync", "sampler"), [("ssp:2", "mh"), ("asp", "dense"), ("ssp:1", "warp"), ("bsp", "warp")]
)
def test_count_invariants_exact(client: Client, corpus: Any, sync: str, sampler: str) -> None:
    X, _ = corpus
    m = LDA(n_topics=5, max_iter=6, sync=sync, sampler=sampler, random_state=1,
            evaluate_every=0, progress=False)  # fmt: skip
    m.fit(X)
    nwk, nk = _counts(m)
    assert (nwk >= 0).all()
    assert np.array_equal(nwk.sum(axis=0), nk)
    assert int(nk.sum()) == _train_tokens(X, 0.1, 1) == m.n_train_tokens_
    # partial_fit on the same documents continues their chains: no tokens added
    m.partial_fit(X)
    nwk, nk = _counts(m)
    assert np.array_equal(nwk.sum(axis=0), nk) and int(nk.sum()) == m.n_train_tokens_
    assert m.t_ == 7 and list(m.history_.sweep)[-1] == 7


def _set_config(cfg: dict[str, Any]) -> dict[str, Any]:
    old = {k: dask.config.get(k) for k in cfg}
    dask.config.set(cfg)
    return old


@pytest.mark.parametrize(
    ("whole", "sampler"), [("64MiB", "auto"), ("0B", "auto"), ("0B", "warp"), ("64MiB", "warp")]
)
def test_bsp_fits_repeat_exactly(client: Client, corpus: Any, whole: str, sampler: str) -> None:
    """Two BSP fits of one random_state on 2 tasks end with the same topics, also when
    the push buffer sends by size in the middle of a sweep (a tiny flush-bytes) and the
    rows come in many batches: no read of a sweep sees a push of that sweep.  The
    counts stay exact (also after a partial_fit)."""
    X, _ = corpus
    cfg = {"daskangel.agent.flush-bytes": "512B", "daskangel.lda.row-batch": 8,
           "daskangel.lda.whole-pull-bytes": whole}  # fmt: skip
    old = client.run(_set_config, cfg)
    try:
        fits = [
            LDA(
                n_topics=4,
                max_iter=3,
                random_state=1,
                evaluate_every=1,
                sampler=sampler,
                progress=False,
            ).fit(X)
            for _ in range(2)
        ]
        np.testing.assert_array_equal(fits[0].components_, fits[1].components_)
        # the held-out scores too, to the last bit: 4 tasks (2 workers x 2 threads) add
        # their log-likelihood sums in whatever order their pushes land; on the row
        # path 1 fit in ~8 (and 14 of 15 in a loop at 19:20Z) ended 1 ulp apart
        # before each task's sum got a column of its own
        assert len(fits[0].train_result_.results) == 4
        np.testing.assert_array_equal(fits[0].history_.heldout_ll, fits[1].history_.heldout_ll)
        m = fits[0]
        nwk, nk = _counts(m)
        assert (nwk >= 0).all() and np.array_equal(nwk.sum(axis=0), nk)
        assert int(nk.sum()) == _train_tokens(X, 0.1, 1) == m.n_train_tokens_
        # partial_fit on the same documents continues their chains: no tokens added
        m.partial_fit(X)
        nwk, nk = _counts(m)
        assert np.array_equal(nwk.sum(axis=0), nk) and int(nk.sum()) == m.n_train_tokens_
        assert m.t_ == 4 and list(m.history_.sweep)[-1] == 4
    finally:
        client.run(_set_config, next(iter(old.values())))
    for m in fits:
        m.close()


def test_transform_and_save_load(client: Client, corpus: Any, tmp_path: Any, capsys: Any) -> None:
    X, _ = corpus
    m = LDA(n_topics=4, max_iter=5, random_state=0, progress=True).fit(X)
    err = capsys.readouterr().err
    assert "6/6" in err and "sweep" in err  # the initial assignment and 5 sweeps
    th = m.transform(X)
    assert th.shape == (X.shape[0], 4)
    assert np.allclose(th.sum(axis=1), 1.0)
    assert np.allclose(th[5], 0.25)  # the empty document: the uniform mixture
    assert m.components_.shape == (4, X.shape[1])
    # dask in, dask out; a Dataset on its workers; same values
    thd = m.transform(da.from_array(X.toarray(), chunks=(100, -1)))
    assert isinstance(thd, da.Array) and np.allclose(thd.compute(), th)
    ds = angel.data.from_array(X)
    assert np.allclose(np.asarray(m.transform(ds).compute()), th)
    m.save(str(tmp_path / "lda"))
    m2 = angel.models.load(str(tmp_path / "lda"))
    assert np.array_equal(m2.transform(X), th)
    assert m2.n_train_tokens_ == m.n_train_tokens_
    assert m.perplexity(X) == pytest.approx(m2.perplexity(X))
    assert m.score(X) < 0


def test_inputs_dataset_and_dask(client: Client, corpus: Any, tmp_path: Any) -> None:
    X, _ = corpus
    coo = X.tocoo()
    path = tmp_path / "docword.toy.txt"
    with open(path, "w") as f:
        f.write(f"{X.shape[0]}\n{X.shape[1]}\n{coo.nnz}\n")
        for d, w, c in sorted(zip(coo.row, coo.col, coo.data, strict=True)):
            f.write(f"{d + 1} {w + 1} {c}\n")
    ds = angel.data.read_docword(str(path))
    m = LDA(n_topics=4, max_iter=3, random_state=0, evaluate_every=0, progress=False).fit(ds)
    _nwk, nk = _counts(m)
    assert int(nk.sum()) == _train_tokens(X, 0.1, 0)
    assert m.n_features_in_ == X.shape[1]
    md = LDA(n_topics=4, max_iter=3, random_state=0, evaluate_every=0, progress=False)
    md.fit(da.from_array(X.toarray(), chunks=(80, -1)))
    assert int(_counts(md)[1].sum()) == _train_tokens(X, 0.1, 0)


@pytest.mark.parametrize(
    ("params", "err", "name"),
    [
        ({"n_topics": 0}, InvalidArgumentError, "n_topics"),
        ({"sampler": "gibbs"}, InvalidArgumentError, "sampler"),
        ({"n_topics": 2.5}, InvalidTypeError, "n_topics"),
        ({"doc_topic_prior": 0.0}, InvalidArgumentError, "doc_topic_prior"),
        ({"topic_word_prior": -1.0}, InvalidArgumentError, "topic_word_prior"),
        ({"solver": "vb"}, InvalidArgumentError, "solver"),
        ({"validation_fraction": 1.0}, InvalidArgumentError, "validation_fraction"),
    ],
)
def test_bad_parameters(client: Client, corpus: Any, params: Any, err: Any, name: str) -> None:
    with pytest.raises(err, match=name):
        LDA(**params, progress=False).fit(corpus[0])


def test_resume_ends_with_the_uninterrupted_model(
    client: Client, corpus: Any, tmp_path: Any
) -> None:
    """fit(X, resume=version) from the snapshot at clock 2 of a one-task BSP fit (dense
    sampler): counts, topic assignments and the held-out scores of every sweep it ran
    are exactly those of the fit that ran through."""
    X, _ = corpus
    kw: dict[str, Any] = dict(n_topics=4, doc_topic_prior=0.1, topic_word_prior=0.01,
                              max_iter=5, n_tasks=1, evaluate_every=1, random_state=0,
                              progress=False)  # fmt: skip
    url = tmp_path / "snap"
    ref = LDA(snapshot=str(url), snapshot_every=2, **kw).fit(X)
    want = _counts(ref)
    versions = [str(v) for v in sorted(url.iterdir()) if v.name.startswith("v")]
    at2 = next(v for v in versions if fmt.read_manifest(v).get("clock") == 2)
    got = LDA(**kw).fit(X, resume=at2)
    assert int(got.train_result_.history.clock.min()) == 2
    nwk, nk = _counts(got)
    np.testing.assert_array_equal(nwk, want[0])
    np.testing.assert_array_equal(nk, want[1])
    assert got.n_train_tokens_ == ref.n_train_tokens_ and got.t_ == 5
    assert list(got.history_.sweep) == [2, 3, 4, 5]
    np.testing.assert_array_equal(got.history_.heldout_ll, ref.history_.heldout_ll[1:])
    assert "z" not in got._arrays  # the assignments' array went with the resume
    np.testing.assert_array_equal(got.transform(X[:20]), ref.transform(X[:20]))
    with pytest.raises(InvalidArgumentError, match="solver='cgs'"):
        LDA(solver="ma-svi", progress=False).fit(X, resume=at2)
    ref.close()
    got.close()


def test_bad_input_changes_nothing(client: Client, corpus: Any) -> None:
    X, _ = corpus
    m = LDA(n_topics=3, max_iter=2, random_state=0, evaluate_every=0, progress=False).fit(X)
    before = _counts(m)
    neg = X.copy().astype(np.float64)
    neg.data[0] = -1
    frac = X.copy().astype(np.float64)
    frac.data[0] = 1.5
    wide = sp.hstack([X, sp.csr_matrix(np.ones((X.shape[0], 1)))]).tocsr()
    for bad, msg in [(neg, "non-negative integer"), (frac, "non-negative integer"),
                     (wide, "expecting")]:  # fmt: skip
        with pytest.raises(InvalidArgumentError, match=msg):
            m.partial_fit(bad)
        with pytest.raises(InvalidArgumentError, match=msg):
            m.transform(bad)
    # a Dataset with a word id >= V is refused on the workers, before training
    ds = angel.data.from_array(wide)
    with pytest.raises(InvalidArgumentError, match="X has"):
        m.partial_fit(ds)
    after = _counts(m)
    assert np.array_equal(before[0], after[0]) and np.array_equal(before[1], after[1])
    assert m.t_ == 2


@pytest.mark.parametrize(
    ("parallelism", "groups", "sampler"),
    [("model", None, "auto"), ("hybrid", 2, "auto"), ("model", None, "warp")],
)
def test_model_and_hybrid_parallel(
    client: Client, corpus: Any, parallelism: str, groups: int | None, sampler: str
) -> None:
    X, topics = corpus
    # WarpLDA's delayed counts mix slower on 18 k tokens, model parallel most: with
    # mh_steps=2, 40 sweeps, one fit of six (4 tasks on 2 processes) stayed at two
    # planted topics merged (LL -3.70 against -3.27..-3.32); with 4 steps six of six
    # found them by sweep 10 (loop at 21:26Z)
    warp = {"max_iter": 40, "mh_steps": 4} if sampler == "warp" else {"max_iter": 25}
    m = LDA(n_topics=4, doc_topic_prior=0.1, topic_word_prior=0.01, **warp,
            parallelism=parallelism, groups=groups, n_tasks=4, random_state=0,
            evaluate_every=5, sampler=sampler, progress=False)  # fmt: skip
    m.fit(X)
    nwk, nk = _counts(m)
    assert np.array_equal(nwk.sum(axis=0), nk)
    assert int(nk.sum()) == _train_tokens(X, 0.1, 0)
    phi = m.topic_word_
    sim = (topics / np.linalg.norm(topics, axis=1, keepdims=True)) @ (
        phi / np.linalg.norm(phi, axis=1, keepdims=True)
    ).T
    assert sim.max(axis=1).min() > 0.9
    assert m.train_result_.history.group.nunique() == (1 if parallelism == "model" else 2)


def test_hybrid_needs_whole_groups(client: Client, corpus: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="groups"):
        LDA(parallelism="hybrid", groups=3, n_tasks=4, progress=False).fit(corpus[0])
