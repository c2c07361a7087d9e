"""A task's tokens: the word-major layout and the document index rebuilt after a drop."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from daskangel.models.lda._corpus import Corpus

pytestmark = pytest.mark.timeout(120)


@settings(deadline=None, max_examples=30)
@given(n_docs=st.integers(1, 12), n_words=st.integers(1, 9), seed=st.integers(0, 2**16))
def test_token_docs_rebuilt_after_a_drop(n_docs: int, n_words: int, seed: int) -> None:
    X = sp.csr_matrix(np.random.default_rng(seed).poisson(0.8, (n_docs, n_words)))
    c = Corpus.build(X.indptr, X.indices, X.data)
    assert c.dtok.dtype == np.int32
    want = c.tdoc.copy()
    # every doc-major token points at a distinct word-major position of its document
    assert sorted(c.dtok.tolist()) == list(range(c.n_tokens))
    c.tdoc = None  # what the warp sampler does while it runs
    np.testing.assert_array_equal(c.token_docs(), want)
    assert c.tdoc is not None
