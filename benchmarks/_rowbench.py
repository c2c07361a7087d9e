"""The row section of ``bench_ps.py``: random-row pulls and sparse row pushes from a task.

On a 3-worker LocalCluster (processes, one thread each): the PS servers live on
two workers, and every figure is measured inside one task on the third, which
holds no server, so every byte crosses a comm, as for a training task pulling
rows it does not hold.  Two shapes: LDA-like (50,000 x 1,000 int32 word-topic
counts) and MF-like (50,000 x 50 float32 item factors), auto-partitioned.

* **get**: ``PSArray.get(rows=idx)`` of 1,000 and 10,000 distinct random rows
  (unsorted), against *raw*: one bare Dask RPC per server, concurrently, each
  returning as many bytes as that server's rows (a cached array: no copy, no
  planning), and the same RPCs whose requests also carry the server's row ids
  as int32 bytes (what any random-row get must send; dropped by the handler),
  and the same get on Dask's comms (``daskangel.client.lean-wire`` off: what
  daskangel's lean wire, :mod:`daskangel._lean`, gains on the same calls);
* **floor**: the raw RPC followed by the two copies a random-row get cannot
  avoid, done with numpy on the same bytes in the task (the largest server
  share gathered into a reused buffer, then all rows put back into request order
  in a new array): how much of the gap to raw is copies rather than overhead;
* **pipelined pulls** of 10,000 rows in batches of 1,000: one ``get``,
  all batches as ``get_async`` issued up front then collected, and
  ``get_iter``; then the same with a compute step per batch (a float32 matmul
  of the batch, releasing the GIL, its width calibrated so that computing all
  batches takes about as long as one get of them: each batch's compute
  comparable to its transfer), where pulling ahead pays;
* **sparse row increments** (:mod:`_rowinc`): ``PSArray.increment`` of a
  ``scipy.sparse`` CSR of 10,000 random rows x 20 nonzeros, against raw RPCs of
  the update's compact content (8 bytes a key) and of the bytes it really sends
  (narrowed), the wide wire, and two floors with the servers' scatter: done in the
  servers by bare handlers (both at once), and serially in the task (the old one).

Each figure is the median of ``repeat`` rounds, daskangel and raw timed in turns
(``paired_median_times``); a get or pipelined figure takes more rounds, as many
as fit in about ``ROUND_SECONDS`` (up to 201), since a millisecond call's median
over a few rounds is mostly the machine's noise.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import dask
import numpy as np
from _rowinc import increment_rows, measure_increments
from _timing import paired_median_times
from distributed import Client, LocalCluster, get_worker
from distributed.protocol import to_serialize
from distributed.utils import sync

import daskangel as angel
from daskangel._compat import workers_info

__all__ = ["bench_rows"]

SHAPES = {"LDA": ((50_000, 1_000), "int32"), "MF": ((50_000, 50), "float32")}
SMOKE_SHAPES = {"LDA": ((2_000, 100), "int32"), "MF": ((2_000, 50), "float32")}
BATCH = 1_000
ROUND_SECONDS = 1.0  # paired rounds of a get or pipelined figure fill about this long


def _server_of(arr: angel.PSArray) -> tuple[np.ndarray, list[str]]:
    """``row -> server number`` (row-block layouts) and the servers' addresses."""
    blocks = arr.blocks
    addrs = sorted({b.server.address for b in blocks})
    n_rows = arr.shape[0]
    owner = np.empty(n_rows, np.int64)
    for b in blocks:
        r0, r1 = b.rows
        owner[r0:r1] = addrs.index(b.server.address)
    return owner, addrs


def _raw(addrs: list[str], op: str, shares: list[Any], ids: list[Any] | None = None) -> None:
    """One bare RPC per server from this task, concurrently (``ids``: bytes each
    source request carries, as a get's row ids; the handler drops them; for
    ``scatter``: each share's ``(layout, shape, dtype)``, see ``RawPlugin``)."""
    w = get_worker()

    async def go() -> None:
        calls = []
        for i, (a, s) in enumerate(zip(addrs, shares, strict=True)):
            if op == "scatter":
                assert ids is not None
                lay, shape, dtype = ids[i]
                calls.append(
                    w.rpc(a).bench_scatter(
                        data=to_serialize(s), layout=lay, shape=shape, dtype=dtype
                    )
                )
            elif op == "source" and ids is not None:
                calls.append(w.rpc(a).bench_source(nbytes=int(s), ids=ids[i]))
            elif op == "source":
                calls.append(w.rpc(a).bench_source(nbytes=int(s)))
            else:
                calls.append(w.rpc(a).bench_sink(data=to_serialize(s)))
        await asyncio.gather(*calls)

    sync(w.loop, go)


def _on_dask(fn: Callable[[], Any]) -> Any:
    """``fn()`` with daskangel's lean wire off: its calls through Dask's comms."""
    with dask.config.set({"daskangel.client.lean-wire": False}):
        return fn()


