"""GBDT on the PS (issue 18) side by side with LightGBM, XGBoost and scikit-learn.

Run::

    python benchmarks/bench_gbdt.py                          # a9a, census, agaricus, dna
    python benchmarks/bench_gbdt.py --datasets higgs --rows 10000000 --trees 20
    python benchmarks/bench_gbdt.py --datasets sparse --rows 1000000 --trees 10
    python benchmarks/bench_gbdt.py --smoke                  # tiny, < 25 s, no data needed

Every library grows ``--trees`` trees (100) of depth ``--depth`` (6) at learning
rate 0.1 on the same rows, at most 255 bins a feature, no early stopping:

* **daskangel** ``GBDTClassifier`` on a 2-worker LocalCluster (processes, one
  thread each: two training tasks), ``min_samples_leaf=20``,
  ``min_child_weight=1e-3``, ``reg_lambda=0``;
* **lightgbm** ``lgb.train`` (2 threads), ``num_leaves=2**depth``,
  ``min_data_in_leaf=20``, ``min_sum_hessian_in_leaf=1e-3``, ``lambda_l2=0``
  (``LGBMClassifier``'s parameters through the native API, so its ``Dataset``
  is built and timed before the boosting);
* **xgboost** ``xgb.train(tree_method="hist")`` (2 threads) on a
  ``QuantileDMatrix``, its defaults otherwise (``min_child_weight=1``,
  ``reg_lambda=1``);
* **sklearn** ``HistGradientBoostingClassifier`` (its threads), ``max_leaf_nodes=None``,
  ``min_samples_leaf=20``, ``l2_regularization=0``;
* **lightgbm.dask** / **xgboost.dask** (``DaskLGBMClassifier``,
  ``xgboost.dask.DaskXGBClassifier``) on the same cluster as daskangel, with
  the same parameters as their single-process forms, one thread a worker;
* **sklearn LR** (binary real sets): ``LogisticRegression(liblinear)``, the
  linear reference the trees must beat on training AUC.

On sets with more than ``--lgb-max-features`` columns (20,000) the LightGBM
rows are skipped with a note: on the sparse 1 M x 100 k set LightGBM 4.7's
booster set-up (after its ``Dataset`` was built) had not ended after 17
minutes, and took 26-43 s at 20,000 rows (benchmarks/RESULTS.md); XGBoost is
the peer there.

Inputs: the real sets (``_gbdtdata.load_real``) go to every library as the
same scipy CSR matrices (daskangel: unstored entries are missing values, with a
learnt default direction; the others treat them as zeros; on these 0/1 sets
the two are the same split) and to the Dask peers as dense Dask arrays; the
synthetic sets are made chunk by chunk on the driver for the single-process
peers and as Dask blocks on the workers for daskangel and the Dask peers.

Figures: test accuracy, AUC (binary), log-loss, training AUC; fit wall
seconds per tree (the fit includes spreading the rows to the workers,
sketching, binning; LightGBM's and XGBoost's include building their
Dataset / DMatrix); ``med tree s``: the median wall time of one boosting round
(daskangel: the lead task's rounds, ``round_seconds``; LightGBM / XGBoost: a
callback after every iteration; the others: fit / trees) and its ratio to
LightGBM's; for daskangel the lead task's seconds per tree by phase; peak RSS of each process that ran the fit (the driver for
single-process peers, each worker for the Dask ones), sampled every 50 ms; for
daskangel also its bytes per tree level: pushed to the PS, moved by the split
psf, against pulling the level's histograms (``pull``: the summed histogram of
every built node) and against every task sending its histogram of every open
node to one client (``whole``), with the servers' own counters
(``ps.status``) as a check.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _data import data_root, have
from _gbdtdata import Problem, dask_synthetic, load_real, numpy_synthetic

REAL = ("a9a", "census", "agaricus", "dna")
PEERS = ("daskangel", "lightgbm", "xgboost", "sklearn", "lightgbm.dask", "xgboost.dask")
# --smoke: the single-process peers (the Dask peers start slowly)
SMOKE_PEERS = "daskangel,lightgbm,xgboost,sklearn"


# -- memory ----------------------------------------------------------------------------------


class PeakRSS:
    """Peak resident memory of some processes, sampled in a thread while ``with`` runs."""

    def __init__(self, pids: list[int], every: float = 0.05) -> None:
        import psutil

        self.procs = [psutil.Process(p) for p in pids]
        self.peak = [0] * len(pids)
        self.every = every
        self._stop = threading.Event()

    def _sample(self) -> None:
        for i, p in enumerate(self.procs):
            with contextlib.suppress(Exception):
                self.peak[i] = max(self.peak[i], int(p.memory_info().rss))

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self._sample()

    def __enter__(self) -> PeakRSS:
        self._sample()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._t.join()
        self._sample()


def _worker_pids(client: Any) -> list[int]:
    return list(client.run(os.getpid).values())


# -- scoring ---------------------------------------------------------------------------------


def _score(p: Problem, proba_te: np.ndarray, proba_tr: np.ndarray | None) -> dict[str, float]:
    from sklearn.metrics import accuracy_score, log_loss, roc_auc_score

    proba_te = np.asarray(proba_te, np.float64)
    if proba_te.ndim == 1:
        proba_te = np.stack([1 - proba_te, proba_te], axis=1)
    out = {
        "acc": 100.0 * accuracy_score(p.yte, proba_te.argmax(axis=1)),
        "logloss": log_loss(p.yte, np.clip(proba_te, 1e-15, 1), labels=np.arange(p.n_classes)),
    }
    if p.n_classes == 2:
        out["auc"] = roc_auc_score(p.yte, proba_te[:, 1])
        if proba_tr is not None:
            tr = np.asarray(proba_tr, np.float64)
            out["train_auc"] = roc_auc_score(p.ytr, tr[:, 1] if tr.ndim == 2 else tr)
    return out


# -- the libraries ---------------------------------------------------------------------------


def _lgb_params(a: Any, threads: int) -> dict[str, Any]:
    return dict(
        n_estimators=a.trees, learning_rate=0.1, max_depth=a.depth, num_leaves=2**a.depth,
        min_child_samples=20, min_child_weight=1e-3, reg_lambda=0.0, max_bin=255,
        n_jobs=threads, verbose=-1, random_state=0,
    )  # fmt: skip


def _xgb_params(a: Any, threads: int) -> dict[str, Any]:
    return dict(
        n_estimators=a.trees, learning_rate=0.1, max_depth=a.depth, tree_method="hist",
        max_bin=256, n_jobs=threads, random_state=0,
    )  # fmt: skip


class Run:
    """One library's fit on one problem: the figures of a table row."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.seconds = float("nan")
        self.peak: list[int] = []
        self.scores: dict[str, float] = {}
        self.note = ""
        self.extra: dict[str, Any] = {}


