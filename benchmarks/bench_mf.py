"""Matrix factorisation side by side: daskangel against surprise, implicit and a numba yardstick.

Run::

    python benchmarks/bench_mf.py                          # every section below
    python benchmarks/bench_mf.py --sections explicit --datasets ml-latest-small
    python benchmarks/bench_mf.py --sections synthetic --synthetic-ratings 20000000
    python benchmarks/bench_mf.py --smoke                  # tiny: 12,000 MovieLens ratings
                                                           # (skipped without the data), 20,000 synthetic,
                                                           # in-process workers (figures mean nothing)

Data: ``../shared/data/ml-latest-small/ratings.csv`` and
``../shared/data/jester/jester-data-1.zip`` (``$DASKANGEL_DATA`` to point
elsewhere); a missing file is skipped with a printed line.  Nothing is
downloaded and nothing is written.

Protocol (issue 16):

* **explicit** (per data set): split ``numpy.random.default_rng(0).permutation(n)``,
  the first 20 % the test set; test RMSE with predictions clipped to the rating
  range, for a bias-only model (regularised user and item biases, 10 alternating
  sweeps), ``surprise`` SVD with its defaults and with ``reg_all=0.05``, a
  single-process numba SGD doing daskangel's updates (the same kernel,
  ``n_factors=50``, 30 epochs, its default learning rate and regularisation:
  the time-per-epoch yardstick), and daskangel ``MatrixFactorization`` with
  nothing set but ``n_factors=50, solver="sgd", max_iter=30`` (and
  ``solver="als", max_iter=15``) on LocalClusters of 1 and 2 worker processes
  (one thread each).  A daskangel epoch is the median over the epochs after the
  first of the slowest task's time from the end of one epoch to the end of the
  next (``train_result_.history``; the first epoch, which loads the kernels and
  prepares the data, is left out).
* **implicit**: ml-latest-small ratings >= 4 are the positives, same split;
  precision@10 over the test users (hits / min(10, test positives), the
  ``implicit`` library's definition; training items excluded) for
  ``implicit``'s ``AlternatingLeastSquares`` and daskangel's implicit ALS at
  equal factors, iterations, regularisation and alpha.
* **synthetic**: a Netflix-shaped set made here with a seed (17,770 items,
  users in proportion to ``--synthetic-ratings``: 480,189 users at 100 M;
  power-law popularity and activity, planted rank-10 structure plus biases and
  noise, ratings in [1, 5]; :func:`daskangel.models.mf.planted_ratings`, ~1 min
  at 100 M).  Rank 50: one SGD epoch of the numba yardstick
  (one process) against daskangel SGD on 2 workers (updates/s, ratio), one ALS
  iteration of ``implicit`` against daskangel's, and the peak RSS of every worker.

Printed: one table per section; ratios to the yardstick or peer of the same run.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import peak_rss_gib
from _data import data_root, have

K_DEFAULT = 50


# -- data -------------------------------------------------------------------------------


def read_movielens(root: Path) -> pd.DataFrame | None:
    path = root / "ml-latest-small" / "ratings.csv"
    if not have(path):
        return None
    df = pd.read_csv(path, usecols=["userId", "movieId", "rating"])
    return df.rename(columns={"userId": "user", "movieId": "item"})


def read_jester(root: Path) -> pd.DataFrame | None:
    path = root / "jester" / "jester-data-1.zip"
    if not have(path):
        return None
    with zipfile.ZipFile(path) as z:
        raw = z.read(z.namelist()[0])
    a = np.loadtxt(io.BytesIO(raw), delimiter=",", dtype=np.float64)[:, 1:]
    u, i = np.nonzero(a != 99)
    return pd.DataFrame({"user": u, "item": i, "rating": a[u, i]})


def planted(
    n_users: int, n_items: int, n_ratings: int, seed: int, rank: int = 10, lo: float = 1.0,
    hi: float = 5.0,
) -> pd.DataFrame:  # fmt: skip
    """Power-law popularity and activity, a planted biased rank-``rank`` model plus noise
    (:func:`daskangel.models.mf.planted_ratings`)."""
    from daskangel.models.mf import planted_ratings

    return planted_ratings(n_users, n_items, n_ratings, seed=seed, rank=rank, lo=lo, hi=hi)


def split(df: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The issue's split: ``default_rng(0).permutation(n)``, the first 20 % for test."""
    perm = np.random.default_rng(0).permutation(len(df))
    k = int(0.2 * len(df))
    return df.iloc[perm[k:]].reset_index(drop=True), df.iloc[perm[:k]].reset_index(drop=True)


