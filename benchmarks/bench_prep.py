"""Where a linear-model task's one-off preparation goes, and what its slot order buys.

Run: ``.venv/bin/python benchmarks/bench_prep.py [--rows 5000000] [--repeat 3]``
(``--smoke``: 20,000 rows x 100,000 features, one run: a run check, not a measurement)

One task's partition of the kdd2010-shaped set of ``bench_linear.py`` (default
5 M rows x 10 M features x 30 nnz, as 500 k-row chunks), in this process:

* ``split_rows`` as the ma-sgd task runs it, and its phases: the used-key
  bitmap (``used_keys``), the row copy (``place_rows``) into fresh memory, the
  same copy into memory already touched (so the first-touch cost of the fresh
  pages shows), and the same copy keeping the rows in order (so the cost of
  the random placement shows);
* the local SGD kernel's speed (M nnz/s, tail-averaged, one pass) with the
  slots in key order against hot features first (``hot-keys``);
* the in-place path (:mod:`daskangel.models.linear._inplace`, what ma-sgd uses on a
  memory partition: one stored CSR, so the chunks are joined first, untimed):
  its preparation (split and pruned keys) and its SGD pass over global indices
  in the epoch order it uses (blocks of 16 rows, 32 interleaved) and, for
  comparison, a full permutation.

Every figure is the median of ``--repeat`` runs.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _kddgen import GenSpec, make_chunk
from _timing import median_time

from daskangel.data._batch import CSRBatch, concat
from daskangel.models._core import _prep, epoch_order
from daskangel.models.linear._inplace import in_place_rows
from daskangel.models.linear._kernels import LOGISTIC
from daskangel.models.linear._local_sgd import local_sgd
from daskangel.models.linear._task import Plan, split_rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=5_000_000)
    ap.add_argument("--features", type=int, default=10_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, one run: a run check")
    a = ap.parse_args()
    if a.smoke:
        a.rows, a.features, a.repeat = 20_000, 100_000, 1
    D = a.features
    g = GenSpec(D, 30, 0)
    chunks = []
    for r0 in range(0, a.rows, 500_000):
        X, y, _ = make_chunk(r0, min(500_000, a.rows - r0), 30, D, spec=g)
        chunks.append(CSRBatch(X.indptr, X.indices, X.data, y, D))
    nnz = sum(c.nnz for c in chunks)
    print(f"{a.rows:,} rows x {D:,} features, {nnz:,} nnz; load {os.getloadavg()[0]:.2f}")
    kw: dict[str, Any] = dict(index=0, fraction=0.01, seed=0, n_features=D, has_bias=True)
    split_rows([c.slice(0, 100) for c in chunks[:2]], shuffle=True, hot=16, **kw)  # compile

    rows: list[tuple[str, float]] = []
    for hot in (0, 65536):
        t = median_time(lambda hot=hot: split_rows(chunks, shuffle=True, hot=hot, **kw), a.repeat)
        rows.append((f"split_rows, hot-keys={hot}", t))
    n = a.rows
    order = np.random.default_rng(0).permutation(n)
    val = np.sort(order[: n // 100])
    lengths = np.concatenate([np.diff(c.indptr) for c in chunks])
    starts = np.cumsum([0] + [c.n_rows for c in chunks])
    pieces = [(c.indptr, c.indices, c.data) for c in chunks]
    _keys, hot_bits, used = _prep.used_keys([c.indices for c in chunks], D, 65536)
    rows.append(
        ("  used-key bitmap", median_time(lambda: _prep.used_keys([c.indices for c in chunks], D, 65536), a.repeat))
    )  # fmt: skip
    train_in_order = np.setdiff1d(np.arange(n), val)
    hc, nh = _prep._prefix(hot_bits, 0)
    cold = used & ~hot_bits
    cc, _ = _prep._prefix(cold, nh)
    tab = _prep._table(hot_bits, hc, cold, cc)
    for name, train in (("shuffled", order[n // 100 :]), ("in order", train_in_order)):
        dest = np.empty(n, np.int64)
        dest[train] = np.arange(train.size)
        dest[val] = -1 - np.arange(val.size)
        parts = [dest[s:e] for s, e in itertools.pairwise(starts)]

        def fresh(parts: Any = parts, train: Any = train) -> None:
            _prep.place_rows(pieces, parts, lengths[train], lengths[val], hot_bits, used)

        rows.append((f"  row copy, {name}, fresh memory", median_time(fresh, a.repeat)))
        tp, ti, tv, vp, vi, vv = _prep.place_rows(
            pieces, parts, lengths[train], lengths[val], hot_bits, used
        )

        out = (tp, ti, tv, vp, vi, vv)

        def touched(parts: Any = parts, out: Any = out) -> None:
            for (ptr, ix, v), d in zip(pieces, parts, strict=True):
                _prep._place(ptr, ix, v, d, *out, tab)

        rows.append((f"  row copy, {name}, memory touched before", median_time(touched, a.repeat)))
    print(f"\n{'preparation phase':46} {'seconds':>8}")
    for name, t in rows:
        print(f"{name:46} {t:8.2f}")

    print(f"\n{'local SGD (one tail-averaged pass)':46} {'seconds':>8} {'M nnz/s':>8}")
    for hot in (0, 65536):
        d = split_rows(chunks, shuffle=True, hot=hot, **kw)
        t = d.train
        y = 2.0 * d.y_train - 1.0
        o = epoch_order(t.n_rows, [0, 0, 0])
        W = np.zeros((d.keys.size, 1))
        local_sgd(t.indptr, t.indices, t.data, y, o[:100], W.copy(), LOGISTIC, 0.0, True,
                  0.05, 1e-7, 0.0, 1, True)  # fmt: skip

        def sgd(t: Any = t, y: Any = y, o: Any = o, W: Any = W) -> None:
            local_sgd(t.indptr, t.indices, t.data, y, o, W.copy(), LOGISTIC, 0.0, True,
                      0.05, 1e-7, 0.0, 1, True)  # fmt: skip

        s = median_time(sgd, a.repeat)
        print(
            f"{'slots: ' + ('hot features first' if hot else 'key order'):46} {s:8.2f} {t.nnz / s / 1e6:8.1f}"
        )
        del d
    one = concat(chunks, D)
    chunks.clear()  # the joined copy replaces them
    kw.pop("index")
    print(f"\n{'in place (one stored CSR)':46} {'seconds':>8} {'M nnz/s':>8}")
    t = median_time(lambda: in_place_rows(one, index=0, **kw), a.repeat)
    print(f"{'  split and pruned keys':46} {t:8.2f}")
    d = in_place_rows(one, index=0, **kw)
    d.y = 2.0 * one.labels[:].astype(np.float64) - 1.0
    plan = Plan(
        weights="w", metrics="m", n_features=D, n_outputs=1, kind=LOGISTIC, eps=1.0,
        has_bias=True, task="classifier", classes=(0.0, 1.0), logloss=True, solver="ma-sgd",
        eta0=0.05, power_t=0.5, alpha=1e-7, l1=0.0, batch=1, local_steps=None, epochs=1,
        epoch0=0, val_fraction=0.01, seed=0, train_rows=(), rounds=1, tol=None, patience=1,
        monitor="val_loss", prune=True, nbins=64, average=True,
    )  # fmt: skip
    W = np.zeros((d.keys.size, 1))
    d.local_sgd(d.train_ids[:100], W.copy(), plan, 0.05)  # compile
    orders = (
        ("  SGD, blocks of 16 rows, 32 interleaved", d.epoch_order([0, 0, 0])),
        ("  SGD, full permutation", d.train_ids[np.random.default_rng(0).permutation(d.n_train)]),
    )
    for name, o in orders:
        s = median_time(lambda o=o: d.local_sgd(o, W.copy(), plan, 0.05), a.repeat)
        nnz_train = int(np.diff(one.indptr)[d.train_ids].sum())
        print(f"{name:46} {s:8.2f} {nnz_train / s / 1e6:8.1f}")
    print(f"\nload at end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
