"""PSArray get / increment against the bare transport and local numpy, per transport.

Run: ``.venv/bin/python benchmarks/bench_ps.py [--repeat 7] [--smoke]``
(``--smoke``: tiny sizes, one round each, a check that it runs, not a measurement)

On a 2-worker LocalCluster (processes), for each transport ("handlers", "actors"):

* dense get and increment bandwidth for 1 / 8 / 64 MiB payloads (a float32 vector
  auto-partitioned over both servers), next to *raw*: bare calls to the same
  servers moving the same bytes the same way (one concurrent call per server),
  and *local*: the same copy / add in numpy in this process.  Servers apply an
  increment after replying (write-behind), so increments are timed as bursts of
  ``BURST`` back-to-back calls closed by a call that waits for every queued add
  (``version_token``), against as many raw sends closed by a small raw round trip:
  no add is left over to slow down whatever is timed next;
* latency of a small get (one row of 100 float32), next to a bare round trip
  carrying 400 bytes;
* rows/s of a 1,000-row batched get from a 100,000 x 100 matrix;
* sparse increment keys/s: 1 M random keys into a 1 x 10**9 sparse vector (new keys,
  then the same keys again), per server, next to the same update (packing, then the
  block's packed update) on one local block.  The median of ``3 x --repeat`` single
  calls, each round into a fresh vector, after one untimed warm-up round (the first
  call loads the compiled kernels in every process and grows the servers' scratch
  buffers; with it in, a 3-call median was the slower of two warm calls);
* the row section (``--sections rows``, :mod:`_rowbench`): random-row gets, pipelined
  pulls with and without compute, and sparse row increments of LDA- and MF-shaped
  arrays, measured in a task on a worker without a server against bare RPCs.

Every figure is the median of ``--repeat`` runs (dense transfers: ``repeat x 64 / MiB``
runs, so that each size times as many bytes and the 1 MiB medians are as steady as
the 64 MiB ones; small calls: of 300); a daskangel
call and its raw counterpart are timed in turns (``paired_median_times``), so load
from other processes on the shared cores weighs on both alike.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

import numpy as np
from _rowbench import bench_rows
from _timing import median_time, paired_median_times
from distributed import Client, LocalCluster
from distributed.diagnostics.plugin import WorkerPlugin
from distributed.protocol import to_serialize

import daskangel as angel
from daskangel.psarray._blocks import SparseBlock
from daskangel.psarray._packed import pack_by_bounds

MiB = 1 << 20
BURST = 4  # increments per timed burst (see the module docstring)
SPARSE_ROUNDS_PER_REPEAT = 3  # timed sparse-increment rounds per --repeat (one call each)


class RawPlugin(WorkerPlugin):
    """Bare handlers: receive bytes and drop them, or send cached bytes; and the
    row section's server floor (``bench_scatter``, :mod:`_rowinc`): receive a
    share of compressed rows and scatter it into an array of the matrix's shape
    held by the handler (zeroed, so only the rows written are ever touched)."""

    name = "bench-raw"

    def setup(self, worker: Any) -> None:
        cache: dict[int, np.ndarray] = {}
        targets: dict[tuple[Any, ...], np.ndarray] = {}

        def sink(data: Any = None) -> None:
            return None

        def scatter(data: Any = None, layout: Any = (), shape: Any = (), dtype: str = "") -> None:
            # data: the fields of ``layout`` ([name, dtype, count], ...) one after another
            from daskangel.psarray._scatter import scatter_csr

            key = (*shape, dtype)
            if key not in targets:
                targets[key] = np.zeros(tuple(shape), dtype)
            buf = np.frombuffer(data, np.uint8)
            f: dict[str, np.ndarray] = {}
            at = 0
            for name, dt, n in layout:
                f[name] = buf[at : at + n * np.dtype(dt).itemsize].view(dt)
                at += f[name].nbytes
            scatter_csr(targets[key], f["rows"], f["lens"], f["cols"], f["values"], True)

        def source(nbytes: int = 0, ids: Any = None) -> Any:
            # ids: the row ids a random-row get must send (_rowbench), carried and dropped
            if nbytes not in cache:
                cache[nbytes] = np.ones(nbytes // 4, "float32")
            return to_serialize(cache[nbytes])

        worker.handlers["bench_sink"] = sink
        worker.handlers["bench_source"] = source
        worker.handlers["bench_scatter"] = scatter


class RawActor:
    """The same bare calls as a Dask actor."""

    def __init__(self) -> None:
        self.cache: dict[int, np.ndarray] = {}

    def sink(self, data: Any) -> None:
        return None

    def source(self, nbytes: int) -> np.ndarray:
        if nbytes not in self.cache:
            self.cache[nbytes] = np.ones(nbytes // 4, "float32")
        return self.cache[nbytes]


class Raw:
    """Bare calls over one transport, to the PS servers' workers."""

    def __init__(self, client: Client, transport: str, workers: list[str]) -> None:
        self.client, self.transport, self.workers = client, transport, workers
        self.actor_futs = []
        if transport == "actors":
            self.actor_futs = [
                client.submit(RawActor, actor=True, workers=[w], key=f"raw-{w}") for w in workers
            ]
            client.gather(self.actor_futs)

    async def _one(self, w: str, fn: str, arg: Any) -> Any:
        rpc = self.client.rpc(w)
        if self.transport == "handlers":
            if fn == "sink":
                return await rpc.bench_sink(data=to_serialize(arg))
            return await rpc.bench_source(nbytes=arg)
        return await rpc.actor_execute(
            actor=f"raw-{w}", function=fn, args=[to_serialize(arg)], kwargs={}
        )

    def call(self, fn: str, shares: dict[str, Any]) -> None:
        async def go() -> None:
            await asyncio.gather(*(self._one(w, fn, a) for w, a in shares.items()))

        self.client.sync(go)