def fit_daskangel(p: Problem, a: Any, client: Any) -> Run:
    from daskangel.models import GBDTClassifier

    r = Run("daskangel")
    X = p.Xtr_dask if p.Xtr_dask is not None else p.Xtr
    y = p.ytr_dask if p.ytr_dask is not None else p.ytr
    est = GBDTClassifier(
        n_estimators=a.trees, learning_rate=0.1, max_depth=a.depth, max_bins=255,
        min_samples_leaf=20, min_child_weight=1e-3, reg_lambda=0.0, early_stopping=False,
        random_state=0, client=client,
    )  # fmt: skip
    ps = est._context(client)
    before = _server_bytes(ps)
    with PeakRSS(_worker_pids(client)) as m:
        t = time.perf_counter()
        est.fit(X, y)
        r.seconds = time.perf_counter() - t
    r.peak = m.peak
    r.extra["servers"] = _server_bytes(ps) - before
    r.extra["levels"] = est.level_stats_
    lead = next(x for x in est.train_result_.results if "history" in x)
    tm = lead["timings"]
    r.extra["boost"] = sum(v for k, v in tm.items() if k != "prep")
    r.extra["prep"] = tm["prep"]
    r.extra["per_tree"] = np.asarray(lead["round_seconds"])
    r.extra["timings"] = tm
    tr = est.predict_proba(p.Xtr)[:, 1] if p.n_classes == 2 and p.shape[0] <= 2_000_000 else None
    r.scores = _score(p, est.predict_proba(p.Xte), tr)
    est.close()
    return r


