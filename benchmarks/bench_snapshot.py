"""Snapshot write / restore throughput, and what snapshots cost training.

Run: ``.venv/bin/python benchmarks/bench_snapshot.py [--gib 1] [--repeat 3]``
(``--smoke``: a 4 MiB matrix, a 1 MiB training matrix, one run: a run check)

On a 2-worker LocalCluster (processes), one PS server per worker:

* a float32 matrix of ``--gib`` GiB, auto-partitioned over both servers:
  ``ps.snapshot()`` (each server writes its own blocks to a local zarr v3 store),
  and ``ps.load()`` of it back into the same arrays (read, crc-check, install),
  next to a plain ``zarr`` write and read of the same array, with the same chunks,
  from this one process;
* training slowdown: a BSP job of 4 tasks x 20 clocks pushing dense increments
  into a 64 MiB matrix, without snapshots and with ``snapshot_every`` = 10, 5, 2.

Medians of ``--repeat`` runs.  Writes go to a temporary directory on the local
disk (``--dir`` to choose).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import zarr
from _timing import median_time, print_table
from distributed import Client, LocalCluster

import daskangel as angel

MiB = 1 << 20


def snapshot_io(client: Client, root: Path, gib: float, repeat: int) -> list[tuple[str, str, str]]:
    rows = int(gib * 1024 * MiB / 4 / 1024)
    shape = (rows, 1024)
    nbytes = rows * 1024 * 4
    out = []
    with angel.PSContext(client, snapshot=str(root / "ckpt"), keep=1) as ps:
        W = ps.random("W", shape, seed=0)
        chunks = W.blocks[0].shape
        t_snap = median_time(ps.snapshot, repeat)
        t_load = median_time(lambda: ps.load(str(root / "ckpt")), repeat)
        del W
    local = np.random.default_rng(0).random(shape, dtype=np.float32)
    path = root / "plain.zarr"

    def plain_write() -> None:
        shutil.rmtree(path, ignore_errors=True)
        zarr.create_array(str(path), shape=shape, chunks=chunks, dtype="float32", fill_value=0)[
            :
        ] = local

    t_plain = median_time(plain_write, repeat)
    t_plain_read = median_time(lambda: zarr.open_array(str(path), mode="r")[:], repeat)
    mb = nbytes / MiB
    out.append(
        (
            f"snapshot write, {mb:,.0f} MiB, 2 servers",
            f"{mb / t_snap:,.0f} MiB/s ({t_snap:.2f} s)",
            f"plain zarr write, 1 process: {mb / t_plain:,.0f} MiB/s ({t_plain:.2f} s) -> {t_plain / t_snap:.2f}x",
        )
    )
    out.append(
        (
            f"restore (load + crc check), {mb:,.0f} MiB",
            f"{mb / t_load:,.0f} MiB/s ({t_load:.2f} s)",
            f"plain zarr read, 1 process: {mb / t_plain_read:,.0f} MiB/s ({t_plain_read:.2f} s) -> {t_plain_read / t_load:.2f}x",
        )
    )
    return out


def _step(ctx: Any, part: Any) -> None:
    W = ctx.array("M")
    delta = np.ones((1024, W.shape[1]), "float32")
    for _ in ctx.epochs():
        W.increment(delta, rows=slice(ctx.task_id * 1024, (ctx.task_id + 1) * 1024))
        ctx.clock()


def training_slowdown(
    client: Client, root: Path, repeat: int, smoke: bool = False
) -> list[tuple[str, str, str]]:
    out = []
    base = None
    width, clocks = (64, 4) if smoke else (4096, 20)
    mib = 4096 * width * 4 // MiB
    for every in (None, 2) if smoke else (None, 10, 5, 2):

        def job(every: int | None = every) -> None:
            d = tempfile.mkdtemp(dir=root)
            kw = {} if every is None else {"snapshot": d, "snapshot_every": every}
            with angel.PSContext(client, **kw) as ps:
                ps.zeros("M", (4096, width))  # 64 MiB (smoke: 1 MiB)
                angel.train(ps, _step, [None] * 4, epochs=clocks, progress=False)

        t = median_time(job, repeat)
        base = base or t
        label = "no snapshots" if every is None else f"snapshot every {every} clocks"
        out.append(
            (
                f"BSP 4 tasks x {clocks} clocks, {mib} MiB: {label}",
                f"{t:.2f} s",
                f"{t / base:.2f}x of no snapshots",
            )
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--gib", type=float, default=1.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, one run: a run check")
    args = ap.parse_args()
    if args.smoke:
        args.gib, args.repeat = 4 / 1024, 1
    root = Path(tempfile.mkdtemp(prefix="bench-snapshot-", dir=args.dir))
    try:
        with (
            LocalCluster(
                n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
            ) as cluster,
            Client(cluster) as client,
        ):
            rows = snapshot_io(client, root, args.gib, args.repeat)
            rows += training_slowdown(client, root, args.repeat, args.smoke)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print_table(("measurement", "daskangel", "comparison"), rows)


if __name__ == "__main__":
    main()
