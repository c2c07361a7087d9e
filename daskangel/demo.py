"""``make demo``: train a CTR model on a LocalCluster and print its metrics per epoch.

Run with ``python -m daskangel.demo [--rows 1000000] [--features 1000000]
[--epochs 4] [--workers 2] [--keep-open]``.  It starts a ``LocalCluster`` (the
one place besides the CLI where daskangel starts a cluster), prints the
dashboard addresses, generates a CTR-like sparse set on the workers
(:func:`daskangel.data.make_ctr`: power-law feature frequencies, a planted
sparse model, deterministic from the seed), trains a logistic regression with
model-averaging SGD (``solver='ma-sgd'``) on the parameter servers, and prints
the validation AUC and log-loss after every epoch next to those of the planted
model, then a short tour of the raw PS operations.

Example
-------
>>> from daskangel import demo
>>> figures = demo.run(n_rows=20_000, n_features=2**14, epochs=1)  # doctest: +SKIP
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from distributed import Client, LocalCluster

import daskangel as angel
from daskangel.data import CTRSpec, ctr_chunk, ctr_coef

__all__ = ["run"]


def _planted_metrics(spec: CTRSpec) -> tuple[float, float]:
    """AUC and log-loss of the planted model on the first chunk (the best any model can do)."""
    from sklearn.metrics import log_loss, roc_auc_score

    X, y = ctr_chunk(spec, 0)
    coef, intercept = ctr_coef(spec.n_features, seed=spec.seed, informative=spec.informative)
    p = 1.0 / (1.0 + np.exp(-(X @ coef + intercept)))
    return float(roc_auc_score(y, p)), float(log_loss(y, p))


def _ps_tour(ps: angel.PSContext, figures: dict[str, float]) -> None:
    """Raw PS operations: batched row pull/push, a sparse vector of 2**40 keys."""
    rng = np.random.default_rng(0)
    W = ps.random("demo.W", shape=(200_000, 64), seed=0, dist="normal", scale=0.01)
    W.get(rows=rng.integers(0, 200_000, 1000))
    t = time.perf_counter()
    for _ in range(20):
        W.get(rows=rng.integers(0, 200_000, 1000))
    figures["rows_per_s"] = 20_000 / (time.perf_counter() - t)
    grad = np.full((1000, 64), 0.5, dtype="float32")
    W.increment(grad, rows=rng.integers(0, 200_000, 1000))  # warm-up, not timed
    t = time.perf_counter()
    for _ in range(20):
        W.increment(grad, rows=rng.integers(0, 200_000, 1000))
    figures["pushed_rows_per_s"] = 20_000 / (time.perf_counter() - t)
    w = ps.zeros("demo.w", shape=(2**40,), sparse=True)
    keys = rng.integers(0, 2**40, 1_000_000)
    ones = np.ones(keys.size, "float32")
    # the first push creates the keys on the servers (and compiles the kernels):
    # a one-off cost, shown apart; the rate is the median of warm pushes, as the
    # benchmark (bench_ps.py) measures it
    t = time.perf_counter()
    w.increment(ones, cols=keys)
    figures["sparse_first_push_s"] = time.perf_counter() - t
    times = []
    for _ in range(3):
        t = time.perf_counter()
        w.increment(ones, cols=keys)
        times.append(time.perf_counter() - t)
    figures["sparse_keys_per_s"] = keys.size / float(np.median(times))
    figures["sparse_bytes_per_key"] = w.nbytes / np.unique(keys).size
    W.get(rows=7)  # warm-up, not timed
    t = time.perf_counter()
    for _ in range(200):
        W.get(rows=7)
    figures["small_get_us"] = (time.perf_counter() - t) / 200 * 1e6
    print("\nPS operations, warm (a 200,000 x 64 dense matrix and a sparse vector of 2**40 keys):")
    print(f"  batched row pull (1,000 x 64)   {figures['rows_per_s']:>14,.0f} rows/s")
    print(f"  batched row push (1,000 x 64)   {figures['pushed_rows_per_s']:>14,.0f} rows/s")
    print(f"  sparse push, 1 M keys of 2**40  {figures['sparse_keys_per_s']:>14,.0f} keys/s")
    print(
        f"    (the first push, creating the keys: {figures['sparse_first_push_s']:.2f} s, "
        "once per array)"
    )
    print(f"  sparse storage                  {figures['sparse_bytes_per_key']:>14.1f} bytes/key")
    print(f"  small get (one row of 64)       {figures['small_get_us']:>14,.0f} us")
    ps.drop("demo.W")
    ps.drop("demo.w")


def run(
    n_workers: int = 2,
    *,
    n_rows: int = 1_000_000,
    n_features: int = 1_000_000,
    epochs: int = 4,
    seed: int = 0,
    keep_open: bool = False,
) -> dict[str, float]:
    """Run the demo; return the figures it printed (``epoch<i>_auc`` ... and PS rates)."""
    figures: dict[str, float] = {}
    with (
        LocalCluster(n_workers=n_workers, threads_per_worker=1, dashboard_address=":0") as cluster,
        Client(cluster) as client,
    ):
        print(f"daskangel {angel.__version__} on a LocalCluster of {n_workers} workers")
        print(f"dashboard: {client.dashboard_link}")
        base = client.dashboard_link.rsplit("/", 1)[0]
        print(f"parameter-server page: {base}/daskangel")
        with angel.PSContext(client) as ps:
            spec = CTRSpec(n_rows, n_features, seed=seed)
            t = time.perf_counter()
            X, y = angel.data.make_ctr(n_rows, n_features, seed=seed, chunk_rows=spec.chunk_rows)
            ds = angel.data.from_array(X, y).persist(client, n_partitions=n_workers)
            figures["generate_s"] = time.perf_counter() - t
            print(
                f"\nCTR-like data: {ds.n_rows:,} rows x {ds.n_features:,} features, "
                f"{ds.nnz:,} non-zeros (power-law ids, planted sparse model), "
                f"generated on the workers in {figures['generate_s']:.1f} s"
            )
            auc, ll = _planted_metrics(spec)
            figures["planted_auc"], figures["planted_logloss"] = auc, ll
            clf = angel.models.LogisticRegression(
                solver="ma-sgd", ps=ps, max_iter=1, learning_rate=0.1, alpha=1e-6,
                validation_fraction=0.1, progress=False,
            )  # fmt: skip
            print(
                f"\nLogisticRegression(solver='ma-sgd') on {len(ps.servers)} PS servers, "
                f"{n_workers} tasks; validation = 10 % of each partition"
            )
            print(
                f"{'epoch':>5}  {'seconds':>7}  {'train loss':>10}  {'val loss':>8}  {'val AUC':>7}"
            )
            for e in range(1, epochs + 1):
                t = time.perf_counter()
                clf.partial_fit(ds, classes=[0.0, 1.0])
                dt = time.perf_counter() - t
                row = clf.history_.iloc[-1]
                figures[f"epoch{e}_auc"] = float(row["val_auc"])
                figures[f"epoch{e}_logloss"] = float(row["val_logloss"])
                print(
                    f"{e:>5}  {dt:>7.1f}  {row['train_loss']:>10.4f}  "
                    f"{row['val_logloss']:>8.4f}  {row['val_auc']:>7.4f}"
                )
            print(
                f"{'plant':>5}  {'':>7}  {'':>10}  {ll:>8.4f}  {auc:>7.4f}   <- the planted model"
            )
            _ps_tour(ps, figures)
            clf.close()
            ds.release()
            if keep_open:
                input(f"\nDashboard at {client.dashboard_link}; press Enter to stop ")
    return figures


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m daskangel.demo", description=__doc__.split("\n")[0])
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--features", type=int, default=1_000_000)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--keep-open", action="store_true", help="wait for Enter before stopping")
    a = p.parse_args(argv)
    run(a.workers, n_rows=a.rows, n_features=a.features, epochs=a.epochs, seed=a.seed,
        keep_open=a.keep_open)  # fmt: skip


if __name__ == "__main__":
    main()