def _rounds(fns: dict[str, Any], repeat: int, smoke: bool) -> int:
    """Paired rounds for a figure: at least ``repeat``, and as many as fit in
    about ``ROUND_SECONDS`` (at most 201): a 1 ms get's median over 9 rounds
    moved by 10-20 % between runs on the loaded 2-core VM."""
    if smoke:
        return repeat
    t0 = time.perf_counter()
    for fn in fns.values():
        fn()
    one = time.perf_counter() - t0
    return max(repeat, min(201, int(ROUND_SECONDS / max(one, 1e-6))))


def _compute(vals: np.ndarray, B: np.ndarray) -> float:
    return float((vals.astype(np.float32) @ B).sum())


def _calibrate(arr: angel.PSArray, idx: np.ndarray, batch: int, rng: Any) -> np.ndarray:
    """The compute step's matrix: ``batch @ B`` of a batch takes about that batch's
    share of one get of all ``idx`` (a pull-while-compute case worth overlapping:
    each batch's compute comparable to its transfer).  Its width grows from 4 by
    the ratio still missing (x1.2 to x2 a step, medians of 5 timings) until the
    compute of all batches takes at least the get (cap 16,384): a small matmul's
    time is not proportional to its width, so scaling a doubled width down in
    proportion (as before) left MF's compute at a third of its get."""
    times = []
    for _ in range(7):
        t0 = time.perf_counter()
        arr.get(rows=idx)
        times.append(time.perf_counter() - t0)
    target = float(np.median(times))
    v = arr.get(rows=idx[:batch])
    n_batches = -(-idx.shape[0] // batch)
    k = 4
    while True:
        B = rng.standard_normal((v.shape[1], k)).astype(np.float32)
        took = []
        for _ in range(5):
            t0 = time.perf_counter()
            _compute(v, B)
            took.append(time.perf_counter() - t0)
        total = float(np.median(took)) * n_batches
        if total >= target or k >= 16_384:
            return B
        k = min(16_384, int(k * max(1.2, min(2.0, target / total))))


def _floor(local: np.ndarray, idx: np.ndarray, owner: np.ndarray, n_servers: int) -> Any:
    """The two copies a random-row get cannot avoid, done with numpy on the same
    bytes: a server gathers its rows (sorted) into a reused reply buffer (the
    servers gather concurrently: only the largest share is timed), and the caller
    puts the rows it received sorted back into request order (a new array)."""
    srt = np.sort(idx)
    rank = np.argsort(np.argsort(idx, kind="stable"), kind="stable")
    mine = [srt[owner[srt] == s] for s in range(n_servers)]
    big = max(mine, key=lambda r: r.shape[0])
    reply = np.zeros((big.shape[0], local.shape[1]), local.dtype)
    received = np.ones((idx.shape[0], local.shape[1]), local.dtype)

    def copies() -> None:
        np.take(local, big, axis=0, out=reply, mode="clip")
        np.take(received, rank, axis=0)

    return copies


def _measure(
    name: str, n_rows: list[int], repeat: int, warmup: int, seed: int, smoke: bool = False
) -> dict[str, Any]:
    """Runs in a task on the worker without a server: every figure of one array."""
    arr = angel.PSArray(name)
    owner, addrs = _server_of(arr)
    nr, width = arr.shape
    row_bytes = width * arr.dtype.itemsize
    rng = np.random.default_rng(seed)
    out: dict[str, Any] = {"servers": len(addrs)}
    local = np.ones((nr, width), arr.dtype)  # the copies of the floor, on touched memory
    for n in n_rows:
        idx = rng.choice(nr, size=min(n, nr), replace=False)
        shares = [int((owner[idx] == s).sum()) * row_bytes for s in range(len(addrs))]
        ids = [idx[owner[idx] == s].astype(np.int32).tobytes() for s in range(len(addrs))]
        floor = _floor(local, idx, owner, len(addrs))
        fns = {
            "get": lambda idx=idx: arr.get(rows=idx),
            "raw": lambda s=shares: _raw(addrs, "source", s),
            "raw ids": lambda s=shares, i=ids: _raw(addrs, "source", s, i),
            "floor": lambda s=shares, f=floor: (_raw(addrs, "source", s), f()),
            "get dask": lambda idx=idx: _on_dask(lambda: arr.get(rows=idx)),
        }
        t = paired_median_times(fns, _rounds(fns, repeat, smoke), warmup=warmup)
        out[f"get {n}"] = (t["get"], t["raw"], t["floor"], t["raw ids"], t["get dask"])
    # pipelined pulls of the largest count
    n = min(max(n_rows), nr)
    idx = rng.choice(nr, size=n, replace=False)
    batch = min(BATCH, max(1, n // 10))
    starts = range(0, n, batch)
    B = _calibrate(arr, idx, batch, rng)

    def one(compute: bool) -> None:
        v = arr.get(rows=idx)
        if compute:
            for s in starts:
                _compute(v[s : s + batch], B)

    def all_async(compute: bool) -> None:
        futs = [arr.get_async(rows=idx[s : s + batch]) for s in starts]
        for f in futs:
            v = f.result()
            if compute:
                _compute(v, B)

    def it(compute: bool) -> None:
        for _, v in arr.get_iter(idx, batch=batch):
            if compute:
                _compute(v, B)

    for compute in (False, True):
        fns = {"get": lambda c=compute: one(c), "async": lambda c=compute: all_async(c)}
        fns["iter"] = lambda c=compute: it(c)
        out[f"pipe {'compute' if compute else 'pull'}"] = paired_median_times(
            fns, _rounds(fns, repeat, smoke), warmup=warmup
        )
    # the compute alone
    v_all = arr.get(rows=idx)
    t0 = time.perf_counter()
    for _ in range(max(1, repeat // 2)):
        for s in starts:
            _compute(v_all[s : s + batch], B)
    out["compute"] = (time.perf_counter() - t0) / max(1, repeat // 2)
    out["pipe n"], out["pipe batch"] = n, batch
    # sparse row increments: NNZ random columns in each of n random rows (_rowinc)
    out["inc"] = measure_increments(
        arr,
        owner,
        addrs,
        local,
        _raw,
        lambda fns: _rounds(fns, repeat, smoke),
        min(max(n_rows), nr),
        rng,
        warmup,
    )
    return out


def bench_rows(repeat: int, smoke: bool, plugin: Any) -> list[tuple[str, str, str, str, str]]:
    """The row section's table rows (see the module docstring)."""
    shapes = SMOKE_SHAPES if smoke else SHAPES
    n_rows = [100, 500] if smoke else [1_000, 10_000]
    rows: list[tuple[str, str, str, str, str]] = []
    with (
        LocalCluster(
            n_workers=3, threads_per_worker=1, processes=True, dashboard_address=":0"
        ) as cluster,
        Client(cluster) as client,
    ):
        client.register_plugin(plugin)
        workers = sorted(workers_info(client))
        with angel.PSContext(client, workers=workers[:2]) as ps:
            for label, (shape, dtype) in shapes.items():
                name = f"rows-{label}"
                if dtype == "int32":  # counts
                    ps.zeros(name, shape, dtype=dtype)
                else:
                    ps.random(name, shape, dtype=dtype, seed=1)
                fut = client.submit(
                    _measure,
                    name,
                    n_rows,
                    repeat,
                    0 if smoke else 2,
                    0,
                    smoke,
                    workers=[workers[2]],
                    pure=False,
                )
                res = fut.result()
                what = f"{label} {shape[0]:,} x {shape[1]:,} {dtype}"
                row_bytes = shape[1] * np.dtype(dtype).itemsize
                for n in n_rows:
                    t, tr, tf, tri, td = res[f"get {n}"]
                    k = min(n, shape[0])
                    rows.append(
                        (
                            "rows",
                            f"{what}: get {k:,} random rows ({k * row_bytes / 2**20:.1f} MiB)",
                            f"{t * 1e3:,.2f} ms",
                            f"{tr * 1e3:,.2f} ms ({tr / t:.0%}); with the row ids "
                            f"{tri * 1e3:,.2f} ms ({tri / t:.0%}); on Dask's comms "
                            f"(lean-wire off) {td * 1e3:,.2f} ms ({td / t:.0%})",
                            "-",
                        )
                    )
                    rows.append(
                        (
                            "rows",
                            f"{what}: floor of get {k:,} rows (raw + server gather + caller "
                            "reorder, numpy)",
                            f"{tf * 1e3:,.2f} ms",
                            f"raw/floor {tr / tf:.0%}, floor/get {tf / t:.0%}",
                            "-",
                        )
                    )
                pn, pb = res["pipe n"], res["pipe batch"]
                for mode in ("pull", "compute"):
                    ts = res[f"pipe {mode}"]
                    best = min(ts["get"], ts["async"])
                    extra = (
                        f" + compute {res['compute'] * 1e3:,.1f} ms" if mode == "compute" else ""
                    )
                    rows.append(
                        (
                            "rows",
                            f"{what}: {pn:,} rows in batches of {pb:,}{extra}: get_iter",
                            f"{ts['iter'] * 1e3:,.1f} ms",
                            f"one get {ts['get'] * 1e3:,.1f} ms, all get_async "
                            f"{ts['async'] * 1e3:,.1f} ms (best/iter {best / ts['iter']:.0%})",
                            "-",
                        )
                    )
                rows += increment_rows(what, shape[1], res["inc"])
                ps.drop(name)
    return rows
