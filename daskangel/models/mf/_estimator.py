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
import uuid
from typing import Any, ClassVar

import numpy as np

from ... import config
from ...errors import InvalidArgumentError, InvalidStateError
from .._core import PSEstimator, is_dask
from ._arrays import RULES, bound_optimizer, grow, grow_state, new_factors, read_rows, rule_of
from ._fit import run_fit
from ._ids import IdMap
from ._ingest import Ingested, ingest
from ._kernels import predict as predict_kernel
from ._params import check_params, resolved_lr, resolved_reg
from ._ratings import Columns, raw_pairs

__all__ = ["MatrixFactorization"]


class MatrixFactorization(PSEstimator):
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

    # local copies of the factor matrices (pulled, or unpickled); the fits' ingested
    # ratings (exclude_seen); the id maps of the rows
    _P: np.ndarray | None
    _Q: np.ndarray | None
    _seen: list[Ingested]
    _maps: tuple[IdMap, IdMap] | None

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

    def _columns(self) -> Columns:
        return Columns(self.user_col, self.item_col, self.rating_col, self.feedback == "implicit")

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

    def _rule(self) -> Any:
        if self.solver != "sgd" or self.optimizer not in RULES:
            return None
        staleness = max(0, int(_staleness(self.sync)))
        return rule_of(self.optimizer, self.learning_rate_, max(8, 4 * (staleness + 2)))

    # -- ids ------------------------------------------------------------------------

    def _id_maps(self) -> tuple[IdMap | None, IdMap | None]:
        if not hasattr(self, "n_users_"):
            return None, None
        maps = getattr(self, "_maps", None)
        if maps is None or len(maps[0]) != self.n_users_ or len(maps[1]) != self.n_items_:
            maps = (IdMap(self.user_ids_, "user"), IdMap(self.item_ids_, "item"))
            self._maps = maps
        return maps

    # -- the PS side ------------------------------------------------------------------

    def _array(self, key: str) -> Any:
        if not self._on_ps():
            raise InvalidStateError(
                f"{type(self).__name__}: its arrays are not on a PS (unpickled or closed)"
            )
        return self._ps.get_array(self._arrays[key])

    def _make_arrays(self, ing: Ingested) -> None:
        ps = self._ps
        K = int(self.n_factors)
        seed = int(self.random_state or 0)
        name = f"mf-{uuid.uuid4().hex[:8]}"
        std = float(self.init_std)
        users = new_factors(ps, f"{name}.users", len(ing.umap), K, std, seed)
        items = new_factors(ps, f"{name}.items", len(ing.imap), K, std, seed + 1)
        rule = self._rule()
        state: dict[str, str] = {}
        ustate = None
        if rule is not None:
            bound = rule.attach(ps, items, name=f"{items.name}.opt")
            state = {s: a.name for s, a in bound.state.items()}
            ustate = ps.full(f"{name}.users-h", (len(ing.umap), K + 1), 1e-2).name
        self._arrays = {
            "users": users.name,
            "items": items.name,
            "user_state": ustate,
            "item_state": state,
            "rule": type(rule).__name__ if rule is not None else None,
        }

    def _grow_arrays(self, n_users: int, n_items: int) -> None:
        ps = self._ps
        K = int(self.n_factors)
        seed = int(self.random_state or 0)
        std = float(self.init_std)
        a = self._arrays
        users, items = ps.get_array(a["users"]), ps.get_array(a["items"])
        if n_users > users.meta.shape[0]:
            a["users"] = grow(ps, users, n_users, K, std, seed, None).name
            if a["user_state"]:
                us = ps.get_array(a["user_state"])
                a["user_state"] = grow(ps, us, n_users, K, std, seed, 1e-2).name
        if n_items > items.meta.shape[0]:
            old_n = items.meta.shape[0]
            new = grow(ps, items, n_items, K, std, seed + 1, None)
            a["items"] = new.name
            rule = self._rule()
            if a["item_state"] and rule is not None:
                a["item_state"] = grow_state(ps, rule, items.name, new, a["item_state"], old_n)

    def _bound(self) -> Any:
        rule = self._rule()
        if rule is None:
            return None
        return bound_optimizer(self._ps, rule, self._array("items"), self._arrays["item_state"])

    def _pull(self) -> Any:
        if getattr(self, "_P", None) is not None:
            return self._P, self._Q
        if not self._on_ps():
            return getattr(self, "_P", None), getattr(self, "_Q", None)
        self._P = read_rows(self._array("users"))
        self._Q = read_rows(self._array("items"))
        return self._P, self._Q

    def _reset(self) -> None:
        self._P = None
        self._Q = None

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

    def _upload_pulled(self) -> None:
        """After unpickling (local copies, no PS): put the copies back on the PS."""
        P, Q = getattr(self, "_P", None), getattr(self, "_Q", None)
        if P is None or Q is None:
            return
        self._array("users").set(P, rows=slice(0, P.shape[0]), casting="same_kind")
        self._array("items").set(Q, rows=slice(0, Q.shape[0]), casting="same_kind")

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

    # -- predicting -----------------------------------------------------------------------

    def _check_fitted(self) -> None:
        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(self, "n_users_")

    def _rows(self, key: str, rows: np.ndarray) -> np.ndarray:
        """Factor rows ``rows`` (distinct, sorted) from local copies or the PS."""
        local = getattr(self, "_P" if key == "users" else "_Q", None)
        if local is not None:
            return np.asarray(local[rows])
        if rows.shape[0] == 0:
            return np.zeros((0, int(self.n_factors) + 1), np.float32)
        return read_rows(self._array(key), rows)

    def _encode_pairs(self, u_raw: np.ndarray, i_raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        umap, imap = self._id_maps()
        assert umap is not None and imap is not None
        u, i = umap.encode(u_raw), imap.encode(i_raw)
        u[u >= 0] = np.where(self.user_counts_[u[u >= 0]] > 0, u[u >= 0], -1)
        i[i >= 0] = np.where(self.item_counts_[i[i >= 0]] > 0, i[i >= 0], -1)
        return u, i

    def _predict_raw(self, u_raw: np.ndarray, i_raw: np.ndarray) -> np.ndarray:
        u, i = self._encode_pairs(u_raw, i_raw)
        uu, ui = np.unique(u[u >= 0], return_inverse=True)
        iu, ii = np.unique(i[i >= 0], return_inverse=True)
        lu = np.full(u.shape[0], -1, np.int64)
        lu[u >= 0] = ui
        li = np.full(i.shape[0], -1, np.int64)
        li[i >= 0] = ii
        P, Q = self._rows("users", uu), self._rows("items", iu)
        lo, hi = self.rating_range_
        clip = bool(self.clip) and self.feedback == "explicit"
        return predict_kernel(lu, li, P, Q, float(self.global_mean_), lo, hi, clip)

    def predict(self, X: Any) -> Any:
        """Predicted ratings of ``(user, item)`` pairs, in input order.

        ``X``: a DataFrame with the user and item columns, a 2-column array, or
        a dask DataFrame (then a dask Series).  Unknown users or items get the
        global mean plus the known bias, never NaN.
        """
        self._check_fitted()
        if is_dask(X):
            if not hasattr(X, "map_partitions"):
                raise InvalidArgumentError(
                    "X: a dask array of pairs is not supported; pass a dask DataFrame"
                )
            est = self._predictor()
            return X.map_partitions(est._predict_frame, meta=(None, "f8"))
        u, i, _ = raw_pairs(X, self._columns())
        return self._predict_raw(u, i)

    def _predict_frame(self, df: Any) -> Any:
        import pandas as pd

        u, i, _ = raw_pairs(df, self._columns())
        return pd.Series(self._predict_raw(u, i), index=df.index)

    def _predictor(self) -> MatrixFactorization:
        """A copy to ship to dask tasks: its arrays bind by name on the workers."""
        import copy

        est = copy.copy(self)
        est._ps = None
        return est

    def rmse(self, X: Any, y: Any = None) -> float:
        """Root mean squared error of the predictions for rated pairs ``X``."""
        self._check_fitted()
        if is_dask(X):
            X = X.compute()
        u, i, r = raw_pairs(_with_y(X, y, self.rating_col), self._columns())
        if r is None:
            raise InvalidArgumentError(
                f"X: needs the rating column {self.rating_col!r} (or y=) to be scored"
            )
        if r.shape[0] == 0:
            raise InvalidArgumentError("X: empty (no ratings to score)")
        p = self._predict_raw(u, i)
        return float(np.sqrt(np.mean((p - r.astype(np.float64)) ** 2)))

    def score(self, X: Any, y: Any = None) -> float:
        """Minus the RMSE of rated pairs ``X`` (greater is better, as scikit-learn's
        model selection expects; :meth:`rmse` gives the RMSE itself)."""
        return -self.rmse(X, y)

    # -- factors ----------------------------------------------------------------------------

    def _factor_matrix(self, key: str, cols: slice | int) -> Any:
        self._check_fitted()
        local = getattr(self, "_P" if key == "users" else "_Q", None)
        if local is not None:
            return np.asarray(local[:, cols])
        arr = self._array(key)
        m = arr.meta
        if m.shape[0] * m.shape[1] * m.itemsize > config.get_bytes(
            "daskangel.models.mf.local-factors-bytes"
        ):
            return arr.to_dask_array()[:, cols]
        return read_rows(arr)[:, cols]

    @property
    def user_factors_(self) -> Any:
        """``(n_users, K)`` user factors (a dask array past ``local-factors-bytes``)."""
        return self._factor_matrix("users", slice(0, int(self.n_factors)))

    @property
    def item_factors_(self) -> Any:
        """``(n_items, K)`` item factors (a dask array past ``local-factors-bytes``)."""
        return self._factor_matrix("items", slice(0, int(self.n_factors)))

    @property
    def user_biases_(self) -> Any:
        return self._factor_matrix("users", int(self.n_factors))

    @property
    def item_biases_(self) -> Any:
        return self._factor_matrix("items", int(self.n_factors))

    # -- recommending ----------------------------------------------------------------------

    def recommend(self, users: Any, n: int = 10, *, exclude_seen: bool = True) -> Any:
        """The ``n`` best items for each of ``users``, computed on the workers.

        Returns a DataFrame ``user, rank, item, score`` (``n`` rows per user, in
        the order of ``users``).  ``exclude_seen`` leaves out the items the user
        rated in this model's fits.  Unknown users get the items with the best
        biases (the most popular, for implicit feedback).
        """
        from ._recommend import recommend

        self._check_fitted()
        return recommend(self, users, n, exclude_seen)

    def similar_items(self, items: Any, n: int = 10) -> Any:
        """The ``n`` items most similar (cosine of factors) to each of ``items``.

        Returns a DataFrame ``item, rank, similar, score``; unknown items raise.
        """
        from ._recommend import similar_items

        self._check_fitted()
        return similar_items(self, items, n)

    def close(self) -> None:
        self._seen = []
        super().close()

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.input_tags.string = True
        tags.target_tags.required = False
        return tags


def _staleness(sync: Any) -> int:
    from ...scheduler._clock_rule import as_sync

    s = as_sync(sync).staleness
    return 0 if s is None else int(s)


def _add_counts(old: np.ndarray, new: np.ndarray, n: int) -> np.ndarray:
    out = np.zeros(n, np.int64)
    out[: old.shape[0]] += old
    out[: new.shape[0]] += new
    return out


def _with_y(X: Any, y: Any, col: str) -> Any:
    if y is None:
        return X
    if is_dask(X) or is_dask(y):
        raise InvalidArgumentError("y: with dask input put the ratings in a column of X")
    if hasattr(X, "columns"):
        out = X.copy()
        out[col] = np.asarray(y)
        return out
    a = np.asarray(X)
    yy = np.asarray(y).reshape(-1, 1)
    if a.ndim != 2 or a.shape[0] != yy.shape[0]:
        raise InvalidArgumentError(
            f"y: expected one rating per pair ({a.shape[0]}), got {yy.shape[0]}"
        )
    return np.concatenate(
        [a[:, :2].astype(object) if a.dtype.kind == "O" else a[:, :2], yy], axis=1
    )
