"""The calibration section of ``bench_linear_quality.py``: a Zipf set, daskangel vs Vowpal Wabbit.

Issue 14 section 4.3: on sparse rows whose features follow a power law, early
epochs of ``ma-sgd`` were overconfident (a test log-loss worse than predicting
the base rate).  The set is seeded and generated here (:mod:`_kddgen`,
nothing read from disk):

* ``--zipf-rows`` training rows (default 1,000,000) and a fifth as many test
  rows, ``1,000,000`` features, 30 distinct binary features per row drawn with
  ``P(rank r) ~ (r + 1) ** -1.1`` (Zipf), ranks spread over the id range;
* a planted logistic model: every feature has a weight ``N(0, 0.25^2)``, no
  bias (base rate ~0.5, constant-predictor log-loss ~0.693).

Side by side, test log-loss / AUC / wall seconds:

* **daskangel defaults**: ``LogisticRegression()`` (ma-sgd with per-feature
  adaptive steps, ``adaptive='auto'``; 10 epochs, early stopping on a 10 %
  validation split), and its first epoch (``max_iter=1, early_stopping=False``,
  on the 90 % of the rows it trains on; and ``validation_fraction=0``: one pass
  over every row, as VW's): calibrated probabilities from the first epoch mean
  a log-loss below the base rate's;
* **daskangel** ``adaptive=False`` (one step size ``learning_rate / sqrt(1 +
  epoch)`` for every weight: the defaults before issue 14 section 4.3), one epoch
  and with the defaults' epochs and early stopping;
* **Vowpal Wabbit** (the ``vowpalwabbit`` package, one process, one pass,
  ``--loss_function logistic -b 22``, its default adaptive / normalised /
  invariant updates): time from the text file, parsing included, the file
  written to a temporary folder beforehand (not timed);
* the planted model's own log-loss (the best possible in expectation).

Target: daskangel's defaults reach VW's one-pass log-loss in no more time.
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from _kddgen import GenSpec, bayes_logloss, make_chunk

__all__ = ["ZIPF", "zipf_section"]

ZIPF = GenSpec(1_000_000, 30, seed=7, exponent=1.1, k0=1.0, density=1.0, scale=0.25, bias=0.0)


@dataclass
class Row:
    name: str
    logloss: float
    auc: float
    seconds: float
    note: str = ""


def _metrics(y: np.ndarray, p: np.ndarray) -> tuple[float, float]:
    from sklearn.metrics import log_loss, roc_auc_score

    p = np.clip(np.asarray(p, np.float64), 1e-15, 1 - 1e-15)
    return float(log_loss(y, p, labels=[0, 1])), float(roc_auc_score(y, p))


def _write_vw(path: Path, X: Any, y: np.ndarray) -> None:
    """VW text lines ``label | f f f`` (labels -1 / 1, binary features by index)."""
    ix = X.indices.reshape(X.shape[0], -1)
    lab = np.where(y > 0, "1 |", "-1 |")
    with open(path, "w") as fh:
        step = 100_000
        for a in range(0, ix.shape[0], step):
            body = np.char.mod("%d", ix[a : a + step]).tolist()
            heads = lab[a : a + step]
            fh.write("".join(f"{h} {' '.join(r)}\n" for h, r in zip(heads, body, strict=True)))


def run_vw(Xtr: Any, ytr: np.ndarray, Xte: Any, yte: np.ndarray, repeat: int) -> Row | None:
    try:
        import vowpalwabbit
    except ImportError:
        print("  skipped Vowpal Wabbit: vowpalwabbit is not installed (pip install '.[bench]')")
        return None
    tmp = Path(tempfile.mkdtemp(prefix="bench-vw-"))
    try:
        tr, te, model, preds = tmp / "train.vw", tmp / "test.vw", tmp / "m.vw", tmp / "p.txt"
        _write_vw(tr, Xtr, ytr)
        _write_vw(te, Xte, yte)
        times = []
        for _ in range(repeat):
            t = time.perf_counter()
            # with -d the constructor runs VW's own parser and learner over the file
            ws = vowpalwabbit.Workspace(
                f"-d {tr} --loss_function logistic -b 22 -f {model} --quiet"
            )
            ws.finish()
            times.append(time.perf_counter() - t)
        ws = vowpalwabbit.Workspace(f"-i {model} -t -d {te} -p {preds} --link logistic --quiet")
        ws.finish()
        p = np.loadtxt(preds, usecols=0)
        ll, auc = _metrics(yte, p)
        return Row("Vowpal Wabbit, 1 pass", ll, auc, statistics.median(times), "parsing included")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run_angel(ds: Any, Xte: Any, yte: np.ndarray, repeat: int, **kw: Any) -> tuple[Row, Any]:
    from daskangel import models

    times = []
    for _ in range(repeat):
        est = models.LogisticRegression(**kw)
        t = time.perf_counter()
        est.fit(ds)
        times.append(time.perf_counter() - t)
        p = est.predict_proba(Xte)[:, 1]
        hist = est.history_
        n = int(est.n_iter_)
        phases = _phases(est)
        est.close()
    ll, auc = _metrics(yte, p)
    name = "daskangel " + (", ".join(f"{k}={v}" for k, v in kw.items()) or "defaults")
    print(
        f"  {name}: {statistics.median(times):.2f} s; last fit's task seconds {phases}", flush=True
    )
    return Row(name, ll, auc, statistics.median(times), f"{n} epochs"), hist


def _phases(est: Any) -> str:
    """The slower task's seconds by phase of the last fit (``train_result_`` timings)."""
    res = getattr(est, "train_result_", None)
    tms = [r.get("timings", {}) for r in getattr(res, "results", None) or []]
    keys = ("prep", "pull", "sgd", "push", "eval", "clock")
    return " ".join(f"{k} {max(t.get(k, 0.0) for t in tms):.2f}" for k in keys) if tms else "-"


