"""The CGS kernels in process: each draws a token from the exact collapsed conditional."""

from __future__ import annotations

import numpy as np
import pytest

from daskangel.models.lda._corpus import Corpus
from daskangel.models.lda._dense import sample_dense
from daskangel.models.lda._sampler import build_alias, sample_words

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