def rmse(p: np.ndarray, r: np.ndarray, lo: float, hi: float) -> float:
    p = np.clip(np.asarray(p, np.float64), lo, hi)
    return float(np.sqrt(np.mean((p - np.asarray(r, np.float64)) ** 2)))


# -- peers ------------------------------------------------------------------------------


def bias_only(train: pd.DataFrame, test: pd.DataFrame, reg: float = 5.0) -> float:
    """Regularised user and item biases (alternating, as surprise's BaselineOnly)."""
    mu = float(train.rating.mean())
    u = pd.factorize(pd.concat([train.user, test.user]))[0]
    i = pd.factorize(pd.concat([train.item, test.item]))[0]
    n = len(train)
    ut, it, r = u[:n], i[:n], train.rating.to_numpy(np.float64) - mu
    bu = np.zeros(u.max() + 1)
    bi = np.zeros(i.max() + 1)
    cu = np.bincount(ut, minlength=bu.shape[0])
    ci = np.bincount(it, minlength=bi.shape[0])
    for _ in range(10):
        bi = np.bincount(it, r - bu[ut], minlength=bi.shape[0]) / (ci + reg)
        bu = np.bincount(ut, r - bi[it], minlength=bu.shape[0]) / (cu + reg)
    lo, hi = float(train.rating.min()), float(train.rating.max())
    return rmse(mu + bu[u[n:]] + bi[i[n:]], test.rating.to_numpy(), lo, hi)


def run_surprise(train: pd.DataFrame, test: pd.DataFrame, **kw: Any) -> dict[str, Any] | None:
    try:
        from surprise import SVD, Dataset, Reader
    except ImportError:
        print("  skipped: surprise is not installed (pip install -e '.[bench]')")
        return None
    lo, hi = float(train.rating.min()), float(train.rating.max())
    data = Dataset.load_from_df(train[["user", "item", "rating"]], Reader(rating_scale=(lo, hi)))
    ts = data.build_full_trainset()
    algo = SVD(random_state=0, **kw)
    t = time.perf_counter()
    algo.fit(ts)
    fit = time.perf_counter() - t
    p = np.array([algo.predict(u, i).est for u, i in zip(test.user, test.item, strict=True)])
    return {"rmse": rmse(p, test.rating.to_numpy(), lo, hi), "epoch": fit / algo.n_epochs}


def numba_sgd(
    train: pd.DataFrame,
    test: pd.DataFrame | None,
    K: int,
    epochs: int,
    seed: int = 0,
    clocks: int = 4,
) -> dict[str, Any]:
    """daskangel's SGD kernel over all the ratings in one process (the yardstick), in
    the order a task of ``clocks`` clocks an epoch visits its ratings."""
    from daskangel import config
    from daskangel.models._core import SHUFFLE_BLOCK, epoch_order
    from daskangel.models.mf._kernels import predict, sgd_block, sgd_blocks
    from daskangel.models.mf._params import resolved_lr, resolved_reg
    from daskangel.models.mf._parts import user_bounds
    from daskangel.models.mf._prep import band_blocks, by_band, user_runs

    lr, reg = resolved_lr("sgd", "sgd", None), resolved_reg("sgd", "explicit", None)
    users = pd.concat([train.user, test.user]) if test is not None else train.user
    items = pd.concat([train.item, test.item]) if test is not None else train.item
    u = pd.factorize(users)[0].astype(np.int32)
    i = pd.factorize(items)[0].astype(np.int32)
    n = len(train)
    r = train.rating.to_numpy(np.float32)
    mu = float(r.mean(dtype=np.float64))
    rng = np.random.default_rng(seed)
    P = rng.normal(scale=0.05, size=(u.max() + 1, K + 1)).astype(np.float32)
    Q = rng.normal(scale=0.05, size=(i.max() + 1, K + 1)).astype(np.float32)
    P[:, K] = 0
    Q[:, K] = 0
    shuffle = rng.permutation(n)  # laid out once in a random order, as a task does
    if config.get("daskangel.models.mf.user-runs"):  # ... and user by user, as a task does
        shuffle = user_runs(shuffle, u[:n], int(u.max()) + 1, [seed, 7907, 0])
    starts = None
    if config.get("daskangel.models.mf.item-bands") and clocks > 1:
        # ... and band by band (one band of items a clock, about the same ratings each)
        counts = np.bincount(i[:n], minlength=int(i.max()) + 1)
        bounds = user_bounds(counts, clocks)
        band = np.searchsorted(bounds, np.arange(counts.shape[0]), side="right") - 1
        shuffle, starts = by_band(shuffle, i[:n], band, clocks)
    ut, it, r = u[:n][shuffle], i[:n][shuffle], r[shuffle]
    sgd_block(
        np.arange(min(n, 10), dtype=np.int64), ut, it, r, P.copy(), Q.copy(), mu, lr, reg, lr, reg
    )  # fmt: skip  (compiles)
    times, cpu = [], []
    buf = np.empty(n, np.int32 if n < 2**31 else np.int64)
    for e in range(epochs):
        # the block order of daskangel's epochs (int32, written over the last, as a task does)
        if starts is None:
            order = epoch_order(n, [seed, e, 0], out=buf)
        else:  # the bands in a random order, each in block order, as task 0 visits them
            visit = np.random.default_rng([seed, 7933, e]).permutation(clocks)
            blocks = band_blocks(starts, visit, [seed, e, 0])
        t, c = time.perf_counter(), time.process_time()
        if starts is None:
            sgd_block(order, ut, it, r, P, Q, mu, lr, reg, lr, reg)
        else:
            for b, bl in zip(visit, blocks, strict=True):
                sgd_blocks(bl, starts[b + 1], SHUFFLE_BLOCK, ut, it, r, P, Q, mu, lr, reg, lr, reg)
        times.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    out: dict[str, Any] = {"epoch": float(np.median(times)), "n": n, "cpu": float(np.median(cpu))}
    if test is not None:
        lo, hi = float(r.min()), float(r.max())
        p = predict(u[n:].astype(np.int64), i[n:].astype(np.int64), P, Q, mu, lo, hi, True)
        out["rmse"] = rmse(p, test.rating.to_numpy(), lo, hi)
    return out


