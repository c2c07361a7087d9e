"""Elastic PS (issue 20): how fast blocks move, and how fast a lost context is rebuilt.

Run: ``.venv/bin/python benchmarks/bench_elastic.py [--mib 256] [--repeat 3]``
(``--smoke``: 4 MiB, one run: a run check)

On a 3-worker LocalCluster (processes, one thread each), side by side in one run:

* **raw Dask transfer**: a task on worker B takes a numpy array of a third of
  ``--mib`` MiB (what one of 3 servers holds) held on worker A as its argument
  (Dask's own worker-to-worker ``gather_dep``), timed from submission to result
  (minus the same task on a tiny array);
* **hand-off**: a ``--mib`` MiB dense PS array over the 3 servers; every block of
  worker A (a third) moves to the other two servers (``daskangel_handoff``: freeze, copy worker to worker,
  switch routing), what ``client.retire_workers`` does before it retires A;
* **rebalance**: A's servers serve again and ``ps.rebalance()`` moves a third of
  the blocks back onto it;
* **rebuild**: a context whose only server is worker A, with a snapshot: A is
  killed (``os._exit``) and the time from the kill to a read served again (the
  blocks restored on the other workers from the snapshot) is taken;
* **training during a rebalance**: a BSP job (3 tasks, dense increments) timed
  alone and while a worker's blocks are handed off and rebalanced back, in turns;
* **capacity of the central services**: every worker sends ``--conc`` concurrent
  streams of clock ticks (``daskangel_clock_tick`` of an ASP job: nothing waits)
  and of registry look-ups (``daskangel_meta``) straight to the scheduler, as the
  tasks' runtime does; requests served per second, all workers together.

Medians of ``--repeat`` runs; MiB/s of the array's bytes.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
from _timing import paired_median_times, print_table
from distributed import Client, LocalCluster, wait

import daskangel as angel
from daskangel._compat import workers_info

MiB = 1 << 20


def _nbytes(x: np.ndarray) -> int:
    return int(x.nbytes)


def raw_transfer(client: Client, a: str, b: str, mib: float) -> float:
    """Seconds Dask takes to move ``mib`` MiB from worker ``a`` to a task on ``b``."""
    n = int(mib * MiB) // 8
    big = client.submit(np.ones, n, workers=[a], pure=False)
    tiny = client.submit(np.ones, 1, workers=[a], pure=False)
    wait([big, tiny])

    def move(f: Any) -> float:
        t = time.perf_counter()
        client.submit(_nbytes, f, workers=[b], pure=False).result()
        return time.perf_counter() - t

    took = move(big) - move(tiny)
    del big, tiny
    return max(took, 1e-6)


async def _handoff(worker: str, dask_scheduler: Any = None) -> dict[str, Any]:
    return dict(await dask_scheduler.plugins["daskangel"].handoff.handoff([worker]))


def _readmit(worker: str, dask_scheduler: Any = None) -> None:
    dask_scheduler.plugins["daskangel"].handoff.readmit([worker])


def moves(client: Client, a: str, mib: float) -> tuple[float, int, float, int]:
    """Seconds and bytes of a hand-off of ``a``'s blocks, then of the rebalance back."""
    with angel.PSContext(client) as ps:
        rows = max(6, int(mib * MiB) // (4 * 1024))
        ps.random("W", (rows, 1024), seed=0, block_shape=(max(1, rows // 12), 1024))
        out = client.run_on_scheduler(_handoff, a)
        client.run_on_scheduler(_readmit, a)
        back = ps.rebalance()
        return float(out["seconds"]), int(out["bytes"]), float(back["seconds"]), int(back["bytes"])


async def _exit_soon() -> None:
    os._exit(1)


def rebuild(client: Client, a: str, mib: float, root: Path) -> float:
    """Seconds from killing the only server of a context to a read served again."""
    with angel.PSContext(client, workers=[a], snapshot=str(root / "rebuild")) as ps:
        rows = max(4, int(mib * MiB) // (4 * 1024))
        W = ps.random("W", (rows, 1024), seed=1, block_shape=(max(1, rows // 4), 1024))
        want = W.get(rows=[0])
        ps.snapshot()
        t = time.perf_counter()
        client.run(_exit_soon, workers=[a], wait=False)
        got = W.get(rows=[0])  # waits for the rebuild, then reads
        took = time.perf_counter() - t
        assert np.array_equal(got, want)
        shutil.rmtree(root / "rebuild", ignore_errors=True)
        return took


def _step(ctx: Any, part: Any) -> None:
    W = ctx.array("M")
    delta = np.ones((W.shape[0] // 3, W.shape[1]), "float32")
    lo = ctx.task_id * delta.shape[0]
    for _ in ctx.epochs():
        W.increment(delta, rows=slice(lo, lo + delta.shape[0]))
        ctx.clock()


def training(client: Client, a: str, clocks: int, rows: int, repeat: int) -> dict[str, float]:
    """Wall seconds of a BSP job alone and while ``a``'s blocks move out and back."""

    def job(moving: bool) -> None:
        with angel.PSContext(client) as ps:
            ps.zeros("M", (rows, 1024), block_shape=(max(1, rows // 12), 1024))
            mover = None
            if moving:

                def churn() -> None:
                    client.run_on_scheduler(_handoff, a)
                    client.run_on_scheduler(_readmit, a)
                    ps.rebalance()

                mover = threading.Thread(target=churn)
                mover.start()
            angel.train(ps, _step, [None] * 3, epochs=clocks, progress=False)
            if mover is not None:
                mover.join()

    return paired_median_times(
        {"alone": lambda: job(False), "rebalancing": lambda: job(True)}, repeat
    )


async def _hammer(
    op: str, n: int, conc: int, job: str, firsts: dict[str, int], dask_worker: Any = None
) -> float:
    """On a worker: ``conc`` coroutines each sending ``n`` requests ``op`` to the
    scheduler (ticks of tasks ``firsts[this worker] + k``); the seconds all took."""
    import asyncio

    rpc = dask_worker.scheduler
    first = firsts[dask_worker.address]

    async def stream(k: int) -> None:
        for i in range(n):
            if op == "tick":
                await rpc.daskangel_clock_tick(job=job, task=first + k, clock=i)
            else:
                await rpc.daskangel_meta(name="C")

    t = time.perf_counter()
    await asyncio.gather(*(stream(k) for k in range(conc)))
    return time.perf_counter() - t


def capacity(client: Client, n: int, conc: int) -> dict[str, float]:
    """Requests per second the scheduler plugin serves: ``{"tick", "meta"}``."""
    workers = sorted(workers_info(client))
    firsts = {w: i * conc for i, w in enumerate(workers)}
    tasks = len(workers) * conc
    sched: Any = client.scheduler
    out = {}
    with angel.PSContext(client) as ps:
        ps.zeros("C", (10,))
        for op in ("tick", "meta"):
            job = f"capacity-{op}-{time.time_ns()}"
            client.sync(
                sched.daskangel_job_register,
                job=job,
                n_tasks=tasks,
                groups=list(range(tasks)),
                staleness=None,  # ASP: no tick waits for another
                ctx=ps.id,
            )
            walls = client.run(_hammer, op, n, conc, job, firsts)
            out[op] = tasks * n / max(walls.values())
            client.sync(sched.daskangel_job_close, job=job)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--mib", type=float, default=256.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--conc", type=int, default=16, help="request streams per worker")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, one run: a run check")
    args = ap.parse_args()
    clocks, train_rows, n_requests = 20, 3 * 4096, 2000
    if args.smoke:
        args.mib, args.repeat, clocks, train_rows, n_requests = 4.0, 1, 4, 3 * 64, 50
    root = Path(tempfile.mkdtemp(prefix="bench-elastic-"))
    rows: list[tuple[str, str, str]] = []
    try:
        with (
            LocalCluster(
                n_workers=3, threads_per_worker=1, processes=True, dashboard_address=":0"
            ) as cluster,
            Client(cluster) as client,
        ):
            a, b = sorted(workers_info(client))[:2]
            raw: list[float] = []
            hand: list[float] = []
            back: list[float] = []
            rebuilt: list[float] = []
            moved = returned = 0
            for _ in range(args.repeat):
                raw.append(raw_transfer(client, a, b, args.mib / 3))
                h, moved, r, returned = moves(client, a, args.mib)
                hand.append(h)
                back.append(r)
            mib_moved = moved / MiB
            raw_rate = args.mib / 3 / float(np.median(raw))
            hand_rate = mib_moved / float(np.median(hand))
            back_rate = returned / MiB / float(np.median(back))
            rows.append(
                (
                    f"raw Dask transfer, {args.mib / 3:,.1f} MiB worker to worker",
                    f"{raw_rate:,.0f} MiB/s",
                    "the yardstick",
                )
            )
            rows.append(
                (
                    f"hand-off of a worker's blocks ({mib_moved:,.0f} MiB to 2 servers)",
                    f"{hand_rate:,.0f} MiB/s ({np.median(hand):.2f} s)",
                    f"{hand_rate / raw_rate:.2f}x the raw transfer",
                )
            )
            rows.append(
                (
                    f"rebalance back onto it ({returned / MiB:,.0f} MiB, ps.rebalance())",
                    f"{back_rate:,.0f} MiB/s ({np.median(back):.2f} s)",
                    f"{back_rate / raw_rate:.2f}x the raw transfer",
                )
            )
            t = training(client, a, clocks, train_rows, args.repeat)
            mib_train = train_rows * 1024 * 4 / MiB
            rows.append(
                (
                    f"BSP 3 tasks x {clocks} clocks, {mib_train:,.0f} MiB matrix",
                    f"{t['rebalancing']:.2f} s with a hand-off + rebalance meanwhile",
                    f"{t['rebalancing'] / t['alone']:.2f}x of alone ({t['alone']:.2f} s)",
                )
            )
            cap = capacity(client, n_requests, args.conc)
            n_streams = 3 * args.conc
            rows.append(
                (
                    f"clock ticks served by the scheduler ({n_streams} streams, 3 workers)",
                    f"{cap['tick']:,.0f} ticks/s",
                    f"{1e6 / cap['tick']:,.0f} us of scheduler time a tick",
                )
            )
            rows.append(
                (
                    f"registry look-ups served ({n_streams} streams, 3 workers)",
                    f"{cap['meta']:,.0f} look-ups/s",
                    f"{1e6 / cap['meta']:,.0f} us of scheduler time a look-up",
                )
            )
            for i in range(args.repeat):
                victim = sorted(workers_info(client))[0]
                rebuilt.append(rebuild(client, victim, args.mib, root))
                if i + 1 < args.repeat:  # the nanny restarts it meanwhile
                    client.wait_for_workers(3, timeout=120)
            took = float(np.median(rebuilt))
            rows.append(
                (
                    f"every server lost -> reads served ({args.mib:,.0f} MiB from a snapshot)",
                    f"{took:.2f} s ({args.mib / took:,.0f} MiB/s)",
                    f"{(args.mib / took) / raw_rate:.2f}x the raw transfer rate",
                )
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print_table(("measurement", "daskangel", "comparison"), rows)


if __name__ == "__main__":
    main()