def _server_bytes(ps: Any) -> int:
    rows = ps.status(max_age=0)
    rows = rows.to_dict("records") if hasattr(rows, "to_dict") else rows
    return int(sum(int(r.get("bytes_in", 0)) + int(r.get("bytes_out", 0)) for r in rows
                   if r.get("kind", "server") == "server"))  # fmt: skip


def _local(
    name: str, make: Callable[[], Any], p: Problem, fit_kw: dict[str, Any] | None = None
) -> Run:
    r = Run(name)
    est = make()
    with PeakRSS([os.getpid()]) as m:
        t = time.perf_counter()
        est.fit(p.Xtr, p.ytr, **(fit_kw or {}))
        r.seconds = time.perf_counter() - t
    r.peak = m.peak
    tr = est.predict_proba(p.Xtr) if p.n_classes == 2 and p.shape[0] <= 2_000_000 else None
    r.scores = _score(p, est.predict_proba(p.Xte), tr)
    return r


def _proba(raw: Any, n_classes: int) -> np.ndarray:
    raw = np.asarray(raw, np.float64)
    return np.stack([1 - raw, raw], axis=1) if n_classes == 2 and raw.ndim == 1 else raw


def _native(
    name: str, build: Callable[[], Any], boost: Callable[[Any, Callable[[], None]], Any]
) -> tuple[Run, Any]:
    """Time a native API's fit: ``build()`` its data set, then ``boost(data, tick)``
    (``tick()`` after every round: ``per_tree``); the data set is dropped after."""
    r = Run(name)
    ticks: list[float] = []
    with PeakRSS([os.getpid()]) as m:
        t = time.perf_counter()
        data = build()
        t1 = time.perf_counter()
        ticks.append(t1)
        model = boost(data, lambda: ticks.append(time.perf_counter()))
        r.seconds = time.perf_counter() - t
        r.extra["boost"] = time.perf_counter() - t1
        del data
    r.extra["per_tree"] = np.diff(ticks)
    r.peak = m.peak
    return r, model


def _lgb_too_wide(p: Problem, a: Any, name: str) -> Run | None:
    """A skipped row when LightGBM would set up a booster over more than
    ``--lgb-max-features`` columns (see the module docstring)."""
    if p.shape[1] <= a.lgb_max_features:
        return None
    r = Run(name)
    r.note = (f"skipped: {p.shape[1]:,} features > --lgb-max-features {a.lgb_max_features:,} "
              "(its booster set-up on the sparse 100 k-feature set did not end in 17 min)")  # fmt: skip
    return r


def fit_lightgbm(p: Problem, a: Any, client: Any) -> Run:
    """LightGBM's native API: its Dataset (bins) timed apart from the boosting."""
    import lightgbm as lgb

    if (skip := _lgb_too_wide(p, a, "lightgbm")) is not None:
        return skip

    kw = _lgb_params(a, 2)
    params = {
        "objective": "binary" if p.n_classes == 2 else "multiclass",
        "learning_rate": kw["learning_rate"], "max_depth": kw["max_depth"],
        "num_leaves": kw["num_leaves"], "min_data_in_leaf": kw["min_child_samples"],
        "min_sum_hessian_in_leaf": kw["min_child_weight"], "lambda_l2": kw["reg_lambda"],
        "max_bin": kw["max_bin"], "num_threads": kw["n_jobs"], "verbose": -1, "seed": 0,
    }  # fmt: skip
    if p.n_classes > 2:
        params["num_class"] = p.n_classes

    def build() -> Any:
        ds = lgb.Dataset(p.Xtr, p.ytr, params={"max_bin": kw["max_bin"], "verbose": -1})
        return ds.construct()

    def boost(ds: Any, tick: Callable[[], None]) -> Any:
        return lgb.train(params, ds, num_boost_round=a.trees, callbacks=[lambda env: tick()])

    r, booster = _native("lightgbm", build, boost)
    big = p.shape[0] > 2_000_000
    tr = None if p.n_classes != 2 or big else _proba(booster.predict(p.Xtr), 2)
    r.scores = _score(p, _proba(booster.predict(p.Xte), p.n_classes), tr)
    return r


