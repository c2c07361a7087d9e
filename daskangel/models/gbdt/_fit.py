"""A GBDT fit from the driver: input, sketch, edges, PS arrays, the boosting job.

:func:`fit_gbdt` runs the steps in order:

1. the input becomes a persisted Dataset (``_core.as_dataset``, NaN allowed
   in ``X``);
2. every partition pushes its feature summaries to the sketch array and
   reports its labels (``_rows.sketch_partition``); bad labels stop here with
   an error naming ``y`` (NaN, fewer than two classes);
3. the servers merge the summaries into bin edges (``_psfs.MergeSketches``),
   which travel to the tasks in the :class:`~._plan.Plan`;
4. the histogram array (rows cut on feature edges), the trees and the
   metrics arrays are created (named with the fingerprints a resumed fit
   checks first, ``_resume``), and ``angel.train`` runs one
   :class:`~._task.BoostTask` per partition in one group.

Example
-------
>>> res = fit_gbdt(est, X, y)                                    # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import uuid
from dataclasses import dataclass
from typing import Any

import numpy as np

from ... import config
from ...errors import InvalidArgumentError
from ...psarray import RangePartitioner, RowBoundsPartitioner
from ...train import train
from .._core import as_dataset
from ._binning import BinSpec
from ._losses import LOSSES
from ._plan import Plan, col_bases, hist_bounds
from ._psfs import MergeSketches
from ._resume import METRICS, check_snapshot, fingerprints
from ._rows import sketch_partition
from ._task import BoostTask
from ._trees import NF

__all__ = ["Fitted", "fit_gbdt", "unstored_is_missing"]


def unstored_is_missing(X: Any) -> bool:
    """True for inputs whose unstored entries are missing values (sparse ones)."""
    import scipy.sparse as sp

    from ...data import Dataset

    if isinstance(X, Dataset) or sp.issparse(X):
        return True
    meta = getattr(X, "_meta", None)
    return meta is not None and (sp.issparse(meta) or type(meta).__module__.startswith("sparse"))


@dataclass(frozen=True, eq=False)
class Fitted:
    """What a fit leaves: the model's trees array and the facts the estimator keeps."""

    trees: str  # PS array name
    classes: Any  # label values (classifiers) or None
    K: int
    baseline: np.ndarray
    spec: BinSpec
    n_iter: int
    history: list[dict[str, float]]
    levels: list[dict[str, Any]]
    unstored_missing: bool
    n_features: int
    result: Any  # the TrainResult
    max_nodes: int


def _check_y_local(y: Any) -> None:
    if y is None or hasattr(y, "dask") or hasattr(y, "to_dask_array"):
        return
    a = np.asarray(y)
    if a.dtype.kind == "f" and np.isnan(a).any():
        raise InvalidArgumentError(
            f"y: expected labels without NaN, got NaN at rows {np.flatnonzero(np.isnan(a))[:5].tolist()}"
        )


def _labels(est: Any, facts: list[dict[str, Any]], data: Any) -> tuple[Any, int, tuple[float, ...]]:
    """``(classes, K, baseline)`` from the partitions' label facts."""
    nan = sum(f["nan"] for f in facts)
    if nan:
        raise InvalidArgumentError(f"y: expected labels without NaN, got {nan} NaN labels")
    n_train = sum(f["train"] for f in facts)
    if n_train == 0:
        raise InvalidArgumentError("X: no training rows (an empty input)")
    if est._task == "regressor":
        if est.loss == "squared_error":
            return None, 1, (sum(f["sum"] for f in facts) / n_train,)
        v = np.concatenate([f["summary"][0] for f in facts])
        w = np.concatenate([f["summary"][1] for f in facts])
        o = np.argsort(v, kind="stable")
        cw = np.cumsum(w[o])
        return None, 1, (float(v[o][np.searchsorted(cw, 0.5 * cw[-1])]),)
    counts: dict[float, int] = {}
    for f in facts:
        for c, n in zip(*f["classes"], strict=True):
            counts[float(c)] = counts.get(float(c), 0) + int(n)
    if data.encoded:
        classes = np.asarray(data.classes)
    else:
        classes = np.asarray(sorted(counts))
    if len(classes) < 2:
        raise InvalidArgumentError(
            f"y: {type(est).__name__} needs samples of at least 2 classes, got {len(classes)} "
            f"class ({classes.tolist()})"
        )
    idx = range(len(classes)) if data.encoded else classes.tolist()
    n = np.asarray([counts.get(float(i), 0) for i in idx], np.float64)
    prior = np.clip(n / n.sum(), 1e-12, 1.0)
    if len(classes) == 2:
        return classes, 1, (float(np.log(prior[1] / prior[0])),)
    return classes, len(classes), tuple(float(x) for x in np.log(prior))


def fit_gbdt(est: Any, X: Any, y: Any, resume: str | None = None) -> Fitted:
    """Fit ``est`` (a checked GBDT estimator) on ``X, y``; see the module docstring.

    ``resume``: the snapshot the fit continues from, checked here against the
    estimator's class, parameters and data before any array is made (the
    training job itself loads it: the caller wraps this in ``est._resuming``).
    """
    _check_y_local(y)
    client = est._client()
    n_tasks = est._n_tasks(client)
    classifier = est._task == "classifier"
    data = as_dataset(
        est, X, y, client, n_tasks, classifier=classifier, classes=None, allow_nan=True
    )
    try:
        return _fit(est, client, data, unstored_is_missing(X), resume)
    finally:
        data.release()


