"""Parse throughput of daskangel's libsvm reader versus sklearn's load_svmlight_file.

For each file (the ../shared/data sets, plus a larger file made by repeating a9a
so fixed costs do not dominate) it prints, side by side:

* sklearn ``load_svmlight_file`` (one process, Cython), MB/s;
* daskangel's parser on one core (``build_piece`` over the whole file in this
  process: the compiled kernel plus building the CSR partition), MB/s;
* the ratio (target >= 1.0 per core);
* daskangel end to end on a LocalCluster of 2 single-threaded worker processes
  (``read_libsvm(...).persist()``: splitting, scheduling, parsing, combining).

Medians of ``--repeat`` runs.  Run: ``python benchmarks/bench_data.py [--repeat 5]``
(``--smoke``: the smallest set and a 2-copy big file, one run: a run check).
Datasets are read from ``../shared/data`` (or ``$DASKANGEL_DATA``); absent ones are
skipped with a note (if none is there, a small seeded file made here is parsed
instead, so the script still runs).
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from typing import Any

import numpy as np
from _data import data_root
from _timing import median_time
from sklearn.datasets import load_svmlight_file

import daskangel as angel
from daskangel.data._build import BuildSpec, build_piece
from daskangel.data._formats import Libsvm
from daskangel.data._source import list_files, make_splits

DATA = str(data_root())

SETS = [
    ("a9a", "a9a/a9a"),
    ("a9a.t", "a9a/a9a.t"),
    ("w8a", "w8a/w8a"),
    ("w6a (angel)", "angel-sample/w6a/w6a_300d_train.libsvm"),
    ("agaricus (angel)", "angel-sample/agaricus/agaricus_127d_train.libsvm"),
    ("dna.scale", "angel-sample/dna/dna.scale"),
]


def _one_core(path: str) -> None:
    spec = BuildSpec("bench", Libsvm(False, -1, -1), "memory", "raise", 1, **BuildSpec.sizes())
    split = make_splits(list_files(path), 1, split_bytes=1 << 40)[0]
    piece = build_piece(spec, split, "bench")
    assert not piece.report.counts


def _synthetic(folder: str, rows: int = 20_000) -> str:
    """A seeded libsvm file of ``rows`` rows x 14 of 500 features (no data set needed)."""
    rng = np.random.default_rng(0)
    path = os.path.join(folder, "synthetic.libsvm")
    with open(path, "w") as f:
        for _ in range(rows):
            cols = np.sort(rng.choice(500, 14, replace=False)) + 1
            feats = " ".join(f"{c}:{v:.3g}" for c, v in zip(cols, rng.random(14), strict=True))
            f.write(f"{rng.integers(0, 2) * 2 - 1} {feats}\n")
    return path


def measure(files: list[tuple[str, str]], repeat: int) -> list[tuple[Any, ...]]:
    """``(name, MB, sklearn MB/s, one core MB/s, ratio, cluster MB/s)`` per file."""
    from distributed import Client, LocalCluster

    _one_core(files[0][1])  # compile / load the kernels once
    rows = []
    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
        ) as cl,
        Client(cl) as client,
    ):
        angel.data.read_libsvm(files[0][1]).persist(client).release()  # warm the workers
        for name, path in files:
            mb = os.path.getsize(path) / 1e6
            t_sk = median_time(lambda p=path: load_svmlight_file(p), repeat)
            t_one = median_time(lambda p=path: _one_core(p), repeat)
            t_cl = median_time(
                lambda p=path: angel.data.read_libsvm(p).persist(client, n_partitions=2).release(),
                repeat,
            )
            rows.append((name, mb, mb / t_sk, mb / t_one, t_sk / t_one, mb / t_cl))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--big-copies", type=int, default=24, help="a9a repeats for the big file")
    ap.add_argument("--smoke", action="store_true", help="one small set, one run: a run check")
    args = ap.parse_args()
    if args.smoke:
        args.repeat, args.big_copies = 1, 2

    files = []
    for name, rel in SETS[-1:] if args.smoke else SETS:
        p = os.path.join(DATA, rel)
        if os.path.exists(p):
            files.append((name, p))
        else:
            print(f"note: {p} absent, skipped (see ../shared/data/README.md)")
    tmp = tempfile.mkdtemp(prefix="bench-data-")
    a9a = os.path.join(DATA, "a9a/a9a")
    if os.path.exists(a9a):
        big = os.path.join(tmp, f"a9a-x{args.big_copies}")
        with open(a9a, "rb") as f:
            raw = f.read()
        with open(big, "wb") as f:
            for _ in range(args.big_copies):
                f.write(raw)
        files.append((f"a9a x{args.big_copies}", big))
    if not files:
        files.append(("synthetic (seeded)", _synthetic(tmp)))

    try:
        rows = measure(files, args.repeat)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print()
    print(
        f"libsvm parse throughput, MB/s (median of {args.repeat}; cluster = 2 workers x 1 thread)"
    )
    hdr = f"{'dataset':<18}{'MB':>8}{'sklearn':>10}{'angel 1 core':>14}{'ratio':>8}{'angel cluster':>15}"
    print(hdr)
    print("-" * len(hdr))
    for name, mb, sk, one, ratio, cl in rows:
        print(f"{name:<18}{mb:>8.1f}{sk:>10.1f}{one:>14.1f}{ratio:>7.2f}x{cl:>15.1f}")


if __name__ == "__main__":
    main()
