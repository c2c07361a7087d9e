"""Factorization machines side by side with logistic regression and a single-process numba FM.

Run::

    python benchmarks/bench_fm.py                      # census, a9a, planted, criteo-shaped
    python benchmarks/bench_fm.py --sections census,planted
    python benchmarks/bench_fm.py --sections planted --planted-sets ffm-shaped --no-ffm
    python benchmarks/bench_fm.py --sections criteo --rows 10000000
    python benchmarks/bench_fm.py --smoke              # a run check: every section, tiny
                                                       # (census's first rows when it is there)

Data from ``../shared/data`` (``$DASKANGEL_DATA`` elsewhere); a missing set is
skipped with a printed line.  Nothing is downloaded and nothing is written.

Sections (issue 19):

* **census**: Angel's ``census_148d_train.libsvm`` (22,792 rows) and
  ``census_148d_test.dummy`` (9,769 rows), 148 one-hot features (loaded as
  ``bench_gbdt`` loads them, ``_gbdtdata.load_real``).
* **a9a**: LIBSVM ``a9a`` / ``a9a.t`` (123 features).
* **planted**: the Criteo-shaped generator (``_criteogen.py``) at
  ``--planted-rows`` rows, cardinalities up to 128, with pairwise interactions a
  linear model cannot see, twice: FM-shaped (every pair of 6 seeded fields
  through each feature's one latent vector) and FFM-shaped (8 seeded field
  pairs out of 741); test: 25 % more rows of the same law.  On the FFM-shaped
  set also an FM with ``--wide`` factors (32): the planted pairs are rank-4
  products of one vector per feature, but an FM adds ``<v_i, v_j>`` for *every*
  pair of fields, so keeping 8 pairs apart from the other 733 takes about 4
  factors per group of pairs, more than ``n_factors=8`` has.
* **criteo**: the Criteo-shaped set at ``--rows`` rows (default 10 M) x 39
  fields, ~1 M features with power-law frequencies and planted pairs, generated
  with a seed (never written), the workers generating their own chunks.  Seconds
  of one epoch of daskangel's FM (``'ma-sgd'``, 2 workers, no validation split,
  the second epoch: the rows are prepared on the workers by then) against one
  epoch of the numba FM doing the same updates (the same compiled ``local_sgd``
  kernel, per-row SGD, visited in ``_core.epoch_order``'s blocks as daskangel's
  tasks visit theirs): its rows/s on the first ``--yard-rows`` rows (2 M),
  timed once before and once after daskangel's epochs (the shared cores' load
  moves; the median), times ``--rows``.  Test AUC / log-loss of daskangel's FM
  on 200,000 held-out rows, rows/s, peak RSS of the driver and of each worker.

Contenders on census, a9a and planted: scikit-learn
``LogisticRegression(liblinear, C=1)``; daskangel ``LogisticRegression()``
(defaults; not in ``--smoke``); daskangel ``FMClassifier(n_factors=8)`` (every other parameter
its default: MA-SGD, ``learning_rate=0.02`` decaying as ``1 / sqrt(1 + epoch)``,
every row trains, 10 epochs at most); ``FFMClassifier(n_factors=4)`` with the
data's fields when daskangel has it; the single-process numba FM (per-row SGD
at ``--lr``, ``--epochs`` passes, the L2 strengths of FMClassifier's defaults).

Targets: census test AUC >= 0.917 and log-loss <= 0.305 with the defaults;
planted: FM's test AUC >= scikit-learn LR's + 0.02; criteo: a daskangel epoch
<= 0.6x the numba FM's.  A 2-worker LocalCluster (processes, 1 thread each).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import peak_rss_gib
from _criteogen import Spec, make_chunk
from _data import data_root, have
from _gbdtdata import load_real

Result = tuple[float, float, float]  # test AUC, test log-loss, fit seconds


def scores(y: np.ndarray, p: np.ndarray) -> tuple[float, float]:
    from sklearn.metrics import log_loss, roc_auc_score

    p = np.clip(np.asarray(p, np.float64), 1e-15, 1 - 1e-15)
    return float(roc_auc_score(y, p)), float(log_loss(y, p))


# -- the single-process numba FM ------------------------------------------------------------


def numba_fm(
    X: sp.csr_matrix, y: np.ndarray, k: int, lr: float, epochs: int, seed: int,
    reg: tuple[float, float] = (1e-5, 1e-4),
) -> tuple[np.ndarray, list[float]]:  # fmt: skip
    """``epochs`` passes of per-row SGD with daskangel's MA-SGD kernel; (model, epoch seconds)."""
    from daskangel.models._core import epoch_order
    from daskangel.models.fm._kernels import LOGISTIC, local_sgd

    rng = np.random.default_rng(seed)
    W = rng.normal(scale=0.01, size=(X.shape[1] + 1, 1 + k))
    X = sp.csr_matrix(X)
    X.sort_indices()
    yy = 2.0 * np.asarray(y, np.float64) - 1.0
    none = np.zeros(0, np.int32)
    times = []
    for e in range(epochs):
        order = epoch_order(X.shape[0], [seed, e])
        t = time.perf_counter()
        local_sgd(X.indptr, X.indices, X.data, yy, order, W, none, 0, LOGISTIC, lr, reg[0],
                  reg[1], 1)  # fmt: skip
        times.append(time.perf_counter() - t)
    return W, times


