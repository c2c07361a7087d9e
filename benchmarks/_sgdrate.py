"""The minibatch-path throughput of ``bench_linear.py``: ``solver='sgd'`` vs ``'ma-sgd'``.

Angel's PS-SGD pulls a minibatch's keys, computes its gradient and pushes it
to the server-side optimiser, minibatch after minibatch: latency-bound unless
each step overlaps its communication with compute.  On the same persisted
kdd2010-shaped rows (``--sgd-rows`` rows x ``--sgd-features`` features x
``--nnz-per-row``, 2 partitions on a 2-worker cluster), one epoch of
``LogisticRegression(solver=...)`` with its defaults otherwise, after a small
untimed warm-up fit of each solver (numba compiles once per worker), the three
fitted in turns whose order rotates every repeat (each first once in three).  Rows/s
count the training rows of the epoch over the training wall time
(``train_result_.wall_time``: the tasks, not the dataset or the arrays).

Target (issue 14): ``'sgd'`` with its defaults >= 0.25x the rows/s of
``'ma-sgd'``.  ``'ma-sgd'`` defaults to adaptive (per-feature AdaGrad) local
steps; ``ma-sgd plain`` (``adaptive=False``, the default before) is fitted in
the same turns as a second yardstick.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _kddgen import GenSpec, make_chunk

__all__ = ["sgd_rate"]


def _fit_rate(models: Any, ds: Any, solver: str, n_rows: int) -> tuple[float, float]:
    """Rows/s of one epoch and the validation log-loss after it."""
    extra = {"adaptive": False} if solver == "ma-sgd plain" else {}
    est = models.LogisticRegression(
        solver=solver.split()[0], max_iter=1, early_stopping=False, **extra
    )
    est.fit(ds)
    wall = est.train_result_.wall_time
    rows = n_rows * (1 - est.validation_fraction)
    ll = float(est.history_["val_logloss"].iloc[-1]) if "val_logloss" in est.history_ else 0.0
    est.close()
    return rows / wall, ll


def sgd_rate(client: Any, a: Any, repeat: int = 3, warmup: bool = True) -> dict[str, Any]:
    """``{solver: (median rows/s, val log-loss)}`` and the ratio sgd / ma-sgd."""
    import daskangel as angel
    from daskangel import models

    g = GenSpec(a.sgd_features, a.nnz_per_row, a.seed)
    if warmup:  # compile the kernels on the workers
        Xw, yw, _ = make_chunk(0, 2000, 5, 1000)
        for solver in ("sgd", "ma-sgd"):
            models.LogisticRegression(solver=solver, max_iter=1).fit(Xw, yw).close()
        models.LogisticRegression(solver="ma-sgd", adaptive=False, max_iter=1).fit(Xw, yw).close()
    X, y, _ = make_chunk(0, a.sgd_rows, g.nnz, g.n_features, spec=g)
    ds = angel.data.from_array(X, y, n_features=g.n_features).persist(client, n_partitions=2)
    out: dict[str, Any] = {}
    try:
        runs: dict[str, list[tuple[float, float]]] = {"sgd": [], "ma-sgd": [], "ma-sgd plain": []}
        names = list(runs)
        for r in range(repeat):
            # the order turns every repeat: the fit after another solver's ran ~0.1 s
            # more worker CPU (the last one's arrays and garbage still being freed),
            # and the median of 3 then drops each solver's turn in that place
            for solver in names[r % 3 :] + names[: r % 3]:
                runs[solver].append(_fit_rate(models, ds, solver, a.sgd_rows))
        for solver, rs in runs.items():
            out[solver] = (
                statistics.median(r for r, _ in rs),
                statistics.median(ll for _, ll in rs),
            )
    finally:
        ds.release()
    out["ratio"] = out["sgd"][0] / out["ma-sgd"][0]
    out["ratio plain"] = out["sgd"][0] / out["ma-sgd plain"][0]
    return out


def print_rate(res: dict[str, Any], a: Any) -> None:
    print(
        f"\n== minibatch path: one epoch of {a.sgd_rows:,} rows x {a.sgd_features:,} features, "
        "defaults (rows/s, median) =="
    )
    for solver in ("sgd", "ma-sgd", "ma-sgd plain"):
        rate, ll = res[solver]
        print(f"{solver:12} {rate:12,.0f} rows/s   val log-loss after the epoch {ll:.4f}")
    print(f"sgd / ma-sgd = {res['ratio']:.3f}x (target >= 0.25)")
    print(f"sgd / ma-sgd plain (adaptive=False) = {res['ratio plain']:.3f}x")
