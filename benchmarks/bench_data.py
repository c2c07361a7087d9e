"""Parse throughput of daskangel's libsvm reader versus sklearn's load_svmlight_file.

For each file (the ../shared/data sets, plus a larger file made by repeating a9a
so fixed costs do not dominate) it prints, side by side:

* sklearn ``load_svmlight_file`` (one process, Cython), MB/s;
* daskangel's parser on one core (``build_piece`` over the whole file in this
  process: the compiled kernel plus building the CSR partition), MB/s;
* the ratio (target >= 1.0 per core);
* daskangel end to end on a LocalCluster of 2 single-threaded worker processes
  (``read_libsvm(...).persist()``: splitting, scheduling, parsing, combining).

Medians of ``--repeat`` runs.  Run: ``python benchmarks/bench_data.py [--repeat 5]``.
Datasets are read from ``../shared/data`` (or ``$DASKANGEL_DATA``); absent ones are
skipped with a note.
"""

from __future__ import annotations

import argparse
import os
import tempfile

from _timing import median_time
from sklearn.datasets import load_svmlight_file

import daskangel as angel
from daskangel.data._build import BuildSpec, build_piece
from daskangel.data._formats import Libsvm
from daskangel.data._source import list_files, make_splits

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.environ.get("DASKANGEL_DATA", os.path.join(HERE, "..", "..", "shared", "data"))
if not os.path.isdir(DATA):
    DATA = "/work/shared/data"

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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--big-copies", type=int, default=24, help="a9a repeats for the big file")
    args = ap.parse_args()

    files = []
    for name, rel in SETS:
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
            t_sk = median_time(lambda p=path: load_svmlight_file(p), args.repeat)
            t_one = median_time(lambda p=path: _one_core(p), args.repeat)
            t_cl = median_time(
                lambda p=path: angel.data.read_libsvm(p).persist(client, n_partitions=2).release(),
                args.repeat,
            )
            rows.append((name, mb, mb / t_sk, mb / t_one, t_sk / t_one, mb / t_cl))

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