def fm_proba(W: np.ndarray, X: sp.csr_matrix) -> np.ndarray:
    from daskangel.models.fm._predict import local_margins

    return 1.0 / (1.0 + np.exp(-local_margins(X, W, None)))


# -- contenders on one train / test split --------------------------------------------------


def contenders(
    Xtr: Any,
    ytr: np.ndarray,
    Xte: Any,
    yte: np.ndarray,
    a: Any,
    fields: np.ndarray | None,
    wide: int = 0,
) -> dict[str, Result]:
    """``{name: (auc, logloss, fit seconds)}`` of every contender (``wide``: also an FM
    with that many factors)."""
    from sklearn.linear_model import LogisticRegression as SkLR

    from daskangel import models

    small = {"max_iter": 2} if a.smoke else {}
    out: dict[str, Result] = {}
    t = time.perf_counter()
    sk = SkLR(solver="liblinear", C=1.0).fit(Xtr, ytr)
    out["scikit-learn LR"] = (*scores(yte, sk.predict_proba(Xte)[:, 1]), time.perf_counter() - t)
    if not a.smoke:  # (a smoke run keeps to the FM code)
        t = time.perf_counter()
        lr = models.LogisticRegression().fit(Xtr, ytr)
        out["daskangel LR"] = (*scores(yte, lr.predict_proba(Xte)[:, 1]), time.perf_counter() - t)
        lr.close()
    t = time.perf_counter()
    fm = models.FMClassifier(n_factors=8, **small).fit(Xtr, ytr)  # type: ignore[arg-type]
    out["daskangel FM"] = (*scores(yte, fm.predict_proba(Xte)[:, 1]), time.perf_counter() - t)
    print(f"    FM: {fm.n_iter_} epochs; history val_auc "
          f"{[round(v, 4) for v in fm.history_.get('val_auc', [])]}", flush=True)  # fmt: skip
    fm.close()
    if wide and not a.smoke:
        t = time.perf_counter()
        fm = models.FMClassifier(n_factors=wide).fit(Xtr, ytr)
        out[f"daskangel FM (k={wide})"] = (
            *scores(yte, fm.predict_proba(Xte)[:, 1]), time.perf_counter() - t
        )  # fmt: skip
        fm.close()
    ffm_cls = getattr(models, "FFMClassifier", None)
    if ffm_cls is not None and fields is not None and not a.no_ffm:
        t = time.perf_counter()
        ffm = ffm_cls(n_factors=4, fields=fields, **small).fit(Xtr, ytr)
        out["daskangel FFM"] = (
            *scores(yte, ffm.predict_proba(Xte)[:, 1]), time.perf_counter() - t
        )  # fmt: skip
        print(f"    FFM: {ffm.n_iter_} epochs", flush=True)
        ffm.close()
    t = time.perf_counter()
    W, _ = numba_fm(Xtr, ytr, 8, a.lr, a.epochs, 0)
    out["numba FM (1 process)"] = (*scores(yte, fm_proba(W, Xte)), time.perf_counter() - t)
    return out


def table(rows: dict[str, Result]) -> None:
    print("    | model | test AUC | test log-loss | fit s |")
    print("    | --- | --- | --- | --- |")
    for name, (auc, ll, s) in rows.items():
        print(f"    | {name} | {auc:.4f} | {ll:.4f} | {s:.1f} |", flush=True)


def one_field_per_position(X: sp.csr_matrix) -> np.ndarray:
    """A feature's field for one-hot rows with one feature per field: the position it
    takes most often in its (sorted) rows."""
    X = sp.csr_matrix(X)
    X.sort_indices()
    pos = np.arange(X.nnz) - np.repeat(X.indptr[:-1], np.diff(X.indptr))
    counts = sp.csr_matrix(
        (np.ones(X.nnz), (X.indices, pos)), shape=(X.shape[1], int(pos.max(initial=0)) + 1)
    )
    return np.asarray(counts.argmax(axis=1)).ravel().astype(np.int32)