def implicit_matrix(df: pd.DataFrame, n_users: int, n_items: int, alpha: float) -> Any:
    import scipy.sparse as sp

    v = 1.0 + alpha * df.rating.to_numpy(np.float32)  # the confidence c of Hu et al.
    return sp.csr_matrix((v, (df.user.to_numpy(), df.item.to_numpy())), shape=(n_users, n_items))


def run_implicit_lib(
    Cui: Any, K: int, iters: int, reg: float, threads: int = 2
) -> tuple[Any, float] | None:
    """``implicit``'s ALS on a user x item confidence matrix: (model, seconds per iteration)."""
    try:
        from implicit.cpu.als import AlternatingLeastSquares
    except ImportError:
        print("  skipped: implicit is not installed (pip install -e '.[bench]')")
        return None
    m = AlternatingLeastSquares(
        factors=K, iterations=iters, regularization=reg, alpha=1.0, random_state=0,
        num_threads=threads, calculate_training_loss=False,
    )  # fmt: skip
    t = time.perf_counter()
    m.fit(Cui, show_progress=False)
    return m, (time.perf_counter() - t) / max(iters, 1)


def precision_at_k(
    recs: dict[Any, np.ndarray], train_pos: dict[Any, set[Any]], test_pos: dict[Any, set[Any]],
    k: int = 10,
) -> float:  # fmt: skip
    hits = total = 0
    for user, truth in test_pos.items():
        got = [x for x in recs.get(user, []) if x not in train_pos.get(user, set())][:k]
        hits += len(set(got) & truth)
        total += min(k, len(truth))
    return hits / total if total else float("nan")


# -- daskangel --------------------------------------------------------------------------


_CLUSTERS: dict[int, tuple[Any, Any]] = {}
# --smoke: in-process workers (no process imports daskangel and loads the kernels again:
# most of the smoke's time on 2 loaded cores); the figures of a smoke run mean nothing
_PROCESSES = [True]


def cluster(n_workers: int) -> Any:
    """A client of a LocalCluster of ``n_workers`` processes (one thread each), made once."""
    from distributed import Client, LocalCluster

    if n_workers not in _CLUSTERS:
        for lc, client in _CLUSTERS.values():  # one cluster at a time on the 2 cores
            client.close()
            lc.close()
        _CLUSTERS.clear()
        lc = LocalCluster(
            n_workers=n_workers, threads_per_worker=1, dashboard_address=":0",
            worker_dashboard_address=None, processes=_PROCESSES[0],
        )  # fmt: skip
        _CLUSTERS[n_workers] = (lc, Client(lc))
    return _CLUSTERS[n_workers][1]


