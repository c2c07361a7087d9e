"""Synchronisation and pulling: Angel's Fig. 12a / 12b experiments and clock latency.

Run: ``.venv/bin/python benchmarks/bench_sync.py [--repeat 3] [--vector 100000000]``
(``--smoke``: tiny sizes, one run each: a check that it runs, not a measurement)

A 3-worker LocalCluster (processes, 2 threads each); PS servers on workers 1-2,
the measuring task on worker 3, so every byte it pulls crosses a comm.

* **Pipelined vs naive pulling** (Fig. 12a): 10,000 rows of a 10,000 x W float32
  matrix, W = 64 and 512, each row used for a small computation (a dot product).
  *naive*: one ``get(rows=r)`` round trip per row (Angel's Algorithm 1);
  *pipelined*: ``get_iter(rows, batch=256)``, requests sent ahead and batches
  consumed as they arrive (Algorithm 2).  Target: pipelined >= 5x faster.
* **Pruned vs full pull** (Fig. 12b): a 1 x 10**8 float32 vector; the task touches
  1 % of the keys.  *full*: pull the whole vector; *pruned, keys sent*:
  ``get(cols=keys)``; *pruned, key list by tag*: ``get(cols=key_set)``, the servers
  hold the key list and the request carries only a tag.  Bytes moved are the
  array payloads of requests and replies as the servers count them
  (``bytes_in + bytes_out`` of ``ps.status(max_age=0)``'s server rows).
  Target: pruned <= 2 % of the full pull's bytes.
* **Clock round trip**: ``ctx.clock()`` with nothing to push, 1 task, and 4 tasks
  under BSP (every clock a barrier), median and 90th percentile per clock.
* **Straggler**: 4 tasks, one doing 5x the work per clock, BSP vs SSP(2); the same
  task every clock (nothing can finish before its own work is done), and a straggler
  that moves from task to task (what SSP absorbs).

Every figure is the median of ``--repeat`` runs.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from distributed import Client, LocalCluster

import daskangel as angel
from daskangel._compat import workers_info
from daskangel.psarray import PSArray


def server_bytes(ps: angel.PSContext) -> int:
    """Array bytes every server of ``ps`` has received and sent so far."""
    st = ps.status(max_age=0)
    servers = st[st["kind"] == "server"]
    return int(servers["bytes_in"].sum() + servers["bytes_out"].sum())


# -- Fig. 12a: pipelined vs naive row pulls ---------------------------------------------------


def _row_pulls(name: str, mode: str, repeat: int) -> list[float]:
    arr = PSArray(name)
    n, width = arr.shape
    rows = np.random.default_rng(0).permutation(n)
    v = np.ones(width, arr.dtype)
    times = []
    for _ in range(repeat):
        acc = 0.0
        t = time.perf_counter()
        if mode == "naive":
            for r in rows:
                acc += float(arr.get(rows=int(r)) @ v)
        else:
            for _rb, vals in arr.get_iter(rows, batch=256):
                acc += float((vals @ v).sum())
        times.append(time.perf_counter() - t)
    return times


# -- Fig. 12b: pruned vs full pull ------------------------------------------------------------


def _key_set(name: str, frac: float) -> tuple[np.ndarray, Any]:
    """The keys a task touches and their key set, registered from this process."""
    v = PSArray(name)
    n = v.shape[0]
    keys = np.sort(np.random.default_rng(1).choice(n, int(n * frac), replace=False))
    return keys, v.key_set(keys)


PULLS = ("full", "pruned, keys sent", "pruned, key list by tag")


def _pull(name: str, label: str, keys: np.ndarray, ks: Any, repeat: int) -> list[float]:
    """Seconds of each of ``repeat`` pulls of one kind."""
    v = PSArray(name)
    fn: Callable[[], Any] = {
        "full": lambda: v.get(),
        "pruned, keys sent": lambda: v.get(cols=keys),
        "pruned, key list by tag": lambda: v.get(cols=ks),
    }[label]
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        res = fn()
        times.append(time.perf_counter() - t)
        del res
    return times


# -- clock round trip and straggler ---------------------------------------------------------


def _clock_loop(ctx: Any, part: Any) -> list[float]:
    times = []
    for _ in ctx.epochs():
        t = time.perf_counter()
        ctx.clock()
        times.append(time.perf_counter() - t)
    return times


def _work(units: int, m: np.ndarray) -> None:
    x = m
    for _ in range(units):
        x = np.tanh(x @ m)


def _straggler(ctx: Any, spec: tuple[int, bool]) -> None:
    units, rotating = spec
    w = ctx.array("bench_straggler")
    m = np.random.default_rng(1).standard_normal((64, 64)) / 10
    for c in ctx.epochs():
        w.get()
        slow = (c % ctx.n_tasks if rotating else 0) == ctx.task_id
        _work(units * (5 if slow else 1), m)
        w.increment(1.0, cols=ctx.task_id)
        ctx.clock()


def table(title: str, header: list[str], rows: list[list[Any]]) -> None:
    print(f"\n### {title}\n")
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=True)]
    print(" | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)))
    print("-|-".join("-" * w for w in widths))
    for r in rows:
        print(" | ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--rows", type=int, default=10_000)
    ap.add_argument("--vector", type=int, default=10**8)
    ap.add_argument("--clocks", type=int, default=300)
    ap.add_argument("--work", type=int, default=150, help="work units per clock (fast tasks)")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, one run: a run check")
    args = ap.parse_args()
    straggler_clocks = 30
    if args.smoke:
        args.repeat, args.rows, args.vector, args.clocks, args.work = 1, 512, 10**6, 15, 2
        straggler_clocks = 3
    with (
        LocalCluster(
            n_workers=3, threads_per_worker=2, processes=True, dashboard_address=":0"
        ) as cluster,
        Client(cluster) as client,
    ):
        workers = sorted(workers_info(client))
        with angel.PSContext(client, workers=workers[:2]) as ps:
            far = [workers[2]]

            def on_far(fn: Callable[..., Any], *a: Any) -> Any:
                return client.submit(fn, *a, workers=far, pure=False).result()

            rows = []
            for width in (64, 512):
                name = f"bench_rows_{width}"
                ps.random(name, shape=(args.rows, width), seed=0)
                on_far(_row_pulls, name, "pipelined", 1)  # warm-up (numba, comms)
                naive = statistics.median(on_far(_row_pulls, name, "naive", args.repeat))
                piped = statistics.median(on_far(_row_pulls, name, "pipelined", args.repeat))
                rows.append(
                    [
                        width,
                        f"{naive:.3f}",
                        f"{piped:.3f}",
                        f"{naive / piped:.1f}x",
                        f"{args.rows / piped:,.0f}",
                    ]
                )
                ps.drop(name)
            table(
                f"Pipelined vs naive pull of {args.rows:,} rows (seconds, median of {args.repeat})",
                ["width", "naive", "pipelined", "speed-up", "pipelined rows/s"],
                rows,
            )

            ps.zeros("bench_vec", shape=(args.vector,), dtype="float32")
            before = server_bytes(ps)
            # registered from the far worker's process, which then pulls by its tag
            keys, ks = on_far(_key_set, "bench_vec", 0.01)
            registration = server_bytes(ps) - before
            res = {}
            for label in PULLS:
                before = server_bytes(ps)
                times = on_far(_pull, "bench_vec", label, keys, ks, args.repeat)
                res[label] = (statistics.median(times), (server_bytes(ps) - before) // args.repeat)
            full_t, full_b = res["full"]
            rows = [
                [label, f"{t:.3f}", f"{b:,}", f"{100 * b / full_b:.2f} %", f"{full_t / t:.1f}x"]
                for label, (t, b) in res.items()
            ]
            table(
                f"Pull of 1 % of a 1 x {args.vector:,} float32 vector (median of {args.repeat}); "
                f"key list registration, once: {registration:,} bytes",
                ["pull", "seconds", "bytes moved", "of full", "speed-up"],
                rows,
            )
            ps.drop("bench_vec")

            rows = []
            for n, sync in ((1, angel.ASP()), (4, angel.BSP())):
                runs = [
                    angel.train(
                        ps,
                        _clock_loop,
                        None,
                        groups=n,
                        sync=sync,
                        epochs=args.clocks,
                        progress=False,
                        workers=far,
                    )
                    for _ in range(args.repeat)
                ]
                per = np.concatenate([np.asarray(x[10:]) for r in runs for x in r.results])
                rows.append(
                    [
                        f"{n} task(s), {sync!r}",
                        f"{1e3 * np.median(per):.2f}",
                        f"{1e3 * np.percentile(per, 90):.2f}",
                    ]
                )
            table("Clock round trip (ms per ctx.clock())", ["job", "median", "p90"], rows)

            ps.zeros("bench_straggler", shape=(4,), dtype="float64")
            angel.train(ps, _straggler, [(1, True)] * 4, epochs=2, progress=False)  # warm-up
            rows = []
            for rotating in (False, True):
                walls = {}
                for sync in (angel.BSP(), angel.SSP(staleness=2)):
                    runs = [
                        angel.train(
                            ps,
                            _straggler,
                            [(args.work, rotating)] * 4,
                            sync=sync,
                            epochs=straggler_clocks,
                            progress=False,
                        ).wall_time
                        for _ in range(args.repeat)
                    ]
                    walls[repr(sync)] = statistics.median(runs)
                bsp, ssp = walls["BSP()"], walls["SSP(staleness=2)"]
                who = "task c % 4 at clock c" if rotating else "task 0 at every clock"
                rows.append([who, f"{bsp:.2f}", f"{ssp:.2f}", f"{bsp / ssp:.2f}x"])
            table(
                f"4 tasks, one doing 5x the work per clock, {straggler_clocks} clocks "
                "(wall seconds)",
                ["straggler", "BSP", "SSP(2)", "BSP / SSP(2)"],
                rows,
            )


if __name__ == "__main__":
    main()