# -- sections -------------------------------------------------------------------------------


def real(name: str, a: Any) -> bool:
    """Run the section of a real data set; False when the set is absent or not run."""
    p = load_real(name, a.data, have)
    if p is None:
        print(f"{name}: skipped (data set absent)")
        return False
    Xtr, ytr, Xte, yte = p.Xtr, p.ytr.astype(np.int64), p.Xte, p.yte.astype(np.int64)
    if a.smoke and name != "census":  # census is the smoke run's real set
        print(f"{name}: found, not run in --smoke")
        return False
    if a.smoke:  # a run check: 2,000 training rows, 1,000 test rows
        Xtr, ytr, Xte, yte = Xtr[:2000], ytr[:2000], Xte[:1000], yte[:1000]
    print(f"{name}: {Xtr.shape[0]:,} train / {Xte.shape[0]:,} test rows x {Xtr.shape[1]} "
          f"features", flush=True)  # fmt: skip
    res = contenders(Xtr, ytr, Xte, yte, a, one_field_per_position(sp.vstack([Xtr, Xte])))
    table(res)
    if name == "census":
        auc, ll, _ = res["daskangel FM"]
        ok = auc >= 0.917 and ll <= 0.305
        print(f"    census target (AUC >= 0.917, log-loss <= 0.305): FM {auc:.4f} / {ll:.4f} "
              f"-> {'met' if ok else 'MISSED'}", flush=True)  # fmt: skip
    return True