def _fit(est: Any, client: Any, data: Any, unstored_missing: bool, resume: str | None) -> Fitted:
    ds = data.ds
    F = int(ds.n_features)
    parts = len(ds.partitions)
    ps = est._context(client)
    cls = type(est).__name__.lower()
    name = f"{cls}-{uuid.uuid4().hex[:8]}"
    seed = int(est._seed)
    early = est._early(int(ds.n_rows))
    fraction = float(est.validation_fraction) if early and est.validation_fraction else 0.0
    points = int(config.get("daskangel.gbdt.sketch-points"))
    sketch = ps.zeros(
        f"{name}.sketch", (max(F, 1), parts * 2 * points), "float64", sparse=True,
        partitioner=RangePartitioner(),
    )  # fmt: skip
    hist = None
    try:
        args = (sketch.name, points, fraction, seed, not unstored_missing)
        futs = ds.map_partitions(sketch_partition, *args, classifier=est._task == "classifier")
        facts = client.gather(futs)
        classes, K, baseline = _labels(est, facts, data)
        n_bins, cut_ptr, cuts = sketch.psf(MergeSketches(int(est.max_bins)))
    finally:
        with contextlib.suppress(Exception):
            ps.drop(sketch.name)
    spec = BinSpec.build(n_bins[:F], cut_ptr[: F + 1], cuts)
    depth = int(est.max_depth)
    mln = int(est.max_leaf_nodes or 0)
    leaves = 2**depth if mln <= 0 else min(2**depth, mln)
    bases = col_bases(depth, K, mln)
    B = max(spec.n_total, 1)
    need = B * bases[-1] * 8
    limit = config.get_bytes("daskangel.gbdt.max-histogram-bytes")
    if need > limit:
        raise InvalidArgumentError(
            f"max_depth: histograms of {B:,} bins x {bases[-1] // 3:,} node slots would take "
            f"{need:,} bytes, over daskangel.gbdt.max-histogram-bytes = {limit:,}; lower "
            "max_depth, max_bins or max_leaf_nodes"
        )
    per = int(config.get("daskangel.partition.blocks-per-server"))
    bounds = hist_bounds(spec.offsets, max(1, len(ps.servers) * per))
    loss = _loss_id(est, K)
    plan_kw = dict(
        spec=spec, K=K, loss=loss, delta=float(getattr(est, "huber_delta", 1.0)),
        n_estimators=int(est.n_estimators), learning_rate=float(est.learning_rate),
        max_depth=depth, max_leaf_nodes=mln, min_child_weight=float(est.min_child_weight),
        min_samples_leaf=int(est.min_samples_leaf), reg_lambda=float(est.reg_lambda),
        subsample=float(est.subsample), colsample=float(est.colsample_bytree), seed=seed,
        val_fraction=fraction, patience=int(est.n_iter_no_change) if early else 0,
        tol=float(est.tol), zero_is_value=not unstored_missing,
        dense_fraction=float(config.get("daskangel.gbdt.dense-fraction")),
        baseline=baseline, col_base=bases, max_nodes=2 * leaves - 1,
        nbins=int(config.get("daskangel.models.auc-bins")), n_tasks=parts,
        renew_points=int(config.get("daskangel.gbdt.renew-points")),
        classes=None if data.encoded or classes is None else tuple(float(c) for c in classes),
    )  # fmt: skip
    fp_params, fp_data = fingerprints(plan_kw)
    if resume is not None:
        check_snapshot(resume, cls, fp_params, fp_data)
    name = f"{name}-{fp_params}{fp_data}"  # what a resumed fit checks (_resume)
    n_est = int(est.n_estimators)
    hist = ps.zeros(
        f"{name}.hist", (B, bases[-1]), "float64", partitioner=RowBoundsPartitioner(bounds)
    )
    trees = ps.zeros(f"{name}.trees", (n_est * K, (2 * leaves - 1) * NF), "float64")
    metrics = ps.zeros(f"{name}.metrics", (n_est, 2 * len(METRICS)), "float64")
    plan = Plan(hist=hist.name, trees=trees.name, metrics=metrics.name, **plan_kw)  # type: ignore[arg-type]
    try:
        res = train(
            ps, BoostTask(plan), ds, groups=1, group_size=parts, epochs=plan.n_estimators,
            progress=est.progress, unit="tree" if K == 1 else f"round ({K} trees)",
        )  # fmt: skip
    except BaseException:
        with contextlib.suppress(Exception):
            ps.drop(trees.name)
        raise
    finally:
        for n in (hist.name, metrics.name):
            with contextlib.suppress(Exception):
                ps.drop(n)
    lead = next(r for r in res.results if "history" in r)
    return Fitted(
        trees=trees.name, classes=classes, K=K, baseline=np.asarray(baseline), spec=spec,
        n_iter=int(lead["trees"]), history=lead["history"], levels=lead["levels"],
        unstored_missing=unstored_missing, n_features=F, result=res, max_nodes=2 * leaves - 1,
    )  # fmt: skip


def _loss_id(est: Any, K: int) -> int:
    if est._task == "classifier":
        return LOSSES["binary"] if K == 1 else LOSSES["softmax"]
    return LOSSES[str(est.loss)]
