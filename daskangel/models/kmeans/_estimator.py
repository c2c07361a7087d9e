"""``KMeans``: k-means clustering whose centres live on the parameter server.

scikit-learn's ``KMeans`` contract: ``fit`` / ``predict`` / ``fit_predict`` /
``transform`` / ``fit_transform`` / ``score``, ``cluster_centers_``,
``labels_``, ``inertia_``, ``n_iter_``, plus ``history_`` (inertia and centre
shift per iteration) and ``save`` / :func:`daskangel.models.load`.

State: ``_arrays = {"centers": name}``, a ``(k, d + 1)`` float64 PS array
(column ``d``: the cluster sizes of the last update); ``_centers`` is its
pulled ``(k, d)`` copy or ``None``.

Example
-------
>>> from daskangel.models import KMeans                               # doctest: +SKIP
>>> km = KMeans(n_clusters=20, random_state=0).fit(X)                 # doctest: +SKIP
>>> km.inertia_, km.n_iter_, km.history_.tail(1)                      # doctest: +SKIP
>>> (km.predict(X) == km.labels_).mean()                              # doctest: +SKIP
1.0
"""

from __future__ import annotations

import contextlib
import tempfile
from typing import Any, ClassVar

import numpy as np
from sklearn.base import ClusterMixin, TransformerMixin

from ...data import Dataset
from ...errors import InvalidArgumentError, InvalidStateError
from ...scheduler._clock_rule import as_sync
from .._core import Prepared, PSEstimator, as_unlabelled, in_input_order, input_order, is_dask
from ._fit import Run, fit_lloyd, fit_minibatch
from ._init import data_stats, initial_centres
from ._parallel import kmeans_parallel
from ._params import check_params
from ._predict import map_input

__all__ = ["KMeans"]