def shares_of(arr: angel.PSArray, nbytes: int) -> dict[str, int]:
    """Bytes of the array held by each worker."""
    out: dict[str, int] = {}
    total = sum(b.shape[0] * b.shape[1] for b in arr.blocks)
    for b in arr.blocks:
        n = b.shape[0] * b.shape[1]
        out[b.server.address] = out.get(b.server.address, 0) + nbytes * n // total
    return out


def bench_transport(
    client: Client, transport: str, repeat: int, smoke: bool = False
) -> list[tuple[str, str, str, str, str]]:
    rows = []
    small_calls = 5 if smoke else 300
    n_big, n_keys = (10_000, 10_000) if smoke else (100_000, 1_000_000)
    with angel.PSContext(client, transport=transport) as ps:
        workers = sorted({s.address for s in ps.servers})
        raw = Raw(client, transport, workers)
        for mb in (1,) if smoke else (1, 8, 64):
            n = mb * MiB // 4
            w = ps.zeros(f"v{mb}", (n,), dtype="float32")
            vals = np.ones(n, "float32")
            shares = shares_of(w, mb * MiB)
            sink_shares = {a: np.ones(b // 4, "float32") for a, b in shares.items()}
            # as many bytes timed per size: steady medians
            rounds = repeat if smoke else repeat * (64 // mb)
            got = paired_median_times(
                {"get": w.get, "raw": lambda s=shares: raw.call("source", s)}, rounds, warmup=3
            )
            tiny = dict.fromkeys(shares, 400)

            def inc_burst(w: angel.PSArray = w, vals: np.ndarray = vals) -> None:
                for _ in range(BURST):
                    w.increment(vals)
                w.version_token()  # answered once every queued add is applied

            def raw_burst(s: dict[str, np.ndarray] = sink_shares, t: dict[str, int] = tiny) -> None:
                for _ in range(BURST):
                    raw.call("sink", s)
                raw.call("source", t)

            put = paired_median_times({"inc": inc_burst, "raw": raw_burst}, rounds, warmup=3)
            t_get, t_raw_get = got["get"], got["raw"]
            t_inc, t_raw_put = put["inc"] / BURST, put["raw"] / BURST
            local = np.zeros(n, "float32")
            t_loc_get = median_time(local.copy, repeat, warmup=1)
            t_loc_inc = median_time(
                lambda local=local, vals=vals: np.add(local, vals, out=local), repeat, warmup=1
            )
            for op, t, tr, tl in (
                ("get", t_get, t_raw_get, t_loc_get),
                ("increment", t_inc, t_raw_put, t_loc_inc),
            ):
                rows.append(
                    (
                        transport,
                        f"dense {op} {mb} MiB ({len(w.blocks)} blocks)",
                        f"{mb / t:,.0f} MiB/s",
                        f"{mb / tr:,.0f} MiB/s ({tr / t:.0%})",
                        f"{mb / tl:,.0f} MiB/s",
                    )
                )
            ps.drop(f"v{mb}")
        # small get latency
        m = ps.random("m", (1000, 100), seed=0)
        one = {workers[0]: 400}
        small = paired_median_times(
            {"get": lambda: m.get(rows=5), "raw": lambda: raw.call("source", one)},
            small_calls,
            warmup=1 if smoke else 20,
        )
        t_small, t_raw_small = small["get"], small["raw"]
        local_m = m.get()
        t_loc_small = median_time(lambda: local_m[5].copy(), small_calls, warmup=1)
        rows.append(
            (
                transport,
                "small get: 1 row x 100 float32",
                f"{t_small * 1e6:,.0f} us",
                f"{t_raw_small * 1e6:,.0f} us ({t_small / t_raw_small:.2f}x)",
                f"{t_loc_small * 1e6:,.1f} us",
            )
        )
        # batched row get
        big = ps.random("big", (n_big, 100), seed=1)
        rng = np.random.default_rng(0)
        idx = rng.integers(0, n_big, 1000)
        rb_shares = shares_of(big, 1000 * 400)
        batch = paired_median_times(
            {"get": lambda: big.get(rows=idx), "raw": lambda: raw.call("source", rb_shares)},
            repeat * 3,
            warmup=3,
        )
        t_rows, t_raw_rows = batch["get"], batch["raw"]
        local_big = big.get()
        t_loc_rows = median_time(lambda: local_big[idx], repeat * 3, warmup=1)
        rows.append(
            (
                transport,
                "batched get: 1,000 random rows x 100",
                f"{1000 / t_rows:,.0f} rows/s",
                f"{1000 / t_raw_rows:,.0f} rows/s ({t_raw_rows / t_rows:.0%})",
                f"{1000 / t_loc_rows:,.0f} rows/s",
            )
        )
        # sparse increments
        keys = rng.integers(0, 10**9, n_keys)
        vals = np.ones(keys.size, "float32")
        t_new = []
        t_again = []
        # round 0 is a warm-up, not timed: it loads the compiled kernels on the
        # caller and in both servers and grows their scratch buffers; then
        # SPARSE_ROUNDS_PER_REPEAT x repeat timed rounds, each into a fresh vector
        # (new keys, then the same keys again)
        rounds = 1 if smoke else SPARSE_ROUNDS_PER_REPEAT * repeat
        for r in range(rounds + (0 if smoke else 1)):
            s = ps.zeros(f"s{r}", (10**9,), sparse=True)
            n_servers = len({b.server for b in s.blocks})
            t = time.perf_counter()
            s.increment(vals, cols=keys)
            t1 = time.perf_counter()
            s.increment(vals, cols=keys)
            t2 = time.perf_counter()
            if r > 0 or smoke:
                t_new.append(t1 - t)
                t_again.append(t2 - t1)
            ps.drop(f"s{r}")
        blk = SparseBlock((1, 10**9), np.dtype("float32"))
        whole = np.array([0, 10**9], dtype=np.int64)

        def local_update() -> None:  # what the caller and a server do, in one process
            _, packed = pack_by_bounds(keys, vals.view(np.uint32), whole)
            blk.update_packed(0, packed)

        t_loc = median_time(local_update, repeat, warmup=1)
        for label, ts in (("new keys", t_new), ("existing keys", t_again)):
            t = statistics.median(ts)
            rows.append(
                (
                    transport,
                    f"sparse increment {keys.size:,} keys, {label} "
                    + ("(one cold call)" if smoke else f"(median of {len(ts)} after a warm-up)"),
                    f"{keys.size / t / 1e6:,.1f} M keys/s ({keys.size / t / 1e6 / n_servers:,.1f} per server)",
                    "-",
                    f"{keys.size / t_loc / 1e6:,.1f} M keys/s (one block)",
                )
            )
        for f in raw.actor_futs:
            f.release()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--transports", default="handlers,actors")
    ap.add_argument("--sections", default="transports,rows", help="comma list of transports,rows")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, one round: a run check")
    args = ap.parse_args()
    repeat = 1 if args.smoke else args.repeat
    sections = set(args.sections.split(","))
    rows = []
    if "transports" in sections:
        with (
            LocalCluster(
                n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
            ) as cluster,
            Client(cluster) as client,
        ):
            client.register_plugin(RawPlugin())
            for t in args.transports.split(","):
                rows += bench_transport(client, t, repeat, args.smoke)
    if "rows" in sections:
        rows += bench_rows(1 if args.smoke else repeat * 3, args.smoke, RawPlugin())
    head = ("transport", "operation", "daskangel", "raw transport (ratio)", "local numpy")
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(5)]
    line = " | ".join(h.ljust(w) for h, w in zip(head, widths, strict=True))
    print(line)
    print("-|-".join("-" * w for w in widths))
    for r in rows:
        print(" | ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)))


if __name__ == "__main__":
    main()
