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

import contextlib
import math
import tempfile
import uuid
from typing import Any, ClassVar

import numpy as np
from sklearn.base import TransformerMixin

from ... import config
from ..._compat import workers_info
from ...context import PSContext
from ...errors import InvalidArgumentError, InvalidStateError
from ...scheduler._clock_rule import as_sync
from ...train import train
from .._core import Prepared, PSEstimator, as_unlabelled
from ._apply import score_of, theta_of
from ._cgs import CGSTask, Plan
from ._docs import forget
from ._history import metric_cols, settle, sweep_records
from ._params import (
    check_params,
    evaluate_every,
    layout,
    priors,
    sampler_kind,
    validate_dataset,
)
from ._recover import make_z, resume_clock_of, token_offsets
from ._svi_fit import make_svi_arrays, run_svi

__all__ = ["LDA"]


class LDA(TransformerMixin, PSEstimator):
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
    _nwk: np.ndarray | None
    n_features_in_: int

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

    # -- the PS side --------------------------------------------------------------------

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

    def close(self) -> None:
        """As every model's, and drop the documents' topic state kept on the workers
        (before, a closed model's tokens stayed in memory until it was refitted)."""
        uid = getattr(self, "_uid", None)
        if uid is not None:
            with contextlib.suppress(Exception):
                self._client().run(forget, uid)
        super().close()

    def _forget(self) -> None:
        uid = getattr(self, "_uid", None)
        if uid is not None:
            with contextlib.suppress(Exception):
                self._client().run(forget, uid)
        super()._forget()

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

    def _fit(self, X: Any, sweeps: int, resume: str | None = None) -> LDA:
        client = self._client()
        n_tasks = self._n_tasks(client)
        data = as_unlabelled(X, client, n_tasks, est=self)
        try:
            return self._fit_dataset(client, data, sweeps, resume)
        finally:
            data.release()

    def _fit_dataset(
        self, client: Any, data: Prepared, sweeps: int, resume: str | None = None
    ) -> LDA:
        ds = data.ds
        V = int(ds.n_features)
        if hasattr(self, "n_features_in_") and self.n_features_in_ != V:
            if self.n_features_in_ < V or not data.native:
                raise InvalidArgumentError(
                    f"X has {V} words (features), but LDA is expecting "
                    f"{self.n_features_in_} words as input"
                )
            V = self.n_features_in_
        sizes = validate_dataset(ds, V)  # before anything on the PS changes
        K = int(self.n_topics)
        alpha, beta = priors(self)
        groups, group_size = layout(self, len(ds.partitions))
        ps = self._context(client)
        if not getattr(self, "_arrays", None):
            self._make_arrays(ps, V, K)
        self.n_features_in_ = V
        if getattr(self, "_uid", None) is None:
            self._uid = uuid.uuid4().hex
        self._nwk = None
        sweep0 = int(getattr(self, "t_", 0))
        if self.solver == "ma-svi":
            res, rows, sp, tokens = run_svi(self, ps, ds, V, K, alpha, beta, self._seed(),
                                            sweeps, sweep0)  # fmt: skip
            self.n_train_tokens_ = tokens
            self._record(res, rows, sweeps, sweep0, sp.rounds)
            return self._done(sweep0, sweeps, res)
        met = ps.zeros(f"{self._arrays['nwk']}.metrics-{uuid.uuid4().hex[:6]}",
                       (sweeps + 1, metric_cols(len(ds.partitions))), "float64")  # fmt: skip
        plan = Plan(
            nwk=self._arrays["nwk"], nk=self._arrays["nk"], metrics=met.name, model=self._uid,
            n_words=V, n_topics=K, alpha=alpha, beta=beta, mh_steps=int(self.mh_steps),
            sampler=sampler_kind(self),
            seed=self._seed(), sweeps=sweeps, sweep0=sweep0,
            val_fraction=float(self.validation_fraction),
            evaluate_every=evaluate_every(self),
            fold_in=int(config.get("daskangel.lda.fold-in-iters")),
            **self._z_plan(ps, sizes, resume),
        )  # fmt: skip
        try:
            res = train(
                ps, CGSTask(plan), ds, groups=groups, group_size=group_size,
                sync=as_sync(self.sync), epochs=sweeps + 1, progress=self.progress,
                unit="sweep",
            )  # fmt: skip
            rows = settle(np.asarray(ps.get_array(met.name).get()))  # (a resume may remake it)
        finally:
            with contextlib.suppress(Exception):
                ps.drop(met.name)
        if resume is not None and not plan.snap_every:  # z only carried the snapshot's topics
            with contextlib.suppress(Exception):
                ps.drop(self._arrays.pop("z"))
        self.n_train_tokens_ = int(ps.get_array(plan.nk).get().sum())
        self._record(res, rows, sweeps, sweep0, 1, first=max(plan.resume_clock, 1))
        return self._done(sweep0, sweeps, res)

    def _z_plan(
        self, ps: PSContext, sizes: list[tuple[int, int]], resume: str | None = None
    ) -> dict[str, Any]:
        """The plan's fields keeping the assignments in the snapshots (``._recover``):
        with clock snapshots or a resume, the ``z`` array of this data's layout (kept
        between fits on the same data, made anew otherwise; a resume loads the
        snapshot's into it)."""
        every = int(getattr(ps, "snapshot_every_clocks", None) or 0)
        recovery = str(getattr(ps, "recovery", "continue"))
        resume_clock = resume_clock_of(resume)
        if not every and resume is None:
            return {"recovery": recovery}
        offsets = token_offsets(sizes)
        layout = tuple(int(o) for o in offsets)
        fresh = self._arrays.get("z") is None or getattr(self, "_z_layout", None) != layout
        if fresh:
            if self._arrays.get("z") is not None:
                with contextlib.suppress(Exception):
                    ps.drop(self._arrays["z"])
            self._arrays["z"] = make_z(ps, f"{self._arrays['nwk']}.z", int(offsets[-1]))
            self._z_layout = layout
        return {"z": self._arrays["z"], "z_offsets": layout[:-1], "snap_every": every,
                "recovery": recovery, "z_fresh": fresh, "resume_clock": resume_clock}  # fmt: skip

    def _done(self, sweep0: int, sweeps: int, res: Any) -> LDA:
        self.t_ = sweep0 + sweeps
        self.n_iter_ = sweeps
        self.train_result_ = res
        self._pull()  # transform / score read this copy and change nothing (scikit-learn's contract)
        return self

    def _seed(self) -> int:
        """The fit's seed: ``random_state``, or one drawn once and kept (``seed_``), so
        the held-out split and the random streams stay the same over ``partial_fit``."""
        if getattr(self, "seed_", None) is None:
            rs = self.random_state
            self.seed_ = int(np.random.default_rng().integers(0, 2**31) if rs is None else rs)
        return int(self.seed_)

    def _record(
        self, res: Any, rows: np.ndarray, sweeps: int, sweep0: int, per: int, first: int = 1
    ) -> None:
        """``history_`` rows of the sweeps ``first ..`` of this fit (a resumed fit: the
        sweeps it ran)."""
        recs = sweep_records(res, rows, sweeps, sweep0, per)[first - 1 :]
        self._append_history(recs, sweep0, res.job)
        self.heldout_ll_before_ = rows[0, 0] / rows[0, 1] if rows[0, 1] else float("nan")

    # -- using the topics -----------------------------------------------------------------

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

    def transform(self, X: Any) -> Any:
        """Document-topic distributions theta of ``X`` with the topics held fixed (rows sum to 1)."""
        return theta_of(self, X, self.topic_word_, priors(self)[0])

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

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.input_tags.positive_only = True
        tags.requires_fit = True
        return tags
