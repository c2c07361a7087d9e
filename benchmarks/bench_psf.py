"""psf vs pull-and-NumPy: dot / sum / axpy over a 1 x 10**8 float32 vector on 2 servers.

For each operation the script times (median of ``--repeats`` runs) the psf, which
runs next to the blocks and returns only partial results, against pulling the
vector(s) to the caller and doing the same with NumPy (and, for axpy, pushing the
result back).  Bytes moved are the array payload the servers received and sent
(``bytes_in + bytes_out`` of ``ps.status(max_age=0)``'s server rows: keys, values,
partial results), counted in a separate, untimed pass.

Run::

    python benchmarks/bench_psf.py                  # 10**8 entries, 5 repeats
    python benchmarks/bench_psf.py --n 10000000 --repeats 3
    python benchmarks/bench_psf.py --smoke          # tiny: a run check, no figures

Targets (issue 4): the reductions >= 10x faster than pulling, <= 1 % of the bytes.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import numpy as np
from _timing import median_time
from distributed import Client, LocalCluster

import daskangel as angel
from daskangel import ops


def server_bytes(ps: angel.PSContext) -> int:
    """Array bytes every server of ``ps`` has received and sent so far."""
    st = ps.status(max_age=0)
    servers = st[st["kind"] == "server"]
    return int(servers["bytes_in"].sum() + servers["bytes_out"].sum())


def bytes_moved(ps: angel.PSContext, fn: Callable[[], Any]) -> int:
    """Array bytes the servers received and sent while ``fn`` ran."""
    before = server_bytes(ps)
    fn()
    return server_bytes(ps) - before


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=10**8, help="vector length (float32)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--smoke", action="store_true", help="tiny vector, one run: a run check")
    args = ap.parse_args()
    n = 100_000 if args.smoke else args.n
    repeats = 1 if args.smoke else args.repeats

    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
        ) as cluster,
        Client(cluster) as client,
        angel.PSContext(client, servers_per_worker=1) as ps,
    ):
        x = ps.random("x", (n,), seed=0, low=-1, high=1, dtype="float32")
        y = ps.zeros_like(x, "y")
        ps.psf(ops.RandomUniform(-1, 1, seed=1), y)
        servers = {b.server for b in x.blocks}
        alpha = 1e-3

        def pull_sum() -> float:
            return float(x.get().sum(dtype=np.float64))

        def pull_dot() -> float:
            return float(np.dot(x.get(), y.get()))

        def pull_axpy() -> None:
            yv = y.get()
            yv += np.float32(alpha) * x.get()
            y.set(yv)

        cases = [
            ("sum", lambda: x.psf(ops.Sum()), pull_sum),
            ("dot", lambda: ps.psf(ops.Dot(), x, y), pull_dot),
            ("axpy", lambda: ps.psf(ops.Axpy(alpha=alpha), x, y), pull_axpy),
        ]
        # the psf and the local NumPy agree before anything is timed
        assert abs(x.psf(ops.Sum()) - pull_sum()) < 1e-3 * max(1.0, abs(pull_sum()))
        assert abs(ps.psf(ops.Dot(), x, y) - pull_dot()) < 1e-3 * max(1.0, abs(pull_dot()))

        print(
            f"vector 1 x {n:,} float32 ({n * 4 / 2**20:,.0f} MiB) in {len(x.blocks)} blocks "
            f"on {len(servers)} servers; median of {repeats} runs"
        )
        head = (
            f"{'op':6} {'psf s':>9} {'pull+numpy s':>13} {'speed-up':>9} "
            f"{'psf bytes':>11} {'pull bytes':>14} {'bytes %':>8}"
        )
        print(head)
        print("-" * len(head))
        for name, psf_fn, pull_fn in cases:
            t_psf = median_time(psf_fn, repeats, warmup=1)
            t_pull = median_time(pull_fn, repeats, warmup=1)
            b_psf = bytes_moved(ps, psf_fn)
            b_pull = bytes_moved(ps, pull_fn)
            print(
                f"{name:6} {t_psf:9.4f} {t_pull:13.4f} {t_pull / t_psf:8.1f}x "
                f"{b_psf:11,} {b_pull:14,} {100 * b_psf / b_pull:7.4f}%"
            )


if __name__ == "__main__":
    main()
