"""``make demo``: start a LocalCluster, run the parameter server, print figures.

Run with ``python -m daskangel.demo [--workers 2] [--keep-open]``.  It starts a
2-worker ``LocalCluster`` (the one place besides the CLI where daskangel starts a
cluster), prints the dashboard address, creates a dense matrix and a sparse
vector of 2**40 keys on the PS servers, pushes and pulls them, and prints what
it measured.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from distributed import Client, LocalCluster

import daskangel as angel


def _rate(n: float, seconds: float, unit: str) -> str:
    return f"{n / seconds:,.0f} {unit}/s"


def run(n_workers: int = 2, keep_open: bool = False) -> dict[str, float]:
    """Run the demo; return the figures it printed."""
    figures: dict[str, float] = {}
    with (
        LocalCluster(n_workers=n_workers, threads_per_worker=1, dashboard_address=":0") as cluster,
        Client(cluster) as client,
    ):
        print(f"daskangel {angel.__version__} on a LocalCluster of {n_workers} workers")
        print(f"dashboard: {client.dashboard_link}")
        with angel.PSContext(client) as ps:
            print(f"PS servers: {', '.join(str(s) for s in ps.servers)}")
            W = ps.random("W", shape=(200_000, 64), seed=0, dist="normal", scale=0.01)
            print(W)
            rng = np.random.default_rng(0)
            rows = rng.integers(0, 200_000, 1000)
            W.get(rows=rows)
            t = time.perf_counter()
            for _ in range(20):
                W.get(rows=rng.integers(0, 200_000, 1000))
            figures["rows_per_s"] = 20_000 / (time.perf_counter() - t)
            grad = np.full((1000, 64), 0.5, dtype="float32")
            t = time.perf_counter()
            for _ in range(20):
                W.increment(grad, rows=rng.integers(0, 200_000, 1000))
            figures["pushed_rows_per_s"] = 20_000 / (time.perf_counter() - t)

            w = ps.zeros("w", shape=(2**40,), sparse=True)
            keys = rng.integers(0, 2**40, 1_000_000)
            ones = np.ones(keys.size, "float32")
            t = time.perf_counter()
            w.increment(ones, cols=keys)
            figures["sparse_keys_per_s"] = keys.size / (time.perf_counter() - t)
            check = w.get(cols=keys[:5])
            figures["sparse_bytes_per_key"] = w.nbytes / np.unique(keys).size
            t = time.perf_counter()
            for _ in range(200):
                W.get(rows=7)
            figures["small_get_us"] = (time.perf_counter() - t) / 200 * 1e6

            print()
            print(f"  batched row pull (1,000 x 64)   {figures['rows_per_s']:>14,.0f} rows/s")
            print(
                f"  batched row push (1,000 x 64)   {figures['pushed_rows_per_s']:>14,.0f} rows/s"
            )
            print(
                f"  sparse push, 1 M keys of 2**40  {figures['sparse_keys_per_s']:>14,.0f} keys/s"
            )
            print(
                f"  sparse storage                  {figures['sparse_bytes_per_key']:>14.1f} bytes/key"
            )
            print(f"  small get (one row of 64)       {figures['small_get_us']:>14,.0f} us")
            print(f"  pulled back: {check}")
            if keep_open:
                input(f"\nDashboard at {client.dashboard_link}; press Enter to stop ")
    return figures


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--keep-open", action="store_true", help="wait for Enter before stopping")
    args = ap.parse_args()
    run(args.workers, args.keep_open)


if __name__ == "__main__":
    main()