def planted(a: Any) -> None:
    n = a.planted_rows
    sets = {  # FM-shaped: every pair of 6 fields; FFM-shaped: 8 field pairs out of 741
        "FM-shaped (all pairs of 6 fields)": (Spec(max_card=128, seed=3, interacting=6), 0),
        "FFM-shaped (8 of the 741 field pairs)": (Spec(max_card=128, seed=3), a.wide),
    }
    if a.smoke:  # a run check of the section: the FM-shaped set only
        sets = dict(list(sets.items())[:1])
    else:
        sets = {
            k: v for k, v in sets.items() if k.split(" ")[0].lower() in a.planted_sets.split(",")
        }
    for what, (g, wide) in sets.items():
        X, y = make_chunk(0, n, g)
        Xt, yt = make_chunk(10**8, n // 4, g)
        X, Xt = X.astype(np.float64), Xt.astype(np.float64)
        print(f"planted, {what}: {n:,} train / {n // 4:,} test rows x {g.n_fields} fields, "
              f"{g.n_features:,} features, {len(g.pairs())} interacting field pairs",
              flush=True)  # fmt: skip
        res = contenders(X, y.astype(np.int64), Xt, yt.astype(np.int64), a, g.fields(), wide)
        table(res)
        for name in [n for n in res if n.startswith("daskangel FM")]:
            gain = res[name][0] - res["scikit-learn LR"][0]
            print(f"    {name[10:]} - scikit-learn LR test AUC: {gain:+.4f} (target >= +0.02)",
                  flush=True)  # fmt: skip
        if "daskangel FFM" in res:
            gain = res["daskangel FFM"][0] - res["scikit-learn LR"][0]
            print(f"    FFM - scikit-learn LR test AUC: {gain:+.4f}", flush=True)


def criteo(a: Any, client: Any) -> None:
    import dask
    import dask.array as da

    import daskangel as angel
    from daskangel import models

    g = Spec(max_card=2**10 if a.smoke else 2**18)
    rows = a.rows
    test = min(200_000, max(rows // 10, 1000))
    print(f"criteo-shaped: {rows:,} rows x {g.n_fields} fields, {g.n_features:,} features, "
          f"k = 8", flush=True)  # fmt: skip
    # the single-process yardstick: one epoch over a --yard-rows slice, timed before and
    # after daskangel's epochs (the cores are shared and the load moves), scaled to rows
    t = time.perf_counter()
    yard = min(a.yard_rows, rows)
    Xy, yy = make_chunk(0, yard, g)
    print(f"  generated {yard:,} rows on the driver in {time.perf_counter() - t:.1f} s", flush=True)
    numba_fm(Xy[:1000], yy[:1000], 8, a.lr, 1, 0)  # compiles
    rates = [yard / numba_fm(Xy, yy, 8, a.lr, 1, 0)[1][0]]
    Xt, yt = make_chunk(10**9, test, g)
    # daskangel: the workers generate their chunks, two partitions
    per = -(-rows // 8)
    xs, ys = [], []
    meta = sp.csr_matrix((0, g.n_features), dtype=np.float32)
    for r0 in range(0, rows, per):
        n = min(per, rows - r0)
        d = dask.delayed(make_chunk, nout=2, pure=True)(r0, n, g)
        xs.append(da.from_delayed(d[0], (n, g.n_features), dtype=np.float32, meta=meta))
        ys.append(da.from_delayed(d[1], (n,), dtype=np.float32))
    t = time.perf_counter()
    ds = angel.data.from_array(da.concatenate(xs), da.concatenate(ys), n_features=g.n_features)
    ds = ds.persist(client, n_partitions=2)
    print(f"  daskangel: generated and loaded on the workers in {time.perf_counter() - t:.1f} s",
          flush=True)  # fmt: skip
    fm = models.FMClassifier(
        solver="ma-sgd", learning_rate=a.lr, power_t=0.0, max_iter=1, validation_fraction=0.0,
        early_stopping=False,
    )  # fmt: skip
    t = time.perf_counter()
    fm.fit(ds)
    first = time.perf_counter() - t
    t = time.perf_counter()
    fm.partial_fit(ds)  # the second epoch: the prepared rows are cached on the workers
    epoch = time.perf_counter() - t
    auc2, ll2 = scores(yt, fm.predict_proba(Xt)[:, 1])
    rates.append(yard / numba_fm(Xy, yy, 8, a.lr, 1, 0)[1][0])
    one = rows / statistics.median(rates)
    print(f"  numba FM (1 process): {', '.join(f'{r:,.0f}' for r in rates)} rows/s (before, "
          f"after), an epoch of {rows:,} rows {one:.1f} s; driver peak RSS "
          f"{peak_rss_gib():.2f} GiB", flush=True)  # fmt: skip
    for i, r in enumerate(fm.train_result_.results):
        print(f"    task {i}: " + ", ".join(f"{k} {v:.2f}" for k, v in r["timings"].items()))
    rss = client.run(peak_rss_gib)
    print(f"  daskangel FM (2 workers): first epoch {first:.1f} s (with preparing the rows), "
          f"second epoch {epoch:.1f} s, {rows / epoch:,.0f} rows/s, test AUC after 2 epochs "
          f"{auc2:.4f} log-loss {ll2:.4f}", flush=True)  # fmt: skip
    print("  peak RSS per worker: " + ", ".join(f"{v:.2f} GiB" for v in rss.values()))
    print(f"  epoch ratio daskangel (2 workers) / numba FM (1 process): {epoch / one:.2f} "
          f"(target <= 0.6)", flush=True)  # fmt: skip
    fm.close()
    ds.release()


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--sections", default="census,a9a,planted,criteo")
    ap.add_argument("--data", type=Path, default=data_root())
    ap.add_argument("--rows", type=int, default=10_000_000, help="criteo-shaped rows")
    ap.add_argument("--yard-rows", type=int, default=2_000_000, help="numba FM timing rows")
    ap.add_argument("--planted-rows", type=int, default=200_000, help="planted training rows")
    ap.add_argument("--lr", type=float, default=0.01, help="numba FM / ma-sgd step")
    ap.add_argument("--epochs", type=int, default=10, help="numba FM passes (quality)")
    ap.add_argument(
        "--wide",
        type=int,
        default=32,
        help="factors of a second FM on the FFM-shaped planted set (0: none)",
    )
    ap.add_argument(
        "--planted-sets",
        default="fm-shaped,ffm-shaped",
        help="planted sets to run: fm-shaped, ffm-shaped",
    )
    ap.add_argument("--no-ffm", action="store_true", help="leave FFMClassifier out")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: a run check")
    a = ap.parse_args()
    if a.smoke:
        a.rows, a.yard_rows, a.epochs, a.planted_rows = 4_000, 4_000, 2, 1_500
    sections = set(a.sections.split(","))
    print(f"load average {os.getloadavg()[0]:.2f} (2 cores), "
          f"{time.strftime('%Y-%m-%dT%H:%MZ', time.gmtime())}", flush=True)  # fmt: skip
    from distributed import Client, LocalCluster

    with (
        LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0") as cl,
        Client(cl) as client,
    ):
        # (--smoke: every section, tiny; census's first rows when the set is there)
        for name in ("census", "a9a"):
            if name in sections:
                real(name, a)
        if "planted" in sections:
            planted(a)
        if "criteo" in sections:
            criteo(a, client)
    print(f"load average {os.getloadavg()[0]:.2f} at the end", flush=True)


if __name__ == "__main__":
    main()