def fit_xgboost(p: Problem, a: Any, client: Any) -> Run:
    """XGBoost's native API (``hist``): its QuantileDMatrix timed apart from the boosting."""
    import xgboost as xgb

    kw = _xgb_params(a, 2)
    params: dict[str, Any] = {
        "objective": "binary:logistic" if p.n_classes == 2 else "multi:softprob",
        "eta": kw["learning_rate"], "max_depth": kw["max_depth"], "tree_method": "hist",
        "max_bin": kw["max_bin"], "nthread": kw["n_jobs"], "seed": 0,
    }  # fmt: skip
    if p.n_classes > 2:
        params["num_class"] = p.n_classes

    def build() -> Any:
        return xgb.QuantileDMatrix(p.Xtr, p.ytr, max_bin=kw["max_bin"], nthread=kw["n_jobs"])

    def boost(dm: Any, tick: Callable[[], None]) -> Any:
        class Tick(xgb.callback.TrainingCallback):
            def after_iteration(self, model: Any, epoch: int, evals_log: Any) -> bool:
                tick()
                return False

        return xgb.train(params, dm, num_boost_round=a.trees, callbacks=[Tick()])

    r, booster = _native("xgboost", build, boost)
    big = p.shape[0] > 2_000_000
    tr = None if p.n_classes != 2 or big else _proba(booster.predict(xgb.DMatrix(p.Xtr)), 2)
    r.scores = _score(p, _proba(booster.predict(xgb.DMatrix(p.Xte)), p.n_classes), tr)
    return r


def fit_sklearn(p: Problem, a: Any, client: Any) -> Run:
    import scipy.sparse as sp
    from sklearn.ensemble import HistGradientBoostingClassifier

    if sp.issparse(p.Xtr) and p.Xtr.shape[1] > 5000:
        r = Run("sklearn")
        r.note = "no sparse input (would need a dense copy)"
        return r
    q = p
    if sp.issparse(p.Xtr):
        q = Problem(p.name, p.Xtr.toarray(), p.ytr, p.Xte.toarray(), p.yte, p.n_classes)
    est = lambda: HistGradientBoostingClassifier(  # noqa: E731
        max_iter=a.trees, learning_rate=0.1, max_depth=a.depth, max_leaf_nodes=None,
        min_samples_leaf=20, l2_regularization=0.0, max_bins=255, early_stopping=False,
        random_state=0,
    )  # fmt: skip
    return _local("sklearn", est, q)