def close_clusters() -> None:
    for lc, client in _CLUSTERS.values():
        client.close()
        lc.close()
    _CLUSTERS.clear()


def loop_epoch(m: Any, epochs: int, per: int) -> float:
    """Seconds per epoch of the fit's slowest task: the median over the epochs after the
    first (which loads kernels and data) of the time between the ends of two epochs
    (``per`` clocks each), waits at the clocks included; one epoch: its time."""
    h = m.train_result_.history
    if not len(h) or epochs < 1:
        return float("nan")
    ends = h[(h.clock + 1) % per == 0].pivot_table(index="clock", columns="task", values="time")
    ends = ends.sort_index().to_numpy()
    d = np.diff(np.vstack([np.zeros((1, ends.shape[1])), ends]), axis=0).max(axis=1)
    return float(np.median(d[1:] if d.shape[0] > 1 else d))


def run_daskangel(
    client: Any, train: Any, test: pd.DataFrame | None, epochs: int, **kw: Any
) -> dict[str, Any] | None:
    from daskangel.errors import InvalidArgumentError
    from daskangel.models import MatrixFactorization

    kw.setdefault("n_factors", K_DEFAULT)
    try:
        m = MatrixFactorization(max_iter=epochs, client=client, progress=False, **kw)
        t = time.perf_counter()
        m.fit(train)
        wall = time.perf_counter() - t
    except InvalidArgumentError as e:
        if "not available" not in str(e):
            raise
        print(f"  skipped: daskangel {kw.get('solver', 'sgd')}: {e}")
        return None
    per = 2 if kw.get("solver") == "als" else int(kw.get("clocks_per_epoch", 4))
    out: dict[str, Any] = {"wall": wall, "epoch": loop_epoch(m, epochs, per), "model": m}
    if test is not None:
        out["rmse"] = m.rmse(test)
    out["rss"] = client.run(peak_rss_gib)
    return out


def fmt(x: float | None, spec: str = ".4f") -> str:
    return "-" if x is None or x != x else format(x, spec)


# -- sections ---------------------------------------------------------------------------


def explicit(name: str, df: pd.DataFrame, a: argparse.Namespace) -> None:
    train, test = split(df)
    print(f"\n## explicit: {name} ({len(train):,} train / {len(test):,} test ratings, "
          f"rank {a.factors})")  # fmt: skip
    rows: list[tuple[str, float | None, float | None]] = []
    rows.append(("bias only (regularised biases)", bias_only(train, test), None))
    if not a.no_peers:
        variants: list[tuple[str, dict[str, Any]]] = [("surprise SVD (defaults)", {})]
        if not a.smoke:
            variants.append(("surprise SVD reg_all=0.05", {"reg_all": 0.05}))
        for label, kw in variants:
            s = run_surprise(train, test, **kw)
            if s is not None:
                rows.append((label, s["rmse"], s["epoch"]))
    y = numba_sgd(train, test, a.factors, a.sgd_epochs)
    rows.append((f"numba SGD, 1 process ({a.sgd_epochs} epochs)", y["rmse"], y["epoch"]))
    for n_workers in a.workers:
        client = cluster(n_workers)
        for solver, epochs in (("sgd", a.sgd_epochs), ("als", a.als_epochs)):
            r = run_daskangel(
                client, train, test, epochs, n_factors=a.factors, solver=solver, random_state=0
            )
            if r is None:
                continue
            label = f"daskangel {solver.upper()}, {n_workers} worker(s) ({epochs} it.)"
            rows.append((label, r["rmse"], r["epoch"]))
            r["model"].close()
    print(f"{'model':46} {'test RMSE':>10} {'s/epoch':>9} {'x numba':>8}")
    for label, e, t in rows:
        ratio = t / y["epoch"] if t is not None else None
        print(f"{label:46} {fmt(e):>10} {fmt(t, '.3f'):>9} {fmt(ratio, '.2f'):>8}")


