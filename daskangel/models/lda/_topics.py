"""The PS side of :class:`~daskangel.models.lda.LDA` and reading its topics.

:class:`LDATopics` makes the word-topic arrays (``'cgs'``: ``nwk`` ``(V, K)``
int32 row blocks, ``nk`` ``(1, K)`` int64; ``'ma-svi'``: lambda, see
``_svi_fit``), pulls them into the local copy ``_nwk`` that ``transform`` /
``score`` read, drops the documents' topic state kept on the workers when the
model closes, keeps the fit's seed, and reads the topics: ``components_``,
``topic_word_``, ``score``, ``perplexity``, ``top_words``.

Example
-------
>>> lda.components_.shape, lda.top_words(5)                           # doctest: +SKIP
((20, 5000), [[12, 7, 401, 3, 88], ...])
"""

from __future__ import annotations

import contextlib
import math
import tempfile
import uuid
from typing import Any

import numpy as np

from ..._compat import workers_info
from ...context import PSContext
from ...errors import InvalidArgumentError, InvalidStateError
from .._core import PSEstimator
from ._apply import score_of
from ._docs import forget
from ._params import priors
from ._svi_fit import make_svi_arrays

__all__ = ["LDATopics"]


class LDATopics(PSEstimator):
    """The arrays and topics of :class:`~daskangel.models.lda.LDA` (its base; the
    parameters are the estimator's)."""

    _nwk: np.ndarray | None
    n_features_in_: int

    def _context_options(self) -> dict[str, Any]:
        if self.snapshot_every is None:
            return {}
        url = self.snapshot or tempfile.mkdtemp(prefix="daskangel-lda-snap-")
        return {"snapshot": url, "snapshot_every": self.snapshot_every, "recovery": "rollback"}

    def _pull(self) -> np.ndarray | None:
        return self._pulled("_nwk", self._fetch)  # type: ignore[no-any-return]

    def _fetch(self) -> np.ndarray:
        if "lam" in self._arrays:
            return np.asarray(self._ps.get_array(self._arrays["lam"]).get(), np.float64)
        return np.asarray(self._ps.get_array(self._arrays["nwk"]).get(), np.int32)

    def _reset(self) -> None:
        self._nwk = None

    def _make_arrays(self, ps: PSContext, V: int, K: int) -> None:
        init = getattr(self, "_nwk", None)
        if self.solver == "ma-svi":
            self._arrays = make_svi_arrays(ps, V, K, self._seed(), init)
            return
        name = f"lda-{uuid.uuid4().hex[:8]}"
        n_servers = max(1, len(workers_info(ps.client)))
        rows = max(1, math.ceil(V / (2 * n_servers)))
        nwk = ps.zeros(f"{name}.nwk", (V, K), "int32", block_shape=(rows, K))
        nk = ps.zeros(f"{name}.nk", (1, K), "int64")
        if init is not None and init.shape == (V, K):  # unpickled: upload the counts again
            nwk.set(init)
            nk.set(init.sum(axis=0, dtype=np.int64)[None, :])
        self._arrays = {"nwk": nwk.name, "nk": nk.name}

    def _forget_documents(self) -> None:
        """Drop the documents' topic state this model keeps on the workers."""
        uid = getattr(self, "_uid", None)
        if uid is not None:
            with contextlib.suppress(Exception):
                self._client().run(forget, uid)

    def close(self) -> None:
        """As every model's, and drop the documents' topic state kept on the workers
        (before, a closed model's tokens stayed in memory until it was refitted)."""
        self._forget_documents()
        super().close()

    def _forget(self) -> None:
        self._forget_documents()
        super()._forget()

    def _seed(self) -> int:
        """The fit's seed: ``random_state``, or one drawn once and kept (``seed_``), so
        the held-out split and the random streams stay the same over ``partial_fit``."""
        if getattr(self, "seed_", None) is None:
            rs = self.random_state
            self.seed_ = int(np.random.default_rng().integers(0, 2**31) if rs is None else rs)
        return int(self.seed_)

    def _counts(self) -> np.ndarray:
        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(self, "n_features_in_")
        nwk = self._pull()
        if nwk is None:
            raise InvalidStateError("LDA: the topics are gone (closed context)")
        return nwk

    @property
    def components_(self) -> np.ndarray:
        """``K x V`` topic-word pseudo-counts: ``n_wk + beta`` (``'cgs'``) or the variational
        parameter lambda (``'ma-svi'``); normalise the rows for phi."""
        return self._counts().T.astype(np.float64) + priors(self)[1]

    @property
    def topic_word_(self) -> np.ndarray:
        """``K x V`` topic-word distributions phi (rows sum to 1)."""
        c = self.components_
        return c / c.sum(axis=1, keepdims=True)

    def score(self, X: Any, y: Any = None) -> float:
        """Document-completion log-likelihood of ``X`` (a sum over the scored tokens)."""
        return score_of(self, X, self.topic_word_, priors(self)[0])[0]

    def perplexity(self, X: Any) -> float:
        """``exp(-log-likelihood / tokens)`` of ``X`` by document completion."""
        ll, n = score_of(self, X, self.topic_word_, priors(self)[0])
        return float(np.exp(-ll / n)) if n else float("nan")

    def top_words(self, n: int = 10, vocabulary: Any = None) -> list[list[Any]]:
        """The ``n`` most probable words of each topic (ids, or ``vocabulary[id]``)."""
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise InvalidArgumentError(f"n: expected an int >= 1, got {n!r}")
        c = self._counts().T
        top = np.argsort(-c, axis=1, kind="stable")[:, : int(n)]
        if vocabulary is None:
            return [[int(w) for w in row] for row in top]
        vocab = list(vocabulary)
        if len(vocab) != c.shape[1]:
            raise InvalidArgumentError(
                f"vocabulary: expected {c.shape[1]} words (one per feature), got {len(vocab)}"
            )
        return [[vocab[w] for w in row] for row in top]
