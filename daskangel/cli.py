"""``daskangel train`` / ``daskangel predict``: linear models from the shell, like angel-submit.

::

    daskangel train --model lr --data a9a --format libsvm --epochs 10 --lr 0.1 \\
        --solver ma-sgd --workers 2 --ps 2 --groups 2 --sync ssp:2 --save /tmp/lr
    daskangel predict --model-path /tmp/lr --data a9a.t --out /tmp/pred.txt

``--scheduler tcp://host:8786`` uses an existing cluster; otherwise a
``LocalCluster`` of ``--workers`` processes is started (and stopped at the end).
``--ps N`` puts the PS servers on the first ``N`` workers, ``--groups G``
trains with ``G`` data-parallel tasks.  Training shows a progress bar and the
dashboard link and ends with a table of the final metrics.  Bad arguments exit
with status 2 and a message naming the argument, before any cluster starts.

Example
-------
>>> main(["train", "--model", "nope", "--data", "x"])               # doctest: +SKIP
daskangel train: error: argument --model: invalid choice: 'nope' ...
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from ._compat import training_workers, workers_info

__all__ = ["MODELS", "main"]

MODELS = {
    "lr": "LogisticRegression",
    "softmax": "SoftmaxRegression",
    "svm": "LinearSVC",
    "linear": "LinearRegression",
    "ridge": "Ridge",
    "huber": "HuberRegressor",
    "lasso": "Lasso",
}
FORMATS = ("libsvm", "dummy", "dense")


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="daskangel", description="Angel-style linear models on Dask")
    sub = ap.add_subparsers(dest="command", required=True)
    tr = sub.add_parser("train", help="train a model on a data file and save it")
    tr.add_argument("--model", required=True, choices=sorted(MODELS), help="model to train")
    tr.add_argument("--data", required=True, help="training data: path, glob or fsspec URL")
    tr.add_argument("--format", default="libsvm", choices=FORMATS)
    tr.add_argument("--test", help="held-out data to report metrics on after training")
    tr.add_argument("--n-features", type=int, help="number of features (default: from the data)")
    tr.add_argument("--epochs", type=int, default=10, help="passes over the data")
    tr.add_argument("--lr", type=float, help="learning rate (default: the model's)")
    tr.add_argument("--solver", help="ma-sgd, sgd, ftrl, lbfgs or owlqn")
    tr.add_argument("--optimizer", help="server optimiser of --solver sgd")
    tr.add_argument("--alpha", type=float, help="L2 strength")
    tr.add_argument("--l1", type=float, help="L1 strength")
    tr.add_argument("--batch-size", type=int, help="rows per SGD step")
    tr.add_argument("--local-steps", type=int, help="ma-sgd: local steps between averagings")
    tr.add_argument("--val-fraction", type=float, help="held-out share for per-epoch metrics")
    tr.add_argument("--sync", default="bsp", help="bsp, ssp:<s> or asp")
    tr.add_argument("--groups", type=int, help="training tasks (default: one per worker thread)")
    tr.add_argument("--save", help="where to save the trained model (any fsspec URL)")
    _cluster_args(tr)
    pr = sub.add_parser("predict", help="predict with a saved model")
    pr.add_argument("--model-path", required=True, help="a model saved by 'daskangel train'")
    pr.add_argument("--data", required=True, help="rows to predict")
    pr.add_argument("--format", default="libsvm", choices=FORMATS)
    pr.add_argument("--out", required=True, help="output text file: one prediction per line")
    _cluster_args(pr)
    return ap


def _cluster_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--scheduler", help="address of a running Dask scheduler (tcp://...)")
    p.add_argument("--workers", type=int, default=2, help="LocalCluster worker processes")
    p.add_argument("--threads", type=int, default=1, help="threads per LocalCluster worker")
    p.add_argument("--ps", type=int, help="workers hosting PS servers (default: all)")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def _exists(url: str) -> bool:
    import fsspec

    fs, path = fsspec.core.url_to_fs(url)
    return bool(fs.glob(path)) if any(c in path for c in "*?[") else fs.exists(path)


def _check(ap: argparse.ArgumentParser, a: argparse.Namespace) -> dict[str, Any]:
    """Validate everything before any cluster starts; return estimator overrides."""
    for name in (
        "workers",
        "threads",
        "ps",
        "groups",
        "epochs",
        "n_features",
        "batch_size",
        "local_steps",
    ):
        v = getattr(a, name, None)
        if v is not None and v < 1:
            ap.error(f"argument --{name.replace('_', '-')}: expected an integer >= 1, got {v}")
    if a.ps is not None and a.scheduler is None and a.ps > a.workers:
        ap.error(f"argument --ps: {a.ps} PS workers but only --workers {a.workers}")
    if not _exists(a.data):
        ap.error(f"argument --data: no such file or URL: {a.data!r}")
    if a.command == "predict":
        if not _exists(f"{a.model_path.rstrip('/')}/daskangel-model.json"):
            ap.error(f"argument --model-path: {a.model_path!r} holds no saved daskangel model")
        return {}
    if a.test is not None and not _exists(a.test):
        ap.error(f"argument --test: no such file or URL: {a.test!r}")
    from .scheduler._clock_rule import as_sync

    try:
        as_sync(a.sync, "--sync")
    except ValueError as e:
        ap.error(f"argument {e}")
    kw: dict[str, Any] = {"max_iter": a.epochs}
    for arg, param in (
        ("lr", "learning_rate"), ("solver", "solver"), ("optimizer", "optimizer"),
        ("alpha", "alpha"), ("l1", "l1"), ("batch_size", "batch_size"),
        ("local_steps", "local_steps"), ("val_fraction", "validation_fraction"),
    ):  # fmt: skip
        v = getattr(a, arg)
        if v is not None:
            kw[param] = v
    kw["sync"] = a.sync
    from . import models

    est = getattr(models, MODELS[a.model])(**kw)
    try:
        est._check_params()
    except ValueError as e:
        ap.error(f"bad model parameter: {e}")
    return kw


def _read(path: str, fmt: str, n_features: int | None) -> Any:
    from . import data

    readers: dict[str, Any] = {
        "libsvm": data.read_libsvm,
        "dummy": data.read_dummy,
        "dense": data.read_dense,
    }
    return readers[fmt](path, n_features=n_features)


def _table(rows: dict[str, float]) -> str:
    w = max((len(k) for k in rows), default=6)
    lines = [f"{'metric':<{w}}  value", f"{'-' * w}  ------"]
    lines += [f"{k:<{w}}  {v:.6g}" for k, v in rows.items()]
    return "\n".join(lines)


def _test_metrics(est: Any, ds: Any) -> dict[str, float]:
    rows = ds.compute()
    y = rows.labels.astype(np.float64)
    X = rows.to_scipy()
    n = est.n_features_in_
    if X.shape[1] != n:
        import scipy.sparse as sp

        X = (
            X[:, :n]
            if X.shape[1] > n
            else sp.hstack([X, sp.csr_matrix((X.shape[0], n - X.shape[1]))]).tocsr()
        )
    out: dict[str, float] = {"test_rows": float(X.shape[0])}
    if est._task == "regressor":
        p = est.predict(X)
        out["test_rmse"] = float(np.sqrt(np.mean((p - y) ** 2)))
        out["test_mae"] = float(np.mean(np.abs(p - y)))
        return out
    out["test_accuracy"] = float(np.mean(est.predict(X) == y))
    if len(est.classes_) == 2:
        from sklearn.metrics import roc_auc_score

        out["test_auc"] = float(roc_auc_score(y == est.classes_[1], est.decision_function(X)))
    return out


def _run(a: argparse.Namespace, kw: dict[str, Any]) -> int:
    from distributed import Client, LocalCluster

    from . import models
    from .context import PSContext

    cluster = None
    if a.scheduler is None:
        cluster = LocalCluster(
            n_workers=a.workers, threads_per_worker=a.threads, dashboard_address=":0"
        )
    try:
        with Client(cluster if cluster is not None else a.scheduler) as client:
            print(f"dashboard: {client.dashboard_link}", flush=True)
            workers = sorted(workers_info(client))
            ps_workers = workers[: a.ps] if a.ps else None
            with PSContext(client, workers=ps_workers) as ps:
                if a.command == "predict":
                    return _predict(a, client, ps)
                est = getattr(models, MODELS[a.model])(
                    **kw, n_tasks=a.groups, progress=False if a.no_progress else "auto", ps=ps
                )
                ds = _read(a.data, a.format, a.n_features).persist(
                    client,
                    n_partitions=a.groups
                    or sum(w["nthreads"] for w in training_workers(client).values()),
                )
                est.fit(ds)
                final = est.history_.iloc[-1].to_dict() if len(est.history_) else {}
                final = {k: float(v) for k, v in final.items() if np.isfinite(v)}
                if a.test:
                    final.update(
                        _test_metrics(
                            est, _read(a.test, a.format, est.n_features_in_).persist(client)
                        )
                    )
                print(_table(final), flush=True)
                if a.save:
                    est.save(a.save)
                    print(f"saved to {a.save}", flush=True)
                ds.release()
                return 0
    finally:
        if cluster is not None:
            cluster.close()


def _predict(a: argparse.Namespace, client: Any, ps: Any) -> int:
    from . import models

    est = models.load(a.model_path, ps=ps)
    # one partition: predictions come out in the file's row order
    ds = _read(a.data, a.format, est.n_features_in_).persist(client, n_partitions=1)
    pred = np.asarray(est.predict(ds).compute())
    cols = [pred.astype(np.float64).reshape(-1, 1)]
    if hasattr(est, "predict_proba"):
        cols.append(np.asarray(est.predict_proba(ds).compute()))
    import fsspec

    with fsspec.open(a.out, "w") as f:
        np.savetxt(f, np.hstack(cols), fmt="%.6g")
    print(f"{pred.shape[0]} predictions written to {a.out}", flush=True)
    ds.release()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``daskangel`` script; returns the exit status."""
    ap = _parser()
    a = ap.parse_args(argv)
    kw = _check(ap, a)
    return _run(a, kw)


if __name__ == "__main__":
    sys.exit(main())
