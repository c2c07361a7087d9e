"""Scale and speed of logistic regression: daskangel ma-sgd vs scikit-learn vs dask-ml.

Run::

    python benchmarks/bench_linear.py                                   # full size (see below)
    python benchmarks/bench_linear.py --rows 1000000 --features 1000000 # a quick check
    python benchmarks/bench_linear.py --smoke                           # a run check, no figures

Data: a synthetic kdd2010-shaped CTR set (``benchmarks/_kddgen.py``): by default
10 M training rows x 10 M features x 30 distinct binary features per row
(300 M nnz), power-law feature frequencies, a planted sparse logistic model
(10 % of the features have a weight), deterministic for ``--seed``.  Training
rows are generated in chunks of ``--chunk-rows`` by a numba kernel, on the
workers for daskangel and dask-ml (a dask array of sparse chunks), in this
process for scikit-learn; a separate test set of ``--test-rows`` rows follows
them.  float32 values / int32 indices (float64 for scikit-learn, which needs it).

Target: the test log-loss ``bayes + --gap * (constant - bayes)``, where
``bayes`` is the planted model's own log-loss on the test rows and
``constant`` that of predicting the positive rate (``--target`` sets it
directly).  Times are training wall-clock times until the first epoch whose
model reaches the target (evaluation not counted, data generation and loading
not counted: the data is in memory for every contender).

* **daskangel**: ``LogisticRegression(solver='ma-sgd', adaptive=False)`` (one step
  size, the schedule SGDClassifier gets below) on a 2-worker
  LocalCluster (processes, 1 thread each: one task per worker), one
  averaging per epoch, pruned pulls.  The model after each epoch is
  evaluated on a seeded 1 % validation split of the training partitions
  (same distribution as the test rows; ``history_``), the epoch end times
  (after a small untimed warm-up fit that compiles the kernels on the workers)
  come from ``train_result_.history``.  The time includes each task's data
  preparation (its key list and local indices).
* **scikit-learn**: ``SGDClassifier(loss='log_loss', average=True)`` in this
  process with daskangel's step schedule (``learning_rate='constant'``,
  ``eta0 = lr / sqrt(1 + epoch)`` set before each epoch's ``partial_fit``;
  its default ``'optimal'`` schedule diverges on these rows of 30 ones),
  evaluated on the test rows after each epoch.
* **dask-ml**: ``dask_ml.linear_model.LogisticRegression(solver='lbfgs')`` on
  the same cluster (chunks as ``sparse.GCXS``, an intercept column appended,
  ``normalize=False``: centering would densify 10 M columns), fitted with
  ``max_iter`` 1, 2, 4, ... in a child process until the target or
  ``--cap`` seconds; past the cap it is reported as ``> cap`` with the best
  log-loss it reached.
* **daskangel, 2nd fit**: the same pruned fit run again on the persisted
  dataset: each worker kept what it derived from its partition (here, trained
  in place, the split and the pruned key list; otherwise the prepared rows:
  ``daskangel.models.prepared-cache``), as in a ``partial_fit`` loop or a
  parameter search; reported next to the first fit, which pays for it.
* **pruning** (Angel's Fig. 12b at model level): seconds per epoch of
  ma-sgd with pruned pulls (only the keys a partition uses, by key-set tag)
  vs full pulls (``prune=False``: every task pulls the whole model).

Per task the seconds of each phase are printed (``train_result_.results``'s
``timings``): ``prep`` (its rows' split, shuffled copy and key list, plus the
key-set registration; ``prep_rows`` without it), ``pull``, ``sgd`` (the local
SGD kernel), ``push``, ``eval`` (validation sums and metric reads), ``clock``
(flushing the push and waiting for the other task at the averaging barrier).

Targets (issue 7, 2 cores): daskangel <= 0.6x scikit-learn's time and
<= 0.1x dask-ml's.  Peak RSS is reported per worker and for this process.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import multiprocessing as mp
import os
import queue
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import peak_rss_gib, rss_now_gib
from _kddgen import GenSpec, bayes_logloss, make_chunk
from _sgdrate import print_rate, sgd_rate


def logloss(y: np.ndarray, margin: np.ndarray) -> float:
    z = np.where(y > 0, margin, -margin)
    return float(np.mean(np.logaddexp(0.0, -z)))


def chunks(rows: int, per: int) -> list[tuple[int, int]]:
    return [(r, min(per, rows - r)) for r in range(0, rows, per)]


# -- the data on the workers ------------------------------------------------------------------


def _x_chunk(row0: int, n: int, g: GenSpec) -> Any:
    return make_chunk(row0, n, g.nnz, g.n_features, spec=g)[:2]


def _gcxs_chunk(row0: int, n: int, g: GenSpec) -> Any:
    import sparse

    X, y, _ = make_chunk(row0, n, g.nnz, g.n_features, spec=g)
    X = sp.hstack([X, np.ones((n, 1), np.float32)], format="csr")  # the intercept column
    return sparse.GCXS.from_scipy_sparse(X), y


def dask_xy(g: GenSpec, rows: int, per: int, gcxs: bool = False) -> tuple[Any, Any]:
    import dask
    import dask.array as da

    width = g.n_features + (1 if gcxs else 0)
    fn = _gcxs_chunk if gcxs else _x_chunk
    meta: Any = sp.csr_matrix((0, width), dtype=np.float32)
    if gcxs:
        import sparse

        meta = sparse.GCXS.from_scipy_sparse(meta)
    xs, ys = [], []
    for r0, n in chunks(rows, per):
        d = dask.delayed(fn, nout=2, pure=True)(r0, n, g)
        xs.append(da.from_delayed(d[0], (n, width), dtype=np.float32, meta=meta))
        ys.append(da.from_delayed(d[1], (n,), dtype=np.float32))
    return da.concatenate(xs), da.concatenate(ys)


# -- contenders ---------------------------------------------------------------------------------


def run_sklearn(a: Any, g: GenSpec, test: Any, target: float) -> dict[str, Any]:
    from sklearn.linear_model import SGDClassifier

    Xte, yte = test
    t = time.perf_counter()
    parts = []
    ys = []
    for r0, n in chunks(a.rows, a.chunk_rows):
        X, y, _ = make_chunk(r0, n, g.nnz, g.n_features, spec=g, dtype=np.float64)
        parts.append(X)
        ys.append(y)
    X = sp.vstack(parts, format="csr")
    del parts
    X.indices = X.indices.astype(np.int32, copy=False)
    X.indptr = X.indptr.astype(np.int32)  # sklearn takes 32-bit index arrays only
    y = np.concatenate(ys)
    gen = time.perf_counter() - t
    print(f"  generated in this process: {gen:.1f} s ({X.nnz / gen / 1e6:.1f} M nnz/s)", flush=True)
    clf = SGDClassifier(
        loss="log_loss",
        alpha=a.alpha,
        learning_rate="constant",
        eta0=a.lr,
        average=True,
        random_state=0,
    )
    elapsed, curve = 0.0, []
    reached = None
    for e in range(a.epochs):
        clf.set_params(eta0=a.lr / math.sqrt(1.0 + e))  # daskangel's schedule
        t = time.perf_counter()
        clf.partial_fit(X, y, classes=np.array([0.0, 1.0]))
        elapsed += time.perf_counter() - t
        ll = logloss(yte, clf.decision_function(Xte))
        curve.append((e + 1, elapsed, ll))
        print(f"  sklearn epoch {e + 1}: {elapsed:.1f} s, test log-loss {ll:.4f}", flush=True)
        if ll <= target:
            reached = elapsed
            break
    del X
    return {"time": reached, "curve": curve, "rss": peak_rss_gib()}


def _angel_curve(est: Any, fit_wall: float) -> list[tuple[int, float, float]]:
    res = est.train_result_
    h = res.history
    start = fit_wall - res.wall_time  # before the tasks started: dataset, arrays, plan
    ends = h.groupby("clock").time.max()
    out = []
    for i, row in est.history_.reset_index(drop=True).iterrows():
        e = int(row.epoch)
        if e - 1 in ends.index:
            out.append((e, float(start + ends.loc[e - 1]), float(row.get("val_logloss", math.nan))))
        del i
    return out


def run_angel(a: Any, client: Any, ds: Any, target: float) -> dict[str, Any]:
    from daskangel import models

    out: dict[str, Any] = {}
    # warm-up (not timed): numba compiles the kernels once per worker process
    Xw, yw, _ = make_chunk(0, 2000, 5, 1000)
    models.LogisticRegression(solver="ma-sgd", max_iter=2, adaptive=False).fit(Xw, yw).close()
    for name, prune in (("pruned", True), ("full", False), ("warm", True)):
        epochs = a.epochs if name == "pruned" else min(2, a.epochs)
        if name == "warm":  # the same fit again: split and keys cached on the workers
            reached = out.get("epochs_to_target")
            epochs = reached or epochs
        est = models.LogisticRegression(
            solver="ma-sgd", alpha=a.alpha, learning_rate=a.lr, max_iter=epochs,
            validation_fraction=0.01, early_stopping=False, prune=prune, adaptive=False,
        )  # fmt: skip
        t = time.perf_counter()
        est.fit(ds)
        wall = time.perf_counter() - t
        curve = _angel_curve(est, wall)
        per_epoch = (
            (curve[-1][1] - curve[0][1]) / max(1, len(curve) - 1) if len(curve) > 1 else wall
        )
        for e, s, ll in curve:
            print(
                f"  daskangel ({name}) epoch {e}: {s:.1f} s, val log-loss {ll:.4f}",
                flush=True,
            )
        for i, r in enumerate(est.train_result_.results):
            tm = r.get("timings", {})
            print(
                f"  daskangel ({name}) task {i} seconds: "
                + ", ".join(f"{k} {v:.2f}" for k, v in tm.items())
                + f" (fit wall {wall:.1f})",
                flush=True,
            )
        out[name] = {"curve": curve, "per_epoch": per_epoch, "wall": wall}
        hit = next(((e, s) for e, s, ll in curve if ll <= target), None)
        if name == "pruned":
            out["time"] = hit[1] if hit else None
            out["epochs_to_target"] = hit[0] if hit else None
        if name == "warm":
            out["warm_time"] = hit[1] if hit else None
        est.close()
    out["rss"] = client.run(peak_rss_gib)
    return out


def _daskml_child(addr: str, a: Any, g: GenSpec, test: Any, target: float, q: Any) -> None:
    import dask
    from dask_ml.linear_model import LogisticRegression
    from distributed import Client

    Xte, yte = test
    with Client(addr):
        X, y = dask_xy(g, a.rows, a.chunk_rows, gcxs=True)
        X, y = dask.persist(X, y)
        from distributed import wait

        wait([X, y])
        q.put(("ready", None))
        it = 1
        while True:
            est = LogisticRegression(
                solver="lbfgs", max_iter=it, C=1.0 / (a.alpha * a.rows), fit_intercept=False,
                solver_kwargs={"normalize": False},
            )  # fmt: skip
            t = time.perf_counter()
            est.fit(X, y)
            s = time.perf_counter() - t
            coef = np.asarray(est.coef_)
            ll = logloss(yte, Xte @ coef[:-1] + coef[-1])
            q.put(("fit", (it, s, ll)))
            if ll <= target:
                return
            it *= 2


def run_daskml(a: Any, client: Any, g: GenSpec, test: Any, target: float) -> dict[str, Any]:
    try:
        import dask_ml  # noqa: F401
    except ImportError:
        print("  dask-ml is not installed (pip install -e '.[bench]'): skipped")
        return {"skipped": True}
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(
        target=_daskml_child, args=(client.scheduler.address, a, g, test, target, q), daemon=True
    )
    p.start()
    fits: list[tuple[int, float, float]] = []
    deadline = None
    reached = None
    try:
        while p.is_alive() or not q.empty():
            left = None if deadline is None else deadline - time.perf_counter()
            if left is not None and left <= 0:
                break
            try:
                kind, val = q.get(timeout=min(left, 5.0) if left is not None else 5.0)
            except queue.Empty:
                continue
            if kind == "ready":
                deadline = time.perf_counter() + a.cap
                print("  dask-ml: data persisted, fitting", flush=True)
                continue
            it, s, ll = val
            fits.append(val)
            print(f"  dask-ml max_iter={it}: {s:.1f} s, test log-loss {ll:.4f}", flush=True)
            if ll <= target:
                reached = s
                break
    finally:
        if p.is_alive():
            p.kill()
        p.join()
    best = min((f[2] for f in fits), default=math.nan)
    return {"time": reached, "fits": fits, "best": best}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--features", type=int, default=10_000_000)
    ap.add_argument("--nnz-per-row", type=int, default=30)
    ap.add_argument("--test-rows", type=int, default=200_000)
    ap.add_argument("--chunk-rows", type=int, default=500_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--epochs", type=int, default=5, help="most epochs per contender")
    ap.add_argument("--alpha", type=float, default=1e-7, help="L2 of the mean-loss objective")
    ap.add_argument("--lr", type=float, default=0.05, help="SGD step (both SGDs)")
    ap.add_argument("--gap", type=float, default=0.35)
    ap.add_argument("--target", type=float, default=None)
    ap.add_argument("--cap", type=float, default=900.0, help="dask-ml seconds")
    ap.add_argument("--skip", default="", help="comma list of sklearn,daskangel,daskml,sgdrate")
    ap.add_argument("--sgd-rows", type=int, default=200_000, help="rows of the sgd-rate run")
    ap.add_argument("--sgd-features", type=int, default=1_000_000)
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, 2 epochs: a run check")
    a = ap.parse_args()
    if a.smoke:
        a.rows, a.features, a.test_rows, a.chunk_rows = 20_000, 20_000, 2_000, 10_000
        a.epochs, a.cap = 2, 10.0
        a.sgd_rows, a.sgd_features = 2_000, 10_000
    for name in ("rows", "features", "nnz_per_row", "test_rows", "chunk_rows", "epochs"):
        if getattr(a, name) < 1:
            ap.error(f"--{name.replace('_', '-')}: expected an int >= 1, got {getattr(a, name)}")
    skip = set(filter(None, a.skip.split(",")))
    if a.smoke:
        # dask-ml's child process (spawn, import, persist, then lbfgs fits that a cap
        # cannot interrupt) took minutes under load: a run check skips the peer
        skip.add("daskml")
    g = GenSpec(a.features, a.nnz_per_row, a.seed)
    print(
        f"data: {a.rows:,} rows x {a.features:,} features x {a.nnz_per_row} nnz/row "
        f"= {a.rows * a.nnz_per_row:,} nnz; test {a.test_rows:,} rows; "
        f"load average {os.getloadavg()[0]:.2f} (2 cores)",
        flush=True,
    )
    Xte, yte, mte = make_chunk(a.rows, a.test_rows, g.nnz, g.n_features, spec=g, dtype=np.float64)
    bayes = bayes_logloss(yte, mte)
    pos = float(yte.mean())
    const = -(pos * math.log(pos) + (1 - pos) * math.log(1 - pos))
    target = a.target if a.target is not None else bayes + a.gap * (const - bayes)
    print(f"test log-loss: planted model {bayes:.4f}, constant {const:.4f} -> target {target:.4f}")
    test = (Xte, yte)

    sk: dict[str, Any] = {"skipped": True}
    if "sklearn" not in skip:
        print("scikit-learn SGDClassifier (one process) ...", flush=True)
        sk = run_sklearn(a, g, test, target)
        _trim()  # scikit-learn's copy of the rows is gone: give its pages back before the cluster
        print(f"  driver RSS after freeing it: {rss_now_gib():.2f} GiB", flush=True)
    from distributed import Client, LocalCluster

    import daskangel as angel

    ag: dict[str, Any] = {"skipped": True}
    dm: dict[str, Any] = {"skipped": True}
    rate: dict[str, Any] = {"skipped": True}
    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
        ) as cl,
        Client(cl) as client,
    ):
        if "daskangel" not in skip:
            print("daskangel: generating on the workers and loading ...", flush=True)
            t = time.perf_counter()
            X, y = dask_xy(g, a.rows, a.chunk_rows)
            ds = angel.data.from_array(X, y, n_features=g.n_features).persist(
                client, n_partitions=2
            )
            load = time.perf_counter() - t
            print(f"  generated + loaded in {load:.1f} s", flush=True)
            ag = run_angel(a, client, ds, target)
            ds.release()
            del X, y
        if "daskml" not in skip:
            print(f"dask-ml (cap {a.cap:.0f} s) ...", flush=True)
            client.run(_trim)
            dm = run_daskml(a, client, g, test, target)
        if "sgdrate" not in skip:
            print("sgd vs ma-sgd rows/s ...", flush=True)
            rate = sgd_rate(client, a, repeat=1 if a.smoke else 3, warmup=not a.smoke)

    def fmt(s: Any) -> str:
        return "-" if s is None else f"{s:8.1f}"

    print(f"\n== time to test log-loss <= {target:.4f} ==")
    print(f"{'contender':34} {'seconds':>9} {'ratio':>7}  notes")
    a_t = ag.get("time")
    if not ag.get("skipped"):
        rss = ", ".join(f"{v:.2f}" for v in ag["rss"].values())
        print(
            f"{'daskangel ma-sgd, 2 workers':34} {fmt(a_t):>9} {'1.00':>7}  peak RSS per worker GiB: {rss}"
        )
    if not ag.get("skipped"):
        w_t = ag.get("warm_time")
        r = f"{w_t / sk['time']:.2f}" if w_t and sk.get("time") else "-"
        print(
            f"{'daskangel, 2nd fit (keys cached)':34} {fmt(w_t):>9} {'':>7}  "
            f"daskangel/sklearn = {r} (the same fit again on the persisted dataset)"
        )
    if not sk.get("skipped"):
        r = f"{a_t / sk['time']:.2f}" if a_t and sk["time"] else "-"
        note = f"daskangel/sklearn = {r} (target <= 0.6); process peak RSS {sk['rss']:.2f} GiB"
        print(f"{'sklearn SGDClassifier, 1 process':34} {fmt(sk['time']):>9} {'':>7}  {note}")
        if sk["time"] is None:
            print(f"  sklearn did not reach the target in {a.epochs} epochs: {sk['curve'][-1]}")
    if not dm.get("skipped"):
        if dm["time"] is None:
            shown = f"> {a.cap:.0f}"
            r = f"< {a_t / a.cap:.3f}" if a_t else "-"
            note = f"best log-loss {dm['best']:.4f} within the cap; daskangel/dask-ml = {r} (target <= 0.1)"
        else:
            shown = fmt(dm["time"])
            r = f"{a_t / dm['time']:.3f}" if a_t else "-"
            note = f"daskangel/dask-ml = {r} (target <= 0.1)"
        print(f"{'dask-ml LogisticRegression lbfgs':34} {shown:>9} {'':>7}  {note}")
    if not ag.get("skipped"):
        pr, fu = ag["pruned"]["per_epoch"], ag["full"]["per_epoch"]
        print(
            f"\n== pruning (ma-sgd, seconds per epoch) ==\npruned pulls {pr:.2f} s, full pulls "
            f"{fu:.2f} s: full/pruned = {fu / pr:.2f}x"
        )
    if not rate.get("skipped"):
        print_rate(rate, a)
    print(f"\nload average at end: {os.getloadavg()[0]:.2f}")


def _trim() -> None:
    import ctypes
    import gc

    gc.collect()
    with contextlib.suppress(OSError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


if __name__ == "__main__":
    main()