def zipf_section(client: Any, rows: int, repeat: int, smoke: bool = False) -> list[Row]:
    """Generate the set, fit each side, and return the table's rows (``smoke``: one
    two-epoch fit of daskangel)."""
    import daskangel as angel

    g = ZIPF
    n_test = max(rows // 5, 1000)
    Xtr, ytr, _ = make_chunk(0, rows, g.nnz, g.n_features, spec=g)
    Xte, yte, mte = make_chunk(rows, n_test, g.nnz, g.n_features, spec=g)
    base = float(np.mean(ytr))
    const = -float(np.mean(yte * np.log(base) + (1 - yte) * np.log(1 - base)))
    print(
        f"  zipf: {rows:,} train / {n_test:,} test rows, {g.n_features:,} features, "
        f"{g.nnz} per row; base rate {base:.3f}",
        flush=True,
    )
    out = [
        Row("constant (base rate)", const, 0.5, 0.0),
        Row("planted model", bayes_logloss(yte, mte), float("nan"), 0.0),
    ]
    ds = angel.data.from_array(Xtr, ytr, n_features=g.n_features).persist(client, n_partitions=2)
    try:
        if not smoke:  # compile the kernels on the workers (untimed)
            from daskangel import models

            for adaptive in (False, True):
                est = models.LogisticRegression(max_iter=1, adaptive=adaptive)
                est.fit(Xtr[:2000], ytr[:2000]).close()
        print("  fitting daskangel ...", flush=True)
        if not smoke:  # the first epoch of the defaults, on 90 % / all of the rows
            out.append(run_angel(ds, Xte, yte, repeat, max_iter=1, early_stopping=False)[0])
            out.append(
                run_angel(
                    ds, Xte, yte, repeat, max_iter=1, early_stopping=False,
                    validation_fraction=0.0,
                )[0]
            )  # fmt: skip
        row, hist = run_angel(ds, Xte, yte, repeat, **({"max_iter": 2} if smoke else {}))
        out.append(row)
        _print_val("defaults", hist)
        # one step size for every weight (the defaults before issue 14 section 4.3)
        if not smoke:
            out.append(
                run_angel(ds, Xte, yte, repeat, adaptive=False, max_iter=1, early_stopping=False)[0]
            )
        row, hist = run_angel(
            ds, Xte, yte, repeat, adaptive=False, **({"max_iter": 2} if smoke else {})
        )
        out.append(row)
        _print_val("adaptive=False", hist)
    finally:
        ds.release()
    print("  fitting Vowpal Wabbit ...", flush=True)
    vw = run_vw(Xtr, ytr, Xte, yte, repeat)
    if vw is not None:
        out.append(vw)
    return out


def _print_val(name: str, hist: Any) -> None:
    if "val_logloss" in hist:
        vals = ", ".join(f"{v:.4f}" for v in hist["val_logloss"])
        print(f"  daskangel {name}, validation log-loss per epoch: {vals}", flush=True)


def print_zipf(out: list[Row]) -> None:
    print(f"\n== calibration on the Zipf set (load {os.getloadavg()[0]:.2f}) ==")
    print(f"{'model':66} {'log-loss':>9} {'AUC':>7} {'seconds':>8}  note")
    for r in out:
        auc = "-" if np.isnan(r.auc) else f"{r.auc:.4f}"
        print(f"{r.name:66} {r.logloss:9.4f} {auc:>7} {r.seconds:8.2f}  {r.note}")
    vw = [r for r in out if r.name.startswith("Vowpal")]
    for name in (
        "defaults",
        "max_iter=1, early_stopping=False",
        "max_iter=1, early_stopping=False, validation_fraction=0.0",
        "adaptive=False",
    ):
        mine = [r for r in out if r.name == f"daskangel {name}"]
        if vw and mine:
            ok = mine[0].logloss <= vw[0].logloss and mine[0].seconds <= vw[0].seconds
            print(
                f"{name} vs VW: log-loss {mine[0].logloss - vw[0].logloss:+.4f}, "
                f"time {mine[0].seconds / vw[0].seconds:.2f}x -> {'met' if ok else 'not met'}"
            )