def implicit_section(df: pd.DataFrame, a: argparse.Namespace) -> None:
    train, test = split(df)
    train, test = train[train.rating >= 4], test[test.rating >= 4]
    print(f"\n## implicit: ratings >= 4 ({len(train):,} train / {len(test):,} test positives, "
          f"rank {a.factors}, {a.als_epochs} iterations, reg {a.implicit_reg}, alpha {a.alpha})")  # fmt: skip
    train_pos = train.groupby("user").item.apply(set).to_dict()
    test_pos = test.groupby("user").item.apply(set).to_dict()
    users = sorted(test_pos)
    rows: list[tuple[str, float, float]] = []
    if not a.no_peers:
        uc, ucat = pd.factorize(train.user)
        ic, icat = pd.factorize(train.item)
        tr = pd.DataFrame({"user": uc, "item": ic, "rating": np.ones(len(train), np.float32)})
        Cui = implicit_matrix(tr, len(ucat), len(icat), a.alpha)
        got = run_implicit_lib(Cui, a.factors, a.als_epochs, a.implicit_reg)
        if got is not None:
            m, per = got
            uidx = pd.Index(ucat)
            known = [u for u in users if u in uidx]
            rows_u = uidx.get_indexer(known)
            ids, _ = m.recommend(rows_u, Cui[rows_u], N=10, filter_already_liked_items=True)
            recs = {u: np.asarray(icat)[r] for u, r in zip(known, ids, strict=True)}
            rows.append(
                ("implicit ALS (2 threads)", precision_at_k(recs, train_pos, test_pos), per)
            )
    for n_workers in a.workers[-1:]:
        client = cluster(n_workers)
        r = run_daskangel(
            client, train[["user", "item"]], None, a.als_epochs, n_factors=a.factors,
            solver="als", feedback="implicit", reg=a.implicit_reg, alpha=a.alpha,
            random_state=0,
        )  # fmt: skip
        if r is not None:
            m = r["model"]
            rec = m.recommend(users, n=10)
            recs = {u: g.item.to_numpy() for u, g in rec.groupby("user")}
            label = f"daskangel implicit ALS, {n_workers} workers"
            rows.append((label, precision_at_k(recs, train_pos, test_pos), r["epoch"]))
            m.close()
    ref = rows[0][1] if rows else float("nan")
    print(f"{'model':46} {'prec@10':>8} {'s/iter':>8} {'x implicit':>10}")
    for label, p, t in rows:
        print(f"{label:46} {fmt(p):>8} {fmt(t, '.3f'):>8} {fmt(p / ref, '.3f'):>10}")


def print_breakdown(m: Any, epochs: int) -> None:
    """Each task's seconds per epoch by kind (over the whole fit, the first epoch's
    kernel loading and data preparation in ``prep``): where an epoch goes."""
    for res in m.train_result_.results:
        tm = res.get("timings", {})
        parts = ", ".join(f"{k} {v / max(epochs, 1):.3f}" for k, v in tm.items() if k != "prep")
        print(f"  task s/epoch: {parts} (prep {tm.get('prep', 0.0):.2f} s once)")


def synthetic(a: argparse.Namespace) -> None:
    n = int(a.synthetic_ratings)
    n_items = 17_770 if not a.smoke else 300
    n_users = max(50, int(480_189 * n / 100_000_000)) if not a.smoke else 500
    t = time.perf_counter()
    df = planted(n_users, n_items, n, seed=1)
    gen = time.perf_counter() - t
    print(f"\n## synthetic Netflix-shaped: {len(df):,} ratings, {n_users:,} users x "
          f"{n_items:,} items (generated in {gen:.1f} s), rank {a.factors}")  # fmt: skip
    print(f"{'what':46} {'s/epoch':>9} {'M upd/s':>8} {'ratio':>6}  peak RSS per worker")
    client = cluster(2)
    if "sgd" in a.synthetic_solvers.split(","):
        sgd_rows(client, df, a)
    if "als" in a.synthetic_solvers.split(","):
        als_rows(client, df, n_users, n_items, a)


def sgd_rows(client: Any, df: pd.DataFrame, a: argparse.Namespace) -> None:
    """One SGD epoch of the numba yardstick, then daskangel's on 2 workers; both are
    scored on the same 1 % of the ratings held out (test RMSE after their epochs)."""
    held = np.random.default_rng(0).random(len(df), dtype=np.float32) < 0.01
    train, test = df[~held].reset_index(drop=True), df[held].reset_index(drop=True)
    ye = a.yardstick_epochs or a.synthetic_epochs
    y = numba_sgd(train, test, a.factors, ye)
    print(f"{'numba SGD epoch, 1 process':46} {y['epoch']:>9.3f} "
          f"{y['n'] / y['epoch'] / 1e6:>8.2f} {'1.00':>6}  (CPU {y['cpu']:.3f} s)")  # fmt: skip
    print(f"  (test RMSE {y['rmse']:.4f} after {ye} epochs, {len(test):,} held-out ratings)")
    r = run_daskangel(
        client, train, test, a.synthetic_epochs, n_factors=a.factors, solver="sgd",
        random_state=0,
    )  # fmt: skip
    if r is not None:
        rss = ", ".join(f"{v:.2f} GiB" for v in r["rss"].values())
        print(f"{'daskangel SGD epoch, 2 workers':46} {r['epoch']:>9.3f} "
              f"{len(train) / r['epoch'] / 1e6:>8.2f} {r['epoch'] / y['epoch']:>6.2f}  {rss}")  # fmt: skip
        print(f"  (test RMSE {r['rmse']:.4f} after {a.synthetic_epochs} epochs; "
              f"fit wall {r['wall']:.1f} s, ingest included)")  # fmt: skip
        print_breakdown(r["model"], a.synthetic_epochs)
        r["model"].close()


