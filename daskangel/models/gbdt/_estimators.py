"""Gradient-boosted trees on the parameter server: :class:`GBDTClassifier`, :class:`GBDTRegressor`.

The trees grow level by level with Angel's two-phase split finding: the
tasks push gradient histograms of their rows into a PS array cut by feature,
the servers find each node's best split of their features, and only those
candidates travel back (``_task``, ``_grower``, ``_psfs``).  Bin edges come
from a distributed quantile sketch merged on the PS (``_sketch``); each task
bins its rows once.  The fitted trees stay on the PS as one array (saved as
zarr by ``save``); predictions walk them locally, on dask blocks, or on the
workers holding a Dataset's partitions.

Missing values: NaN always; in a sparse input (scipy.sparse, libsvm Datasets)
every unstored entry too.  Each split learns where they go (XGBoost's
sparsity-aware split finding).

Example
-------
>>> from daskangel.models import GBDTClassifier                       # doctest: +SKIP
>>> clf = GBDTClassifier(n_estimators=100, max_depth=6).fit(ds)       # doctest: +SKIP
>>> clf.predict_proba(X_test)[:, 1]                                   # doctest: +SKIP
>>> clf.history_[["iteration", "train_loss", "val_auc"]]              # doctest: +SKIP
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from typing import Any, ClassVar

import numpy as np
from sklearn.base import ClassifierMixin, RegressorMixin

from ...errors import InvalidArgumentError
from .._core import PSEstimator
from ._fit import fit_gbdt
from ._params import check_params
from ._predict import raw_margins
from ._trees import NF, importances, margins, to_json

__all__ = ["GBDTClassifier", "GBDTRegressor"]

_DOC = """
    Parameters
    ----------
    loss
        Classifier: ``'log_loss'`` (binary; softmax with one tree per class and
        round for more classes).  Regressor: ``'squared_error'``,
        ``'absolute_error'`` (leaves renewed to residual medians) or ``'huber'``
        (``huber_delta``).
    learning_rate, n_estimators, max_depth, max_leaf_nodes
        Shrinkage of every leaf; boosting rounds; depth of a tree (edges from
        the root, >= 1); leaves of a tree (``None``: ``2 ** max_depth``; when it
        binds, a level splits its largest gains first).
    max_bins
        Bins of a feature's present values (2 .. 65535; up to 255 keeps one
        byte a value on the workers).
    min_child_weight, min_samples_leaf, reg_lambda
        Least hessian and rows of a child; L2 penalty of the leaf values.
    subsample, colsample_bytree
        Share of the training rows (per round, seeded) and of the features
        (per tree) used.
    early_stopping, validation_fraction, n_iter_no_change, tol
        ``'auto'`` stops early above 10,000 rows (scikit-learn's rule): a seeded
        ``validation_fraction`` of every partition is held out, and training
        stops once its loss has not improved by ``tol`` for
        ``n_iter_no_change`` rounds.
    snapshot, snapshot_every
        With ``snapshot_every`` (rounds) the model's own PS context snapshots to
        ``snapshot`` (an fsspec URL; a temporary directory by default) with
        ``recovery="rollback"``; every snapshot holds the finished rounds' trees
        and metrics, and ``fit(X, y, resume=url)`` continues from one.
    random_state, n_tasks, progress, client, ps
        Seed of the splits and samples; training tasks (default one per worker
        thread); a progress bar of trees (rounds of ``K`` trees for ``K`` classes) with
        the latest metrics (``"auto"``: shown in a terminal or Jupyter, not in batch
        logs; ``True`` / ``False``); the Dask client; an existing PS context.

    Attributes
    ----------
    n_estimators_, n_iter_
        Rounds fitted.
    n_trees_per_iteration_
        ``K``: classes of a softmax, else 1.
    feature_importances_
        Total split gain per feature, normalised.
    history_
        One row per round: ``train_loss`` and ``val_*`` metrics.
    level_stats_
        One row per tree level: open nodes, bytes pushed to the PS and moved
        by the split psf, and ``whole``: what pushing every task's histogram
        of every open node to one client would have moved.

    .. warning:: Sums of histograms from more than two tasks are added on the
       servers in arrival order, so two fits may differ in the last bits (and,
       on an exact tie of gains, in a split).  Bin edges come from a sample of
       ``daskangel.gbdt.sketch-sample`` values per feature and partition.
"""


class _GBDT(PSEstimator):
    """Base of the GBDT estimators (see the module docstring); not used directly."""

    _task: ClassVar[str] = "classifier"
    _losses: ClassVar[tuple[str, ...]] = ()
    _fitted: ClassVar[tuple[str, ...]] = (
        *PSEstimator._fitted, "classes_", "n_estimators_", "n_trees_per_iteration_",
        "baseline_", "unstored_missing_", "level_stats_",
    )  # fmt: skip
    _saved: ClassVar[tuple[str, ...]] = (
        *PSEstimator._saved, "classes_", "n_estimators_", "n_trees_per_iteration_",
        "baseline_", "unstored_missing_",
    )  # fmt: skip
    _trees: np.ndarray | None = None

    def _early(self, n_rows: int) -> bool:
        if self.early_stopping == "auto":
            return n_rows > 10_000
        return bool(self.early_stopping)

    def _context_options(self) -> dict[str, Any]:
        every = getattr(self, "snapshot_every", None)
        if every is None:
            return {}
        url = getattr(self, "snapshot", None) or tempfile.mkdtemp(prefix="daskangel-gbdt-snap-")
        return {"snapshot": url, "snapshot_every": int(every), "recovery": "rollback"}

    def fit(self, X: Any, y: Any = None, *, resume: str | None = None) -> _GBDT:
        """Grow ``n_estimators`` rounds of trees on ``X, y`` (a Dataset carries its ``y``).

        ``resume``: a snapshot taken during an earlier fit of this estimator
        class with the same parameters (an int ``random_state``), data and
        ``n_tasks`` (``snapshot=url, snapshot_every=N``, or a ``ps=`` context
        made with them): the fit continues at the round after the snapshot's and
        ends with the trees of the fit that was never interrupted (see
        :meth:`PSEstimator._resuming`).  A snapshot of another model, other
        parameters or other data is refused before anything is made.

        .. warning::
           ``history_`` holds every round (the snapshot's from the PS);
           ``level_stats_`` only the rounds the resumed fit grew.
        """
        check_params(self)
        self._forget()
        from sklearn.utils import check_random_state

        rs = self.random_state
        self._seed = (
            int(rs)
            if isinstance(rs, (int, np.integer))
            else int(check_random_state(rs).randint(2**31 - 1))
        )
        with self._resuming(resume):
            r = fit_gbdt(self, X, y, resume)
        self._arrays = {"trees": r.trees}
        self.n_features_in_ = r.n_features
        if r.classes is not None:
            self.classes_ = np.asarray(r.classes)
        self.n_trees_per_iteration_ = r.K
        self.baseline_ = np.asarray(r.baseline, np.float64)
        self.unstored_missing_ = bool(r.unstored_missing)
        self.n_estimators_ = self.n_iter_ = self.t_ = r.n_iter
        import pandas as pd

        # history_, and the same rows to the dashboard's metrics plot of the fit's job
        self._append_history(r.history, 0, r.result.job)
        self.level_stats_ = pd.DataFrame(r.levels)
        self.train_result_ = r.result
        self._trees = None
        self._pull()  # predicting reads this copy and changes nothing (scikit-learn's contract)
        return self

    # -- the PS side ----------------------------------------------------------------

    def _pull(self) -> np.ndarray | None:
        if self._trees is not None or not self._on_ps():
            return self._trees
        arr = self._ps.get_array(self._arrays["trees"])
        n = int(self.n_estimators_) * int(self.n_trees_per_iteration_)
        width = arr.shape[1]
        flat = np.asarray(arr.get(rows=np.arange(n)), np.float64) if n else np.zeros((0, width))
        self._trees = flat.reshape(n, width // NF, NF)
        return self._trees

    def _reset(self) -> None:
        self._trees = None

    def _tree_array(self) -> np.ndarray:
        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(self, "n_features_in_")
        T = self._pull()
        if T is None:
            raise InvalidArgumentError(
                f"{type(self).__name__}: the trees are gone (closed context)"
            )
        return T

    # -- predicting -------------------------------------------------------------------

    def _margins(self, X: Any) -> Any:
        return raw_margins(self, X, self._tree_array())

    def _staged(self, X: Any) -> Iterator[np.ndarray]:
        from ._predict import check_local

        T = self._tree_array()
        Xc = check_local(self, X)
        K = int(self.n_trees_per_iteration_)
        m = margins(Xc, T, K, self.baseline_, self.unstored_missing_, 0, 0)
        for it in range(int(self.n_estimators_)):
            m += margins(Xc, T, K, np.zeros(K), self.unstored_missing_, it * K, (it + 1) * K)
            yield m.copy()

    @property
    def feature_importances_(self) -> np.ndarray:
        """Total gain of each feature's splits over every tree, normalised to sum 1."""
        return importances(self._tree_array(), int(self.n_features_in_))

    def to_json(self) -> str:
        """The trees as JSON text (see :func:`daskangel.models.gbdt._trees.to_json`)."""
        meta: dict[str, Any] = {"n_features": int(self.n_features_in_), "loss": self.loss,
                                "unstored_missing": bool(self.unstored_missing_)}  # fmt: skip
        if hasattr(self, "classes_"):
            meta["classes"] = self.classes_.tolist()
        return to_json(self._tree_array(), int(self.n_trees_per_iteration_), self.baseline_, meta)

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.input_tags.allow_nan = True
        return tags


def _sigmoid(m: Any) -> Any:
    return 1.0 / (1.0 + np.exp(-m))


def _softmax(m: np.ndarray) -> np.ndarray:
    e = np.exp(m - m.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _proba(m: Any) -> Any:
    if m.shape[1] == 1:
        p = _sigmoid(m[:, 0])
        stack = np.stack if not hasattr(p, "dask") else __import__("dask.array").array.stack
        return stack([1.0 - p, p], axis=1)
    if hasattr(m, "dask"):
        return m.map_blocks(_softmax, dtype=np.float64)
    return _softmax(m)


class GBDTClassifier(ClassifierMixin, _GBDT):
    __doc__ = "Gradient-boosted trees for classification on the parameter server." + _DOC
    _task = "classifier"
    _losses = ("log_loss",)

    def __init__(
        self, loss: str = "log_loss", learning_rate: float = 0.1, n_estimators: int = 100,
        max_depth: int = 6, max_leaf_nodes: int | None = None, max_bins: int = 255,
        min_child_weight: float = 1e-3, min_samples_leaf: int = 20, reg_lambda: float = 0.0,
        subsample: float = 1.0, colsample_bytree: float = 1.0, early_stopping: Any = "auto",
        validation_fraction: float = 0.1, n_iter_no_change: int = 10, tol: float = 1e-7,
        snapshot: str | None = None, snapshot_every: int | None = None,
        random_state: Any = None, n_tasks: int | None = None, progress: bool | str = "auto",
        client: Any = None, ps: Any = None,
    ) -> None:  # fmt: skip
        self._keep_params(locals())

    def decision_function(self, X: Any) -> Any:
        """Margins: ``(n,)`` for two classes, ``(n, K)`` for more."""
        m = self._margins(X)
        return m[:, 0] if m.shape[1] == 1 else m

    def predict_proba(self, X: Any) -> Any:
        """Class probabilities ``(n, n_classes)`` (sigmoid or softmax of the margins)."""
        return _proba(self._margins(X))

    def predict(self, X: Any) -> Any:
        """Most probable class of every row, in input order."""
        m = self._margins(X)
        idx = (m[:, 0] > 0).astype(np.int64) if m.shape[1] == 1 else m.argmax(axis=1)
        if hasattr(idx, "dask"):
            classes = self.classes_
            return idx.map_blocks(lambda i: classes[i], dtype=classes.dtype)
        return self.classes_[idx]

    def staged_predict_proba(self, X: Any) -> Iterator[np.ndarray]:
        """Probabilities after each round (numpy / scipy.sparse input)."""
        for m in self._staged(X):
            yield _proba(m)

    def staged_predict(self, X: Any) -> Iterator[np.ndarray]:
        """Predicted classes after each round (numpy / scipy.sparse input)."""
        for m in self._staged(X):
            idx = (m[:, 0] > 0).astype(np.int64) if m.shape[1] == 1 else m.argmax(axis=1)
            yield self.classes_[idx]

    def staged_decision_function(self, X: Any) -> Iterator[np.ndarray]:
        for m in self._staged(X):
            yield m[:, 0] if m.shape[1] == 1 else m


class GBDTRegressor(RegressorMixin, _GBDT):
    __doc__ = "Gradient-boosted trees for regression on the parameter server." + _DOC
    _task = "regressor"
    _losses = ("squared_error", "absolute_error", "huber")

    def __init__(
        self, loss: str = "squared_error", learning_rate: float = 0.1, n_estimators: int = 100,
        max_depth: int = 6, max_leaf_nodes: int | None = None, max_bins: int = 255,
        min_child_weight: float = 1e-3, min_samples_leaf: int = 20, reg_lambda: float = 0.0,
        subsample: float = 1.0, colsample_bytree: float = 1.0, early_stopping: Any = "auto",
        validation_fraction: float = 0.1, n_iter_no_change: int = 10, tol: float = 1e-7,
        huber_delta: float = 1.0, snapshot: str | None = None,
        snapshot_every: int | None = None, random_state: Any = None,
        n_tasks: int | None = None, progress: bool | str = "auto", client: Any = None,
        ps: Any = None,
    ) -> None:  # fmt: skip
        self._keep_params(locals())

    def predict(self, X: Any) -> Any:
        """Predicted targets, in input order."""
        return self._margins(X)[:, 0]

    def staged_predict(self, X: Any) -> Iterator[np.ndarray]:
        """Predictions after each round (numpy / scipy.sparse input)."""
        for m in self._staged(X):
            yield m[:, 0]