def _dask_xy(p: Problem, client: Any) -> tuple[Any, Any]:
    import dask.array as da
    import scipy.sparse as sp

    if p.Xtr_dask is not None:
        return p.Xtr_dask, p.ytr_dask
    X = p.Xtr.toarray() if sp.issparse(p.Xtr) else p.Xtr
    n = X.shape[0]
    ch = -(-n // 2)
    Xd = client.persist(da.from_array(X, chunks=(ch, X.shape[1])))
    yd = client.persist(da.from_array(p.ytr, chunks=ch))
    return Xd, yd


def _dask_run(name: str, make: Callable[[], Any], p: Problem, client: Any) -> Run:
    r = Run(name)
    X, y = _dask_xy(p, client)
    est = make()
    with PeakRSS(_worker_pids(client)) as m:
        t = time.perf_counter()
        est.fit(X, y)
        r.seconds = time.perf_counter() - t
    r.peak = m.peak
    local = est.to_local() if hasattr(est, "to_local") else est.get_booster()
    if p.Xtr_dask is None:  # fitted on dense blocks: XGBoost reads a CSR's gaps as missing
        import scipy.sparse as sp

        dense = lambda X: X.toarray() if sp.issparse(X) else X  # noqa: E731
        p = Problem(p.name, dense(p.Xtr), p.ytr, dense(p.Xte), p.yte, p.n_classes)
    if hasattr(local, "predict_proba"):
        pte = local.predict_proba(p.Xte)
        ptr = local.predict_proba(p.Xtr) if p.n_classes == 2 and p.shape[0] <= 2_000_000 else None
    else:  # an xgboost Booster
        import xgboost as xgb

        pte = local.predict(xgb.DMatrix(p.Xte))
        ptr = (
            local.predict(xgb.DMatrix(p.Xtr))
            if p.n_classes == 2 and p.shape[0] <= 2_000_000
            else None
        )
    r.scores = _score(p, pte, ptr)
    return r


def fit_lightgbm_dask(p: Problem, a: Any, client: Any) -> Run:
    import lightgbm as lgb

    if (skip := _lgb_too_wide(p, a, "lightgbm.dask")) is not None:
        return skip
    kw = _lgb_params(a, 1)
    return _dask_run(
        "lightgbm.dask", lambda: lgb.DaskLGBMClassifier(client=client, **kw), p, client
    )


def fit_xgboost_dask(p: Problem, a: Any, client: Any) -> Run:
    from xgboost import dask as dxgb

    kw = _xgb_params(a, 1)

    def make() -> Any:
        e = dxgb.DaskXGBClassifier(**kw)
        e.client = client
        return e

    return _dask_run("xgboost.dask", make, p, client)


FITS: dict[str, Callable[[Problem, Any, Any], Run]] = {
    "daskangel": fit_daskangel,
    "lightgbm": fit_lightgbm,
    "xgboost": fit_xgboost,
    "sklearn": fit_sklearn,
    "lightgbm.dask": fit_lightgbm_dask,
    "xgboost.dask": fit_xgboost_dask,
}


def linear_reference(p: Problem) -> Run | None:
    if p.n_classes != 2 or p.Xtr_dask is not None:  # the real sets only
        return None
    from sklearn.linear_model import LogisticRegression

    return _local("sklearn LR", lambda: LogisticRegression(solver="liblinear", C=1.0), p)


# -- printing --------------------------------------------------------------------------------


def _gib(v: list[int]) -> str:
    return "/".join(f"{x / 2**30:.2f}" for x in v) if v else "-"


def _med(r: Run) -> float:
    v = r.extra.get("per_tree")
    return float(np.median(v)) if v is not None and len(v) else float("nan")


def table(p: Problem, runs: list[Run], trees: int) -> None:
    """One row per library: quality, fit seconds per tree (input handling included),
    the median seconds of one boosting round (LightGBM, XGBoost, daskangel: per-tree
    wall times; the others: fit / trees) and its ratio to LightGBM's."""
    lgb = next((r for r in runs if r.name == "lightgbm" and r.scores), None)
    print(f"\n{p.name}: train {p.shape[0]:,} x {p.shape[1]:,}, test {p.Xte.shape[0]:,}, "
          f"{p.n_classes} classes, {trees} trees")  # fmt: skip
    head = (f"{'library':<14} | {'acc %':>6} | {'AUC':>6} | {'logloss':>7} | {'train AUC':>9} | "
            f"{'fit s':>7} | {'s/tree':>7} | {'vs lgb':>6} | {'med tree s':>10} | {'vs lgb':>6} | "
            f"{'peak RSS GiB':>12}")  # fmt: skip
    print(head)
    print("-" * len(head))
    lmed = _med(lgb) if lgb is not None else float("nan")
    for r in runs:
        if not r.scores:
            print(f"{r.name:<14} | {r.note}")
            continue
        s = r.scores
        lr = r.name == "sklearn LR"
        per = r.seconds / trees if not lr else r.seconds
        ratio = f"{r.seconds / lgb.seconds:.2f}x" if lgb and not lr else "-"
        med = _med(r) if "per_tree" in r.extra else per
        mratio = f"{med / lmed:.2f}x" if lgb and not lr else "-"
        auc = f"{s['auc']:.4f}" if "auc" in s else "-"
        tauc = f"{s['train_auc']:.4f}" if "train_auc" in s else "-"
        print(f"{r.name:<14} | {s['acc']:6.2f} | {auc:>6} | {s['logloss']:7.4f} | {tauc:>9} | "
              f"{r.seconds:7.2f} | {per:7.3f} | {ratio:>6} | {med:10.4f} | {mratio:>6} | "
              f"{_gib(r.peak):>12}")  # fmt: skip
    dk = next((r for r in runs if r.name == "daskangel" and r.scores), None)
    if dk is not None:
        tm = dk.extra["timings"]
        parts = ", ".join(f"{k} {v / trees:.3f}" for k, v in tm.items() if k != "prep")
        print(f"daskangel: fit {dk.seconds:.1f} s = prep (bins) {dk.extra['prep']:.1f} s + "
              f"boosting {dk.extra['boost']:.1f} s ({dk.extra['boost'] / trees:.3f} s/tree) + "
              "input, sketch and edges")  # fmt: skip
        print(f"daskangel s/tree in the lead task: {parts}")
        if lgb is not None:
            d = dk.scores
            line = f"against lightgbm: accuracy {d['acc'] - lgb.scores['acc']:+.2f} points"
            if "auc" in d:
                line += f", AUC {d['auc'] - lgb.scores['auc']:+.4f}"
            print(line)
        xg = next((r for r in runs if r.name == "xgboost" and r.scores), None)
        if xg is not None:
            print(f"against xgboost: median tree {_med(dk) / _med(xg):.2f}x "
                  f"({_med(dk):.3f} s vs {_med(xg):.3f} s), whole fit {dk.seconds / xg.seconds:.2f}x, "
                  f"AUC {dk.scores.get('auc', float('nan')) - xg.scores.get('auc', float('nan')):+.4f}")  # fmt: skip
        traffic(dk, p)


def traffic(r: Run, p: Problem) -> None:
    lv = r.extra["levels"]
    if lv is None or not len(lv):
        return
    import pandas as pd

    lv = pd.DataFrame(lv)
    two = lv["pushed"] + lv["psf_sent"] + lv["psf_received"]
    per = lv.groupby("level").agg(
        open=("open", "median"), pushed=("pushed", "median"), psf_sent=("psf_sent", "median"),
        psf_received=("psf_received", "median"), whole=("whole", "median"),
    )  # fmt: skip
    print("bytes per level (median over trees): level | open nodes | pushed to PS | psf out | "
          "psf back | two-phase total | whole histograms to a client | ratio")  # fmt: skip
    for lvl, row in per.iterrows():
        tot = row.pushed + row.psf_sent + row.psf_received
        print(f"  {int(lvl)} | {int(row.open)} | {row.pushed:,.0f} | {row.psf_sent:,.0f} | "
              f"{row.psf_received:,.0f} | {tot:,.0f} | {row.whole:,.0f} | "
              f"{tot / max(row.whole, 1):.3f}")  # fmt: skip
    print(
        f"  all levels: two-phase {two.sum():,.0f} B, whole {lv['whole'].sum():,.0f} B "
        f"({two.sum() / max(lv['whole'].sum(), 1):.3f}); servers counted "
        f"{r.extra['servers']:,} B in + out over the whole fit (histograms, sketch, trees)"
    )


# -- main ------------------------------------------------------------------------------------


@contextlib.contextmanager
def cluster(smoke: bool) -> Iterator[Any]:
    from distributed import Client, LocalCluster

    with LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
        worker_dashboard_address=None, memory_limit=None,
    ) as lc, Client(lc) as c:  # fmt: skip
        yield c