class KMeans(TransformerMixin, ClusterMixin, PSEstimator):
    """K-means clustering trained on the parameter server (Lloyd's algorithm).

    Parameters
    ----------
    n_clusters
        ``k``, the number of clusters.
    init
        ``'lloyd-sample'`` (default: scikit-learn's ``KMeans(n_init=10)`` on a
        seeded uniform sample of ``daskangel.kmeans.init-sample-per-cluster``
        rows per cluster; its centres are means of many rows, which keeps
        Lloyd out of the minima where D^2-sampled seeds end on sparse text),
        ``'k-means||'`` (Bahmani et al.'s scalable k-means++: oversampling rounds
        on the workers, the weighted candidates reduced on the driver),
        ``'k-means++'`` (greedy k-means++ on a seeded sample of at most
        ``daskangel.kmeans.init-sample`` rows), ``'random'`` (``k`` distinct
        rows) or an array ``(n_clusters, n_features)`` of starting centres.
    algorithm
        ``'lloyd'``: full passes, sums and counts per cluster pushed to the PS,
        centres updated by the servers.
    max_iter
        Centre updates per run at most.
    tol
        Stop when the summed squared centre shift is at most ``tol`` times the
        data's mean per-feature variance (scikit-learn's rule).
    batch_size
        Reserved for ``algorithm='minibatch'``.
    n_init
        Runs from different starting centres; the one with the lowest inertia is kept.
    n_tasks
        Training tasks (default: one per worker thread).
    snapshot, snapshot_every
        With ``snapshot_every`` (clocks: Lloyd iterations, or mini-batch steps)
        the model's own PS context snapshots to ``snapshot`` (an fsspec URL; a
        temporary directory by default, which suits a LocalCluster) with
        ``recovery="rollback"``: a fit that loses a worker goes back to the newest
        snapshot (every task and the accumulators) and ends as the fit without
        the failure would (Lloyd: the same centres to rounding).
    random_state
        Seed (``None``: a fresh one).
    progress
        Show a progress bar.
    client, ps
        The Dask client (default: the current one) or a PS context to train in.
    """

    _fitted: ClassVar[tuple[str, ...]] = (
        *PSEstimator._fitted, "inertia_", "labels_", "cluster_sizes_", "_centers",
    )  # fmt: skip
    _saved: ClassVar[tuple[str, ...]] = (*PSEstimator._saved, "inertia_")
    _centers: np.ndarray | None
    n_features_in_: int

    def __init__(
        self,
        n_clusters: int = 8,
        *,
        init: Any = "lloyd-sample",
        algorithm: str = "lloyd",
        max_iter: int = 300,
        tol: float = 1e-4,
        batch_size: int = 1024,
        n_init: int = 1,
        n_tasks: int | None = None,
        snapshot: str | None = None,
        snapshot_every: int | None = None,
        random_state: int | None = None,
        progress: bool = False,
        client: Any = None,
        ps: Any = None,
    ) -> None:
        self._keep_params(locals())

    # -- the PS side --------------------------------------------------------------------

    def _context_options(self) -> dict[str, Any]:
        every = getattr(self, "snapshot_every", None)
        if every is None:
            return {}
        url = getattr(self, "snapshot", None) or tempfile.mkdtemp(prefix="daskangel-kmeans-snap-")
        return {"snapshot": url, "snapshot_every": int(every), "recovery": "rollback"}

    def _pull(self) -> np.ndarray | None:
        return self._pulled("_centers", self._fetch)  # type: ignore[no-any-return]

    def _fetch(self) -> np.ndarray:
        C = np.asarray(self._ps.get_array(self._arrays["centers"]).get(), np.float64)
        self.cluster_sizes_ = C[:, -1].copy()
        return C[:, :-1].copy()

    def _reset(self) -> None:
        self._centers = None

    # -- fitting ------------------------------------------------------------------------

    def fit(self, X: Any, y: Any = None, *, resume: str | None = None) -> KMeans:
        """Cluster ``X`` (``y`` is ignored).

        ``X``: numpy, ``scipy.sparse`` CSR, pandas, a dask array / dataframe or a
        daskangel Dataset (e.g. ``angel.data.read_libsvm(url)``).  ``resume``: a
        snapshot taken during an earlier Lloyd fit of this model with the same
        parameters and data (``snapshot=url, snapshot_every=N``): the fit continues
        from the snapshot's iteration and ends with the same centres, labels,
        inertia and ``n_iter_`` (see :meth:`PSEstimator._resuming`).

        .. warning::
           A resumed fit's ``history_`` holds the iterations it ran itself (from
           the snapshot's clock on).  ``resume`` needs ``algorithm='lloyd'`` and
           one run (``n_init=1`` or an ``init`` array).
        """
        check_params(self)
        if resume is not None:
            self._check_resumable()
        client = self._client()
        distributed = is_dask(X) or hasattr(X, "to_dask_array") or isinstance(X, Dataset)
        data = as_unlabelled(X, client, self._n_tasks(client), dense=True)
        try:
            with self._resuming(resume):
                return self._fit_dataset(client, data, distributed)
        finally:
            data.release()

    def _check_resumable(self) -> None:
        if self._algorithm() != "lloyd":
            raise InvalidArgumentError(
                f"resume: expected algorithm='lloyd' (a Lloyd fit's snapshot), got {self._algorithm()!r}"
            )
        if isinstance(self.init, str) and int(self.n_init) != 1:
            raise InvalidArgumentError(
                f"resume: expected n_init=1 (one run to continue), got n_init={self.n_init!r}"
            )

    def _seed(self) -> int:
        rs = self.random_state
        if isinstance(rs, np.random.RandomState):
            return int(rs.randint(0, 2**31 - 1))
        return int(np.random.default_rng().integers(0, 2**31) if rs is None else rs)

    def _fit_dataset(self, client: Any, data: Prepared, distributed: bool) -> KMeans:
        ds = data.ds
        d = int(ds.n_features)
        k = int(self.n_clusters)
        stats = data_stats(ds, d)  # NaN / inf refused here, before the PS changes
        if stats.n < k:
            raise InvalidArgumentError(
                f"n_clusters: expected at most n_samples={stats.n}, got n_clusters={k}"
            )
        if not isinstance(self.init, str):
            initial_centres(self.init, ds, stats, k, d, 0)  # shape check before anything
        self._forget()
        ps = self._context(client)
        tol = float(getattr(self, "tol", 0.0)) * stats.mean_variance
        seed = self._seed()
        best: Run | None = None
        n_init = 1 if not isinstance(self.init, str) else int(self.n_init)
        for r in range(n_init):
            if isinstance(self.init, str) and self.init == "k-means||":
                centres = kmeans_parallel(ds, stats, k, d, seed + 7919 * r)
            else:
                centres = initial_centres(self.init, ds, stats, k, d, seed + 7919 * r)
            if self._algorithm() == "minibatch":
                sync = as_sync(getattr(self, "sync", "bsp"))
                run = fit_minibatch(self, ps, ds, centres, bool(self.progress), sync, seed + r)
            else:
                run = fit_lloyd(self, ps, ds, tol, centres, bool(self.progress))
            if best is None or run.inertia < best.inertia:
                if best is not None:
                    with contextlib.suppress(Exception):
                        ps.drop(best.centers)
                best = run
            else:
                with contextlib.suppress(Exception):
                    ps.drop(run.centers)
        assert best is not None
        self._arrays = {"centers": best.centers}
        self._centers = None
        self.n_features_in_ = d
        self.inertia_ = best.inertia
        self.n_iter_ = best.n_iter
        self.t_ = best.n_iter
        self.labels_ = self._labels(best, distributed, ds)
        self._append_history(best.history, 0, getattr(best.result, "job", None))
        self.train_result_ = best.result
        self._pull()
        return self

    def _algorithm(self) -> str:
        return str(self.algorithm)

    def _labels(self, run: Run, distributed: bool, ds: Any) -> Any:
        """The run's per-partition labels in the input's row order (dask when the
        input was distributed)."""
        parts = run.labels
        if parts and not isinstance(parts[0], np.ndarray):  # futures, on the workers
            if distributed:
                return in_input_order(ds, parts, None, np.int32)
            parts = ds.client.gather(parts)
        labels = np.concatenate(parts) if parts else np.zeros(0, np.int32)
        labels = labels[input_order(ds)] if labels.size else labels
        if distributed:
            import dask.array as da

            return da.from_array(labels, chunks=tuple(len(x) for x in parts) or (0,))
        return labels

    # -- using the centres ----------------------------------------------------------------

    @property
    def cluster_centers_(self) -> np.ndarray:
        """``(n_clusters, n_features)`` centres."""
        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(self, "n_features_in_")
        C = self._pull()
        if C is None:
            raise InvalidStateError("KMeans: the centres are gone (closed context)")
        return C

    def predict(self, X: Any) -> Any:
        """Index of the nearest centre of each row (dask in, dask out)."""
        return map_input(self, X, self.cluster_centers_, "labels")

    def fit_predict(self, X: Any, y: Any = None) -> Any:
        return self.fit(X).labels_

    def transform(self, X: Any) -> Any:
        """Euclidean distances ``(n, n_clusters)`` to every centre."""
        return map_input(self, X, self.cluster_centers_, "transform")

    def fit_transform(self, X: Any, y: Any = None) -> Any:
        return self.fit(X).transform(X)

    def score(self, X: Any, y: Any = None) -> float:
        """Opposite of the inertia of ``X`` (sum of squared distances to the nearest centre)."""
        return -float(map_input(self, X, self.cluster_centers_, "dist").sum())

    def _after_load(self) -> None:
        self._pull()

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.requires_fit = True
        return tags
