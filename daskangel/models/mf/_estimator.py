"""``MatrixFactorization``: a recommender whose factor matrices live on the parameter server.

See :class:`MatrixFactorization` and the user guide (``docs/mf.md``).

Example
-------
>>> from daskangel.models import MatrixFactorization              # doctest: +SKIP
>>> mf = MatrixFactorization(n_factors=50, max_iter=30,           # doctest: +SKIP
...                          user_col="userId", item_col="movieId").fit(ratings)
>>> mf.predict(pairs); mf.recommend([1, 2], n=10)                  # doctest: +SKIP
"""

from __future__ import annotations

import tempfile
from typing import Any, ClassVar

import numpy as np

from .._core import PSEstimator
from ._fit import run_fit
from ._ingest import Ingested, ingest
from ._params import check_params, resolved_lr, resolved_reg
from ._predicting import FactorPredictions, _with_y

__all__ = ["MatrixFactorization"]


class MatrixFactorization(FactorPredictions):
    """Matrix factorisation for recommendations, trained on the parameter server.

    A rating is modelled as ``mu + b_u + b_i + p_u . q_i``.  The item factors
    and biases live on the PS, row-partitioned; with ``solver='sgd'`` each
    training task holds whole users (their ratings and factors) and pulls the
    item rows its minibatches need, with ``solver='als'`` both matrices are on
    the PS and each half-iteration solves rows independently.

    Parameters
    ----------
    n_factors
        Rank ``K`` of the factorisation.
    solver
        ``'sgd'`` (stochastic gradient descent, Angel's and Bösen's MF) or
        ``'als'`` (alternating least squares: ALS-WR for explicit ratings,
        Hu-Koren-Volinsky weighted ALS with conjugate-gradient row solves for
        implicit feedback).
    feedback
        ``'explicit'`` (ratings to predict; RMSE) or ``'implicit'`` (counts or
        ratings as confidence ``1 + alpha * r`` that the user likes the item;
        ``solver='als'``).
    biases
        Learn user and item biases (explicit feedback).
    reg
        L2 regularisation (``None``: the solver's default, see ``_params``).
        SGD: per rating; ALS-WR: multiplied by the row's number of ratings.
    learning_rate
        SGD step size (``None``: 0.01 for ``optimizer='sgd'``, 0.05 for the
        adaptive ones).
    optimizer
        How item rows are updated with ``solver='sgd'``: ``'sgd'`` (rating by
        rating on the task's copy, deltas pushed), ``'adagrad'`` or
        ``'adarevision'`` (gradients pushed to the server-side optimiser; Bösen's
        AdaRevision corrects for the updates made since the task's pull).
    max_iter
        Epochs (SGD) or iterations (ALS).
    parallelism
        ``'data'`` (tasks hold users; items shared on the PS), ``'model'``
        (DSGD strata: item blocks rotate among the tasks, so no two update the
        same item in a sub-epoch) or ``'hybrid'`` (rotation inside ``groups``
        groups, data parallel between them).
    groups
        Groups of ``parallelism='hybrid'`` (default 2).
    sync
        ``'bsp'``, ``'ssp:<s>'``, ``'asp'`` or a protocol object.
    clocks_per_epoch
        Clocks (pushes and synchronisations) per SGD epoch.
    batch_size
        Ratings per server-side optimiser step (``'adagrad'``,
        ``'adarevision'``; default 10,000).
    init_std
        Factors start as ``N(0, init_std^2)``.
    alpha, cg_steps
        Implicit ALS: confidence ``1 + alpha * r``; conjugate-gradient steps
        per row solve.
    validation_fraction
        Share of each task's ratings held out; ``history_`` then has ``val_rmse``.
    user_col, item_col, rating_col
        Column names of DataFrame input (ids of any integer or string type).
    clip
        Clip predictions to the training ratings' range.
    snapshot, snapshot_every
        With ``snapshot_every`` (clocks, or a duration like ``"30s"``) the
        model's own PS context snapshots to ``snapshot`` (an fsspec URL; a
        temporary directory by default, which suits a LocalCluster) with
        ``recovery="rollback"``: a fit that loses a worker goes back to the
        newest snapshot (every array, every task) and replays from there, so
        under BSP it ends with the model of a fit without the fault.  Users'
        rows are written to the PS before every snapshot taken by clocks.
    n_tasks
        Training tasks (default: one per worker thread).
    random_state
        Seed of the initial factors, splits and epoch orders.
    progress
        A progress bar of epochs (ALS: iterations) with the latest metrics
        (``"auto"``: shown in a terminal or Jupyter, not in batch logs; ``True`` /
        ``False``).
    warm_start
        ``fit`` continues from the current factors instead of starting over.
    client, ps
        The Dask client, or a :class:`~daskangel.PSContext` to put the arrays in.

    Attributes
    ----------
    user_ids_, item_ids_
        Raw ids of the users and items, in the order of the factor rows.
    global_mean_, rating_range_
        ``mu`` and the ``(min, max)`` of the training ratings.
    history_
        One row per epoch: ``train_rmse`` and, when measured, ``val_rmse``,
        ``eval_rmse`` (``eval_set=``) and ``loss`` (implicit).

    Notes
    -----
    Duplicate ``(user, item)`` pairs in one ``fit`` / ``partial_fit``: the last
    one wins (input order; dask and Dataset input: partition order).
    """

    _fitted: ClassVar[tuple[str, ...]] = (
        *PSEstimator._fitted,
        "n_users_",
        "n_items_",
        "user_ids_",
        "item_ids_",
        "user_counts_",
        "item_counts_",
        "global_mean_",
        "rating_range_",
    )
    _saved: ClassVar[tuple[str, ...]] = (
        "t_",
        "n_iter_",
        "n_users_",
        "n_items_",
        "user_ids_",
        "item_ids_",
        "user_counts_",
        "item_counts_",
        "global_mean_",
        "rating_range_",
    )
    _fitted_marker: ClassVar[str] = "n_users_"
    _unpicklable: ClassVar[tuple[str, ...]] = (*PSEstimator._unpicklable, "_seen", "_maps")

    # the fits' ingested ratings (exclude_seen)
    _seen: list[Ingested]

    def __init__(
        self,
        n_factors: int = 50,
        *,
        solver: str = "sgd",
        feedback: str = "explicit",
        biases: bool = True,
        reg: float | None = None,
        learning_rate: float | None = None,
        optimizer: str = "sgd",
        max_iter: int = 20,
        parallelism: str = "data",
        groups: int | None = None,
        sync: Any = "bsp",
        clocks_per_epoch: int = 4,
        batch_size: int | None = None,
        init_std: float = 0.05,
        alpha: float = 40.0,
        cg_steps: int = 3,
        validation_fraction: float = 0.0,
        user_col: str = "user",
        item_col: str = "item",
        rating_col: str = "rating",
        clip: bool = True,
        snapshot: str | None = None,
        snapshot_every: Any = None,
        n_tasks: int | None = None,
        random_state: int | None = None,
        progress: bool | str = "auto",
        warm_start: bool = False,
        client: Any = None,
        ps: Any = None,
    ) -> None:
        self.n_factors = n_factors
        self.solver = solver
        self.feedback = feedback
        self.biases = biases
        self.reg = reg
        self.learning_rate = learning_rate
        self.optimizer = optimizer
        self.max_iter = max_iter
        self.parallelism = parallelism
        self.groups = groups
        self.sync = sync
        self.clocks_per_epoch = clocks_per_epoch
        self.batch_size = batch_size
        self.init_std = init_std
        self.alpha = alpha
        self.cg_steps = cg_steps
        self.validation_fraction = validation_fraction
        self.user_col = user_col
        self.item_col = item_col
        self.rating_col = rating_col
        self.clip = clip
        self.snapshot = snapshot
        self.snapshot_every = snapshot_every
        self.n_tasks = n_tasks
        self.random_state = random_state
        self.progress = progress
        self.warm_start = warm_start
        self.client = client
        self.ps = ps

    # -- parameters and context ---------------------------------------------------------

    def _context_options(self) -> dict[str, Any]:
        if self.snapshot_every is None:
            return {}
        url = self.snapshot or tempfile.mkdtemp(prefix="daskangel-mf-snap-")
        return {"snapshot": url, "snapshot_every": self.snapshot_every, "recovery": "rollback"}

    @property
    def reg_(self) -> float:
        return resolved_reg(self.solver, self.feedback, self.reg)

    @property
    def learning_rate_(self) -> float:
        return resolved_lr(self.solver, self.optimizer, self.learning_rate)

    def _forget(self) -> None:
        super()._forget()
        self._seen = []
        self._maps = None

    # -- fitting ------------------------------------------------------------------------

    def fit(
        self, ratings: Any, y: Any = None, *, eval_set: Any = None, resume: str | None = None
    ) -> MatrixFactorization:
        """Train from scratch (``warm_start=True``: from the current factors).

        ``ratings``: a pandas or dask DataFrame (columns ``user_col``,
        ``item_col``, ``rating_col``), a numpy array ``(user, item, rating)``, a
        ``scipy.sparse`` user x item matrix or a ``read_ratings`` Dataset.  ``y``
        (optional, local input only): the ratings, with ``ratings`` holding the
        pairs.  ``eval_set``: ratings scored after every epoch (``eval_rmse``).
        ``resume``: a snapshot written during an earlier fit of this model with
        the same parameters and ratings (``snapshot=url, snapshot_every=N``): the
        fit continues from the snapshot's clock (see
        :meth:`~daskangel.models._core.PSEstimator._resuming`).  ALS is
        order-independent and ends with exactly the model of the fit that ran
        through; so does SGD with one task under BSP (with several, the
        servers add the tasks' deltas in the order they arrive).
        """
        check_params(self)
        if not self.warm_start or not hasattr(self, "n_users_"):
            self._forget()
        with self._resuming(resume):
            return self._fit(_with_y(ratings, y, self.rating_col), eval_set, int(self.max_iter))

    def partial_fit(
        self, ratings: Any, y: Any = None, *, eval_set: Any = None
    ) -> MatrixFactorization:
        """One more epoch on ``ratings``, continuing from the current factors.

        New users and items are added (their rows start like a first fit's);
        the global mean stays that of the first fit.
        """
        check_params(self)
        return self._fit(_with_y(ratings, y, self.rating_col), eval_set, 1)

    def _fit(self, ratings: Any, eval_set: Any, epochs: int) -> MatrixFactorization:
        client = self._client()
        n_tasks = self._n_tasks(client)
        umap, imap = self._id_maps()
        ing = ingest(ratings, eval_set, self._columns(), umap, imap, n_tasks, client)
        ps = self._context(client)
        if not hasattr(self, "n_users_"):
            implicit = self.feedback == "implicit"
            self.global_mean_ = 0.0 if implicit or not self.biases else ing.total / ing.n
            self.rating_range_ = (ing.lo, ing.hi)
        else:
            lo, hi = self.rating_range_
            self.rating_range_ = (min(lo, ing.lo), max(hi, ing.hi))
        if not self._on_ps():
            self._make_arrays(ing)
            self._upload_pulled()
        else:
            self._grow_arrays(len(ing.umap), len(ing.imap))
        self._reset()
        self._set_ids(ing)
        res, rows = run_fit(self, ps, ing, epochs)
        self._record(rows, getattr(res, "job", None))
        self.t_ = int(getattr(self, "t_", 0)) + epochs
        self.n_iter_ = epochs
        self.train_result_ = res
        if not ing.local:
            ing.parts.source = None  # the chunks are not needed any more
        self._seen = [*getattr(self, "_seen", []), ing]
        return self

    def _set_ids(self, ing: Ingested) -> None:
        nu, ni = len(ing.umap), len(ing.imap)
        old_u = getattr(self, "user_counts_", np.zeros(0, np.int64))
        old_i = getattr(self, "item_counts_", np.zeros(0, np.int64))
        self.user_counts_ = _add_counts(old_u, ing.user_counts, nu)
        self.item_counts_ = _add_counts(old_i, ing.item_counts, ni)
        self.user_ids_, self.item_ids_ = ing.umap.ids, ing.imap.ids
        self.n_users_, self.n_items_ = nu, ni
        self._maps = (ing.umap, ing.imap)

    def _record(self, rows: np.ndarray, job: str | None = None) -> None:
        from ._plan import finish

        e0 = int(getattr(self, "t_", 0))
        recs = [{"epoch": e0 + e + 1, **finish(r)} for e, r in enumerate(rows)]
        self._append_history(recs, e0, job)

    def close(self) -> None:
        self._seen = []
        super().close()

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.input_tags.string = True
        tags.target_tags.required = False
        return tags


def _add_counts(old: np.ndarray, new: np.ndarray, n: int) -> np.ndarray:
    out = np.zeros(n, np.int64)
    out[: old.shape[0]] += old
    out[: new.shape[0]] += new
    return out