def problems(a: Any, client: Any) -> Iterator[Problem]:
    root = Path(a.data)
    for name in a.datasets.split(","):
        name = name.strip()
        if name in REAL:
            p = load_real(name, root, have)
            if p is not None and a.real_rows:  # a slice (--smoke): the first rows of each side
                n = a.real_rows
                p = Problem(p.name, p.Xtr[:n], p.ytr[:n], p.Xte[:n], p.yte[:n], p.n_classes)
            if p is not None:
                yield p
            continue
        kw: dict[str, Any] = {}
        if name == "sparse":
            kw = {"n_features": a.sparse_features, "nnz": a.sparse_nnz}
        elif name != "higgs":
            raise SystemExit(f"--datasets: unknown set {name!r}")
        t = time.perf_counter()
        Xtr, ytr = numpy_synthetic(name, 1, a.rows, a.chunk, **kw)
        Xte, yte = numpy_synthetic(name, 2, a.test_rows, a.chunk, **kw)
        Xd, yd = dask_synthetic(name, 1, a.rows, a.chunk, **kw)
        Xd, yd = client.persist([Xd, yd])
        from distributed import wait

        wait([Xd, yd])
        print(f"\n{name}: generated {a.rows:,} + {a.test_rows:,} rows in "
              f"{time.perf_counter() - t:.1f} s (driver copy and worker blocks)")  # fmt: skip
        yield Problem(name, Xtr, ytr, Xte, yte, 2, Xd, yd)