def als_rows(
    client: Any, df: pd.DataFrame, n_users: int, n_items: int, a: argparse.Namespace
) -> None:
    """One implicit ALS iteration of ``implicit`` (2 threads), then daskangel's on 2 workers."""
    per_peer = None
    if not a.no_peers:
        got = run_implicit_lib(implicit_matrix(df, n_users, n_items, 1.0), a.factors,
                               a.synthetic_epochs, 0.01)  # fmt: skip
        if got is not None:
            per_peer = got[1]
            print(f"{'implicit ALS iteration (2 threads)':46} {per_peer:>9.3f} "
                  f"{len(df) / per_peer / 1e6:>8.2f} {'1.00':>6}")  # fmt: skip
    r = run_daskangel(
        client, df, None, a.synthetic_epochs, n_factors=a.factors, solver="als",
        feedback="implicit", alpha=1.0, random_state=0,
    )  # fmt: skip
    if r is not None:
        rss = ", ".join(f"{v:.2f} GiB" for v in r["rss"].values())
        ratio = r["epoch"] / per_peer if per_peer else float("nan")
        print(f"{'daskangel implicit ALS iteration, 2 workers':46} {r['epoch']:>9.3f} "
              f"{len(df) / r['epoch'] / 1e6:>8.2f} {fmt(ratio, '.2f'):>6}  {rss}")  # fmt: skip
        r["model"].close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sections", default="explicit,implicit,synthetic")
    ap.add_argument("--datasets", default="ml-latest-small,jester")
    ap.add_argument("--factors", type=int, default=K_DEFAULT)
    ap.add_argument("--sgd-epochs", type=int, default=30)
    ap.add_argument("--als-epochs", type=int, default=15)
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--alpha", type=float, default=40.0)
    ap.add_argument("--implicit-reg", type=float, default=0.01)
    ap.add_argument("--synthetic-ratings", type=float, default=100_000_000)
    ap.add_argument("--synthetic-epochs", type=int, default=3)
    ap.add_argument("--synthetic-solvers", default="sgd,als", help="sgd: the SGD rows only")
    ap.add_argument(
        "--yardstick-epochs", type=int, default=0, help="numba SGD epochs (0: --synthetic-epochs)"
    )
    ap.add_argument("--no-peers", action="store_true")
    ap.add_argument("--smoke", action="store_true")
    a = ap.parse_args()
    a.workers = [int(w) for w in str(a.workers).split(",")]
    sections = set(a.sections.split(","))
    if a.smoke:
        a.factors, a.sgd_epochs, a.als_epochs, a.workers = 8, 3, 2, [2]
        a.synthetic_ratings, a.synthetic_epochs = 20_000, 1
        _PROCESSES[0] = False
    print(f"bench_mf: {time.strftime('%Y-%m-%dT%H:%MZ', time.gmtime())}, load "
          f"{os.getloadavg()[0]:.2f}, {os.cpu_count()} cores")  # fmt: skip
    root = data_root()
    readers = {"ml-latest-small": read_movielens, "jester": read_jester}
    ml = None
    names = a.datasets.split(",") if not a.smoke else ["ml-latest-small"]
    try:
        if "explicit" in sections:
            for name in names:
                df = readers[name](root)
                if name == "ml-latest-small":
                    ml = df
                if df is not None:
                    explicit(name, df.iloc[:12_000] if a.smoke else df, a)
        if "implicit" in sections:
            if ml is None:
                ml = read_movielens(root)
            if ml is not None:
                implicit_section(ml.iloc[:12_000] if a.smoke else ml, a)
        if "synthetic" in sections:
            synthetic(a)
    finally:
        close_clusters()


if __name__ == "__main__":
    main()
