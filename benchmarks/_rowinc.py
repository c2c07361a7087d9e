"""The sparse row increments of ``bench_ps.py --sections rows`` (see :mod:`_rowbench`).

Measured in the same task as the row gets: ``PSArray.increment`` of a
``scipy.sparse`` CSR of 10,000 random rows x 20 nonzeros, closed by
``version_token`` (a small round trip that waits for queued adds), against

* **raw**: one bare RPC per server carrying the update's compact content (a
  4-byte column and a 4-byte value per key, 8 bytes per row), closed by a small
  round trip; it applies nothing;
* **raw of the wire bytes**: the same with as many bytes as the increment's
  request really carries: since ``daskangel.client.narrow-csr`` the planner
  sends columns, local rows and integer values in the narrowest integer types
  they fit (LDA: uint16 columns and int8 counts, 3 bytes a key; MF: uint8
  columns and float32 values, 5 bytes a key), so both ratios are printed;
* **the increment with the wide wire** (``narrow-csr`` off: 8 bytes a key, as
  before it), timed in the same turns;
* **the increment on Dask's comms** (``daskangel.client.lean-wire`` off: the
  same lean push and token, through Dask's comm pool and message handling
  instead of daskangel's lean wire, :mod:`daskangel._lean`), timed in the same turns;
* **the increment on the general path** (``daskangel.client.lean-push`` off: a
  task a server and the generic ``daskangel_ps`` handler instead of one lean
  ``daskangel_push`` request a server, ``psarray/_rowpush.py``);
* **the same entries as an unsorted COO** (what LDA's sweeps push), sorted
  into compressed rows on the caller, and on the coordinate path as before
  (``daskangel.client.coo-rows-per-entry`` 0);
* **floor on the servers**: raw RPCs carrying each server's share as the
  increment's wire does (rows, counts, columns and integer values in the
  narrowest integer types they fit, in one buffer) to a bare handler that
  scatters it with the servers' own kernel (``scatter_csr``) into an array of the
  matrix's shape it holds, then the small closing round trip: the transfer plus
  the write a server must do, the two servers scattering at once as real ones
  do, with nothing of daskangel's own on the way.  (The same with the raw's 8.4
  bytes a key, measured 13:02-13:10Z 2026-11-27: 36-54 % of raw, slower than the
  increment, whose smaller frames let the second server's transfer finish while
  the first scatters; so the floor carries the increment's own bytes);
* **serial floor** (the floor before 2026-11-27 13:30Z): the raw RPCs, then both
  servers' shares scattered one after the other into an array of the matrix's
  size in the task.  Not a lower bound: real servers scatter in parallel with
  each other (and with the other's receive); kept to compare with earlier runs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import dask
import numpy as np
import scipy.sparse as sp
from _timing import paired_median_times

import daskangel as angel
from daskangel.psarray._csrplan import plan_csr
from daskangel.psarray._scatter import scatter_csr

__all__ = ["NNZ", "measure_increments", "increment_rows"]

NNZ = 20  # nonzeros per row of a sparse row increment


def _wire_bytes(arr: angel.PSArray, X: sp.csr_matrix, addrs: list[str]) -> list[int]:
    """The payload bytes a narrowed CSR increment carries to each server."""
    planned = plan_csr(arr.meta, X, None, None)
    assert planned is not None
    out = [0] * len(addrs)
    blocks = arr.blocks
    for g, p in planned[0].items():
        narrow = p.get("narrow", {})
        n = sum(
            p[k].size * np.dtype(narrow.get(k, p[k].dtype)).itemsize
            for k in ("csr_rows", "csr_len", "csr_cols", "values")
        )
        out[addrs.index(blocks[g].server.address)] += n
    return out


def _narrow_values(v: np.ndarray) -> np.ndarray:
    """Integer values in the narrowest integer type they fit (as the wire does)."""
    if v.dtype.kind not in "iu" or v.size == 0:
        return v
    return v.astype(np.result_type(np.min_scalar_type(v.min()), np.min_scalar_type(v.max())))


def measure_increments(
    arr: angel.PSArray,
    owner: np.ndarray,
    addrs: list[str],
    local: np.ndarray,
    raw: Callable[..., None],
    rounds: Callable[[dict[str, Any]], int],
    n_rows: int,
    rng: Any,
    warmup: int,
) -> tuple[float, ...]:
    """``(inc, raw, keys, floor, inc wide, raw wire, wire bytes, coo, coords, inc general,
    floor on the servers, its bytes, inc on Dask's comms)``:
    medians of paired rounds (``raw(addrs, op, shares)`` is the bare RPC of
    :mod:`_rowbench`)."""
    nr, width = arr.shape
    nnz = min(NNZ, width)
    r = np.sort(rng.choice(nr, size=n_rows, replace=False))
    cols = np.stack([rng.choice(width, size=nnz, replace=False) for _ in range(64)])
    cols = np.sort(cols[rng.integers(0, 64, n_rows)], axis=1).ravel()
    indptr = np.zeros(nr + 1, np.int64)
    indptr[r + 1] = nnz
    indptr = np.cumsum(indptr)
    data = np.ones(n_rows * nnz, arr.dtype)
    X = sp.csr_matrix((data, cols, indptr), shape=(nr, width))
    inc_shares = [
        np.ones(int((owner[r] == s).sum()) * (nnz * 2 + 2), np.float32) for s in range(len(addrs))
    ]
    wire = _wire_bytes(arr, X, addrs)
    wire_shares = [np.ones(n, np.uint8) for n in wire]
    small = [4] * len(addrs)

    def inc() -> None:
        arr.increment(X)
        arr.version_token()

    def inc_wide() -> None:
        with dask.config.set({"daskangel.client.narrow-csr": False}):
            inc()

    def inc_general() -> None:
        with dask.config.set({"daskangel.client.lean-push": False}):
            inc()

    def inc_dask() -> None:  # the lean push and token on Dask's comms, as before the lean wire
        with dask.config.set({"daskangel.client.lean-wire": False}):
            inc()

    # the same entries as an unsorted COO (what LDA's sweeps push): sorted into
    # compressed rows on the caller, and on the coordinate path as before
    perm = rng.permutation(X.nnz)
    coo = X.tocoo()
    Xc = sp.coo_matrix((coo.data[perm], (coo.row[perm], coo.col[perm])), shape=X.shape)

    def inc_coo() -> None:
        arr.increment(Xc)
        arr.version_token()

    def inc_coords() -> None:
        with dask.config.set({"daskangel.client.coo-rows-per-entry": 0}):
            inc_coo()

    def raw_inc(shares: list[np.ndarray] = inc_shares) -> None:
        raw(addrs, "sink", shares)
        raw(addrs, "source", small)

    # the floor: the raw transfer, then the write the raw sink skips, each
    # server's share scattered into rows of ``local`` (an array of the matrix's
    # size, its pages touched) with the servers' own compiled kernel
    lens = np.full(n_rows, nnz, np.int32)
    c32 = cols.astype(np.int32)
    csr_shares = []  # each server's rows, entry counts, columns and values, made once
    for s in range(len(addrs)):
        mine = owner[r] == s
        k = np.repeat(mine, nnz)
        csr_shares.append((r[mine].astype(np.int32), lens[mine], c32[k], data[k]))

    def floor_inc() -> None:
        raw_inc()
        for rows_s, lens_s, cols_s, vals_s in csr_shares:
            scatter_csr(local, rows_s, lens_s, cols_s, vals_s, True)

    # the floor on the servers: each share's fields narrowed as the increment's
    # wire narrows them, in one buffer (widest first: every field aligned),
    # scattered where a server would (bench_ps.RawPlugin's ``bench_scatter``)
    srv_shares, srv_meta = [], []
    for rows_s, lens_s, cols_s, vals_s in csr_shares:
        fields = {
            "rows": rows_s.astype(np.min_scalar_type(nr - 1)),
            "lens": lens_s.astype(np.min_scalar_type(nnz)),
            "cols": cols_s.astype(np.min_scalar_type(width - 1)),
            "values": _narrow_values(vals_s),
        }
        order = sorted(fields, key=lambda k: -fields[k].dtype.itemsize)
        srv_shares.append(np.concatenate([fields[k].view(np.uint8) for k in order]))
        layout = [(k, fields[k].dtype.str, int(fields[k].shape[0])) for k in order]
        srv_meta.append((layout, [nr, width], arr.dtype.name))
    srv_bytes = sum(b.nbytes for b in srv_shares)

    def floor_srv() -> None:
        raw(addrs, "scatter", srv_shares, srv_meta)
        raw(addrs, "source", small)

    fns = {
        "inc": inc,
        "raw": raw_inc,
        "floor": floor_inc,
        "floor srv": floor_srv,
        "inc wide": inc_wide,
        "inc general": inc_general,
        "inc dask": inc_dask,
        "raw wire": lambda: raw_inc(wire_shares),
        "coo": inc_coo,
        "coords": inc_coords,
    }
    t = paired_median_times(fns, rounds(fns), warmup=warmup)
    return (
        t["inc"],
        t["raw"],
        n_rows * nnz,
        t["floor"],
        t["inc wide"],
        t["raw wire"],
        sum(wire),
        t["coo"],
        t["coords"],
        t["inc general"],
        t["floor srv"],
        srv_bytes,
        t["inc dask"],
    )


def increment_rows(what: str, width: int, res: tuple[float, ...]) -> list[tuple[str, ...]]:
    """The table rows of one shape's increment figures."""
    t, tr, keys, tf, tw, trw, wire, tc, tco, tg, ts, sb, td = res
    nnz = min(NNZ, width)
    rows_n = int(keys) // nnz
    inc_what = f"{what}: sparse row increment {rows_n:,} rows x {nnz} nnz"
    per_key, raw_key = wire / keys, (8 * keys + 8 * rows_n) / keys
    return [
        (
            "rows",
            inc_what,
            f"{keys / t / 1e6:,.1f} M keys/s",
            f"{keys / tr / 1e6:,.1f} M keys/s ({tr / t:.0%}); raw of our wire bytes "
            f"({per_key:.2f} B a key, raw carries {raw_key:.2f}) "
            f"{keys / trw / 1e6:,.1f} M keys/s ({trw / t:.0%})",
            "-",
        ),
        (
            "rows",
            f"{inc_what}: with the wide wire (narrow-csr off, {raw_key:.2f} B a key)",
            f"{keys / tw / 1e6:,.1f} M keys/s",
            f"raw/increment {tr / tw:.0%}; narrow/wide {tw / t:.0%}",
            "-",
        ),
        (
            "rows",
            f"{inc_what}: on the general path (lean-push off)",
            f"{keys / tg / 1e6:,.1f} M keys/s",
            f"raw/increment {tr / tg:.0%}; lean/general {tg / t:.0%}",
            "-",
        ),
        (
            "rows",
            f"{inc_what}: on Dask's comms (lean-wire off)",
            f"{keys / td / 1e6:,.1f} M keys/s",
            f"raw/increment {tr / td:.0%}; lean wire/Dask's {td / t:.0%}",
            "-",
        ),
        (
            "rows",
            f"{inc_what}: the same entries as an unsorted COO, sorted into rows",
            f"{keys / tc / 1e6:,.1f} M keys/s",
            f"raw/increment {tr / tc:.0%}; as coordinates (coo-rows-per-entry 0) "
            f"{keys / tco / 1e6:,.1f} M keys/s ({tco / tc:.0%} of the time)",
            "-",
        ),
        (
            "rows",
            f"{inc_what}: floor on the servers (raw RPCs of {sb / keys:.2f} B a key, each "
            "server scattering its share, both at once)",
            f"{keys / ts / 1e6:,.1f} M keys/s",
            f"raw/floor {tr / ts:.0%}, floor/increment {ts / t:.0%}",
            "-",
        ),
        (
            "rows",
            f"{inc_what}: serial floor (raw, then both shares' scatter in the task)",
            f"{keys / tf / 1e6:,.1f} M keys/s",
            f"raw/floor {tr / tf:.0%}, floor/increment {tf / t:.0%}",
            "-",
        ),
    ]