def main() -> None:
    import logging

    logging.getLogger("distributed").setLevel(logging.ERROR)
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--datasets", default=",".join(REAL))
    ap.add_argument("--peers", default=",".join(PEERS))
    ap.add_argument("--data", default=str(data_root()))
    ap.add_argument("--trees", type=int, default=100)
    ap.add_argument("--depth", type=int, default=6)
    ap.add_argument("--rows", type=int, default=10_000_000, help="synthetic training rows")
    ap.add_argument("--test-rows", type=int, default=200_000)
    ap.add_argument("--chunk", type=int, default=250_000, help="rows per generated chunk")
    ap.add_argument("--sparse-features", type=int, default=100_000)
    ap.add_argument("--sparse-nnz", type=int, default=50)
    ap.add_argument(
        "--lgb-max-features",
        type=int,
        default=20_000,
        help="skip LightGBM on sets with more features (its booster set-up)",
    )
    ap.add_argument("--real-rows", type=int, default=0, help="only the first rows of a real set")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, a run check (< 25 s)")
    a = ap.parse_args()
    if a.smoke:
        # tests/test_benchmarks.py runs --smoke with and without the data sets: with
        # agaricus there, a slice of it (sparse bins) is the whole run; without it, the
        # tiny synthetic sets (dense and sparse bins) run instead, so nothing runs twice
        agaricus = Path(a.data) / "angel-sample" / "agaricus" / "agaricus_127d_train.libsvm"
        a.datasets = "agaricus" if agaricus.exists() else "agaricus,higgs,sparse"
        a.trees, a.depth, a.rows, a.test_rows, a.chunk = 2, 2, 1000, 300, 500
        a.sparse_features, a.sparse_nnz, a.real_rows = 500, 10, 600
        a.peers = SMOKE_PEERS
    warnings.filterwarnings("ignore")
    peers = [x.strip() for x in a.peers.split(",") if x.strip()]
    for x in peers:
        if x not in FITS:
            raise SystemExit(f"--peers: unknown peer {x!r} (known: {', '.join(FITS)})")
    print(f"bench_gbdt: {a.trees} trees, depth {a.depth}, learning rate 0.1; "
          f"load {os.getloadavg()[0]:.2f}")  # fmt: skip
    with cluster(a.smoke) as client:
        for p in problems(a, client):
            runs: list[Run] = []
            for name in peers:
                try:
                    __import__(name.split(".")[0])
                except ImportError:
                    r = Run(name)
                    r.note = "not installed (pip install -e '.[bench]')"
                    runs.append(r)
                    continue
                if name == "daskangel":
                    runs.append(FITS[name](p, a, client))
                    continue
                try:
                    runs.append(FITS[name](p, a, client))
                except Exception as e:  # noqa: BLE001 -- a peer's failure is a table row
                    r = Run(name)
                    r.note = f"failed: {type(e).__name__}: {str(e).splitlines()[0][:120]}"
                    runs.append(r)
            lr = linear_reference(p)
            if lr is not None:
                runs.append(lr)
            table(p, runs, a.trees)
    print(f"\nload at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
