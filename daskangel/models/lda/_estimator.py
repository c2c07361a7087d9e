"""``LDA``: latent Dirichlet allocation whose word-topic counts live on the parameter server.

scikit-learn's ``LatentDirichletAllocation`` contract where it applies:
``fit`` / ``partial_fit`` / ``transform`` / ``fit_transform``,
``components_`` (``K x V`` pseudo-counts ``n_wk + beta``, the prior included as
scikit-learn includes it), ``score`` / ``perplexity``, plus ``top_words``,
``history_`` (held-out log-likelihood per token and tokens/s per sweep) and
``save`` / :func:`daskangel.models.load`.

State shapes: ``_arrays = {"nwk": name (V, K) int32, "nk": name (1, K) int64}``;
``_nwk`` is the pulled ``(V, K)`` int32 copy or ``None``.

Example
-------
>>> from daskangel.models import LDA                                 # doctest: +SKIP
>>> lda = LDA(n_topics=20, doc_topic_prior=0.1, topic_word_prior=0.01,
...           max_iter=200, random_state=0).fit(counts)              # doctest: +SKIP
>>> lda.history_[["sweep", "heldout_ll", "tokens_per_s"]].tail(1)    # doctest: +SKIP
>>> lda.top_words(10, vocabulary)                                    # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any, ClassVar

from sklearn.base import TransformerMixin

from ...errors import InvalidArgumentError
from .._core import PSEstimator
from ._apply import theta_of
from ._fitting import LDAFitting
from ._params import (
    check_params,
    priors,
)

__all__ = ["LDA"]


class LDA(TransformerMixin, LDAFitting):
    """Latent Dirichlet allocation trained on the parameter server.

    Parameters
    ----------
    n_topics
        ``K``, the number of topics.
    solver
        ``'cgs'``: collapsed Gibbs sampling (Metropolis-Hastings with alias
        proposals, cost per token independent of ``K``); ``'ma-svi'``: MA-LDA,
        stochastic variational inference on every task with lazy sparse updates
        of lambda, the tasks' models averaged through the PS every
        ``average_every`` minibatches (data parallel only).
    doc_topic_prior, topic_word_prior
        alpha and beta (default ``1 / n_topics`` each, as scikit-learn).
    max_iter
        Sweeps (``'cgs'``) or passes (``'ma-svi'``) over the training documents per ``fit``.
    parallelism
        ``'data'``: every task samples its documents against (stale) full word
        rows; ``'model'``: the vocabulary is cut into one slice per task and
        the slices rotate over the tasks each sweep, so a word row is changed
        by one task at a time (Angel's model parallelism); ``'hybrid'``:
        ``groups`` groups of tasks, model parallel inside a group, data
        parallel between groups.
    groups
        Groups of ``'hybrid'`` (default 2; ``n_tasks`` must be a multiple).
    sync
        ``'bsp'``, ``'ssp:<s>'``, ``'asp'`` or a protocol object.
    validation_fraction
        Documents held out (chosen by a seeded hash of their content, see
        :func:`heldout_mask`) and scored by document completion each
        ``evaluate_every`` sweeps (``0``: only after the last; ``None``: every
        10th CGS sweep, every MA-SVI pass) into ``history_``.
    sampler
        ``'cgs'``: ``'dense'`` draws each token from the exact conditional over
        all topics (``K`` multiply-adds a token: the fastest for a few dozen
        topics); ``'mh'`` runs LightLDA's Metropolis-Hastings chain with alias
        proposals (cost per token independent of ``K``); ``'warp'`` runs
        WarpLDA's cache-friendly form of that chain (a doc phase and a word
        phase a sweep, delayed count updates, O(1) a token: the fastest for
        hundreds of topics, :mod:`._warp`); ``'auto'``: ``'dense'`` while
        ``n_topics <= daskangel.lda.dense-max-topics``, else ``'warp'``.
    mh_steps
        ``sampler='mh'`` / ``'warp'``: Metropolis-Hastings rounds (a doc and a
        word proposal each) per token.
    n_tasks
        Training tasks (default: one per worker thread).
    batch_size, average_every
        ``'ma-svi'``: documents per minibatch of a task (a task cuts its
        documents of a pass into as many minibatches as the largest task
        needs), and minibatches between two model averages.  ``'auto'``: the
        largest task's documents over ``daskangel.lda.svi-steps-per-pass``
        (16), at least ``daskangel.lda.svi-min-batch`` (128): large corpora
        take larger minibatches (less noisy steps) rather than more steps, so
        the step-size schedule forgets the random start equally fast on
        any corpus.
    learning_offset, learning_decay
        ``'ma-svi'``: step size ``(learning_offset + t) ** -learning_decay`` of
        the ``t``-th minibatch step (scikit-learn's names and defaults).
    mean_change_tol, max_doc_update_iter
        ``'ma-svi'``: the E-step of a document stops when its topic parameters
        change by less than this on average, or after that many iterations.
    snapshot, snapshot_every
        With ``snapshot_every`` (clocks, i.e. sweeps) the model's own PS context
        snapshots to ``snapshot`` (an fsspec URL; a temporary directory by
        default, which suits a LocalCluster) with ``recovery="rollback"``: the
        counts and (``'cgs'``) the topic assignments are in every snapshot, so a
        fit that loses a worker goes back to the newest one and finishes with
        exact counts (``sum_w n_wk = n_k``, ``sum_k n_k`` = training tokens).
    random_state
        Seed (``None``: a fresh one).
    progress
        A progress bar of sweeps (``'ma-svi'``: passes) with the latest metrics
        (``"auto"``: shown in a terminal or Jupyter, not in batch logs; ``True`` /
        ``False``).
    client, ps
        The Dask client (default: the current one) or a PS context to train in.
    """

    _fitted: ClassVar[tuple[str, ...]] = (
        *PSEstimator._fitted, "n_train_tokens_", "seed_", "heldout_ll_before_", "_uid",
        "n_steps_",
    )  # fmt: skip
    _saved: ClassVar[tuple[str, ...]] = (
        *PSEstimator._saved, "n_train_tokens_", "seed_", "n_steps_",
    )  # fmt: skip

    def __init__(
        self,
        n_topics: int = 10,
        *,
        solver: str = "cgs",
        doc_topic_prior: float | None = None,
        topic_word_prior: float | None = None,
        max_iter: int = 10,
        parallelism: str = "data",
        groups: int | None = None,
        sync: Any = "bsp",
        validation_fraction: float = 0.1,
        evaluate_every: int | None = None,
        sampler: str = "auto",
        mh_steps: int = 2,
        n_tasks: int | None = None,
        batch_size: int | str = "auto",
        average_every: int = 1,
        learning_offset: float = 10.0,
        learning_decay: float = 0.7,
        mean_change_tol: float = 1e-3,
        max_doc_update_iter: int = 100,
        snapshot: str | None = None,
        snapshot_every: int | None = None,
        random_state: int | None = None,
        warm_start: bool = False,
        progress: bool | str = "auto",
        client: Any = None,
        ps: Any = None,
    ) -> None:
        self._keep_params(locals())

    # -- fitting ------------------------------------------------------------------------

    def fit(self, X: Any, y: Any = None, *, resume: str | None = None) -> LDA:
        """Learn the topics of the document-word counts ``X`` (``y`` is ignored).

        ``X``: ``scipy.sparse`` or numpy counts, a dask array, or a daskangel
        Dataset (e.g. ``angel.data.read_docword(url)``).  ``resume``: a snapshot
        taken during an earlier CGS fit of this model with the same parameters and
        data (``snapshot=url, snapshot_every=N``): the counts and the topic
        assignments come back from it and the fit continues from its sweep (see
        :meth:`PSEstimator._resuming`); one task under BSP ends with exactly the
        counts of the fit that ran through.

        .. warning::
           A resumed fit's ``history_`` holds the sweeps it ran itself (from the
           snapshot's clock on).  ``resume`` needs ``solver='cgs'``.
        """
        check_params(self)
        if resume is not None and self.solver != "cgs":
            raise InvalidArgumentError(
                f"resume: expected solver='cgs' (a CGS fit's snapshot), got {self.solver!r}"
            )
        if resume is not None or not self.warm_start or not hasattr(self, "n_features_in_") \
                or self._switched():  # fmt: skip
            self._forget()
        with self._resuming(resume):
            return self._fit(X, self.max_iter, resume)

    def partial_fit(self, X: Any, y: Any = None) -> LDA:
        """One more sweep over ``X`` (its tokens' topics continue where they were).

        .. warning:: Documents the model has not seen (or whose worker-side
           state was lost) are added to the counts: the model then holds the
           tokens of every document it was ever given.
        """
        check_params(self)
        if self._switched():
            raise InvalidArgumentError(
                f"solver: the model was trained with the other solver, got {self.solver!r}"
            )
        return self._fit(X, 1)

    def _switched(self) -> bool:
        """Is the model trained (arrays or a pulled copy) with the other solver?"""
        arrays = getattr(self, "_arrays", None)
        if arrays:
            return ("lam" in arrays) != (self.solver == "ma-svi")
        nwk = getattr(self, "_nwk", None)
        if nwk is not None:
            return (nwk.dtype.kind == "f") != (self.solver == "ma-svi")
        return False

    def fit_transform(self, X: Any, y: Any = None, **kw: Any) -> Any:
        return self.fit(X).transform(X)

    # -- using the topics (the rest is LDATopics') -----------------------------------

    def transform(self, X: Any) -> Any:
        """Document-topic distributions theta of ``X`` with the topics held fixed (rows sum to 1)."""
        return theta_of(self, X, self.topic_word_, priors(self)[0])

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.input_tags.positive_only = True
        tags.requires_fit = True
        return tags
