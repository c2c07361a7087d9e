"""The CGS kernels in process: each draws a token from the exact collapsed conditional."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from daskangel.models.lda._corpus import Corpus
from daskangel.models.lda._dense import sample_dense
from daskangel.models.lda._sampler import build_alias, sample_words
from daskangel.models.lda._warp import WarpState, doc_phase, init_counts, word_phase, z_deltas

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("kind", ["dense", "mh"])
def test_one_token_follows_the_conditional(kind: str) -> None:
    # one document of one token among fixed counts: the conditional does not depend
    # on the token's current topic, so its topic over many sweeps has the law
    # p(k) ~ alpha * (n_wk + beta) / (n_k + V * beta) (counts without the token)
    K, V, alpha, beta = 5, 50, 0.3, 0.05
    c = Corpus.build(np.array([0, 1]), np.array([7]), np.array([1]))
    other = np.array([3, 0, 9, 1, 4], np.int64)  # the word's count of other tokens
    nk_other = np.array([40, 25, 60, 10, 30], np.int64)
    want = alpha * (other + beta) / (nk_other + V * beta)
    want /= want.sum()
    z = np.zeros(1, np.int32)
    ndk = np.zeros((1, K), np.int32)
    ndk[0, 0] = 1
    n = 40_000
    seen = np.zeros(K)
    dp, da = np.empty(K), np.empty(K, np.int32)
    for sweep in range(n):
        s = z[0]
        row = other.astype(np.int32).copy()
        row[s] += 1
        nk = nk_other.copy()
        nk[s] += 1
        delta = np.empty((1, K), np.int32)
        if kind == "dense":
            done = sample_dense(np.array([0]), row[None], nk, z, c.tdoc, c.wptr, ndk,
                                alpha, beta, V * beta, 3, sweep, delta)  # fmt: skip
        else:
            dtot = build_alias(beta / (nk + V * beta), K, dp, da)
            done = sample_words(np.array([0]), row[None], nk, nk.copy(), z, c.tdoc, c.wptr,
                                c.dptr, c.dtok, ndk, alpha, beta, V * beta, dp, da, dtot, 2,
                                3, sweep, delta)  # fmt: skip
        assert done == 1
        # the counts moved with the token, exactly
        assert ndk.sum() == 1 and ndk[0, z[0]] == 1
        assert (row + delta[0]).tolist() == (other + np.eye(K, dtype=int)[z[0]]).tolist()
        assert nk.tolist() == (nk_other + np.eye(K, dtype=int)[z[0]]).tolist()
        seen[z[0]] += 1
    # within 5 standard errors of the exact law
    se = np.sqrt(want * (1 - want) / n)
    assert np.all(np.abs(seen / n - want) < 5 * se + 1e-3), (seen / n, want)


def test_warp_one_token_follows_the_conditional() -> None:
    # WarpLDA's two phases on one document of one token among fixed counts: both
    # proposals are exact here (the delayed counts do not change within a sweep), so
    # the token's topic has the law of the conditional; and the delta a word phase
    # returns is every change since the last push (the doc phase's too), exactly
    K, V, alpha, beta = 5, 50, 0.3, 0.05
    c = Corpus.build(np.array([0, 1]), np.array([7]), np.array([1]))
    other = np.array([3, 0, 9, 1, 4], np.int64)
    nk_other = np.array([40, 25, 60, 10, 30], np.int64)
    want = alpha * (other + beta) / (nk_other + V * beta)
    want /= want.sum()
    st = WarpState.start(np.zeros(1, np.int32), K, 2)
    n = 40_000
    seen = np.zeros(K)
    moved = 0
    for sweep in range(n):
        pushed = int(st.zpush[0])
        assert pushed == st.z[0]  # every change was pushed by the last word phase
        nk = nk_other + np.eye(K, dtype=np.int64)[pushed]
        assert doc_phase(st.z, st.prop, c.dptr, c.dtok, nk, alpha, beta, V * beta, 3, sweep) == 1
        assert nk.tolist() == (nk_other + np.eye(K, dtype=int)[st.z[0]]).tolist()
        moved += int(st.z[0] != pushed)
        row = (other + np.eye(K, dtype=np.int64)[pushed]).astype(np.int32)[None]  # as pulled
        delta = np.empty_like(row)
        done = word_phase(np.array([0]), row, nk, st.z, st.zpush, st.prop, c.wptr, beta,
                          V * beta, 3, sweep, delta)  # fmt: skip
        assert done == 1
        assert (row[0] + delta[0]).tolist() == (other + np.eye(K, dtype=int)[st.z[0]]).tolist()
        assert nk.tolist() == (nk_other + np.eye(K, dtype=int)[st.z[0]]).tolist()
        seen[st.z[0]] += 1
    assert moved > n // 10  # the doc phase moves the token too
    se = np.sqrt(want * (1 - want) / n)
    assert np.all(np.abs(seen / n - want) < 5 * se + 1e-3), (seen / n, want)


def test_warp_init_counts_match_the_topics() -> None:
    # the sparse initial counts, a slice of words at a time, are the counts of z
    rng = np.random.default_rng(0)
    X = rng.poisson(0.7, (30, 40))
    Xs = sp.csr_matrix(X)
    c = Corpus.build(Xs.indptr, Xs.indices, Xs.data)
    K = 7
    z = np.empty(c.n_tokens, np.int32)
    dense = np.zeros((c.keys.shape[0], K), np.int64)
    for w0 in range(0, c.keys.shape[0], 6):
        keys, vals = init_counts(z, c.wptr, K, 11, w0, min(c.keys.shape[0], w0 + 6), c.keys)
        assert np.all(np.diff(keys) > 0) and np.all(vals > 0)
        np.add.at(dense, (np.searchsorted(c.keys, keys // K), keys % K), vals)
    want = np.zeros_like(dense)
    np.add.at(want, (np.repeat(np.arange(c.keys.shape[0]), np.diff(c.wptr)), z), 1)
    assert dense.tolist() == want.tolist()
    assert dense.sum() == c.n_tokens


def test_z_deltas_are_the_count_changes() -> None:
    # a sweep's deltas made from the topics before and after it, a run of words at a
    # time, equal the change of the word-topic counts, in sorted entries
    rng = np.random.default_rng(2)
    X = sp.csr_matrix(rng.poisson(0.9, (25, 30)))
    c = Corpus.build(X.indptr, X.indices, X.data)
    K = 6
    z0 = rng.integers(0, K, c.n_tokens).astype(np.int16)
    z = z0.astype(np.int32)
    moved = rng.random(c.n_tokens) < 0.4
    z[moved] = rng.integers(0, K, int(moved.sum()))
    ids = c.keys * 3 + 1  # any increasing global ids
    got = np.zeros((c.keys.shape[0], K), np.int64)
    nw = c.keys.shape[0]
    for w0 in range(0, nw, 4):
        keys, vals = z_deltas(z0, z, c.wptr, K, w0, min(nw, w0 + 4), ids)
        assert np.all(np.diff(keys) > 0) and np.all(vals != 0)
        np.add.at(got, (np.searchsorted(ids, keys // K), keys % K), vals)
    words = np.repeat(np.arange(nw), np.diff(c.wptr))
    want = np.zeros_like(got)
    np.add.at(want, (words, z), 1)
    np.add.at(want, (words, z0), -1)
    np.testing.assert_array_equal(got, want)
