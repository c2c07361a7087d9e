"""KMeans side by side: daskangel against scikit-learn and dask-ml, quality and time.

Run::

    python benchmarks/bench_kmeans.py                     # jester (dense) + 20news tf-idf (sparse), k=20
    python benchmarks/bench_kmeans.py --datasets jester
    python benchmarks/bench_kmeans.py --seeds 0,1,2       # KMeans(n_init=3) like for like, by seed
    python benchmarks/bench_kmeans.py --synthetic         # seeded dense and sparse sets, k=100
    python benchmarks/bench_kmeans.py --smoke             # tiny blobs + a jester slice when present, < 60 s

Data (``../shared/data``, never downloaded, absent ones skipped):
``jester/jester-data-1.zip`` (24,983 x 100 ratings, "99 = not rated" read as 0,
the count column dropped) and ``20news-bow/docword.20news.txt.gz`` (18,846 x
21,600 counts, scikit-learn's ``TfidfTransformer()``: l2-normalised tf-idf rows).

Protocol: k=20, ``random_state=0``.  Every system's inertia is recomputed by
this script from the centres it returns (float64, exact distances).

* **scikit-learn** ``KMeans(n_init=3)`` (Lloyd, 2 threads): the reference.
* **dask-ml** ``dask_ml.cluster.KMeans`` (k-means||) on the same 2-worker
  cluster, the data as a dask array (it refuses scipy.sparse).
* **daskangel** ``KMeans`` (k-means||, Lloyd on the PS) and ``MiniBatchKMeans``
  on a 2-worker LocalCluster (processes, 1 thread each), from the numpy /
  scipy array: the time is end to end (spreading the rows, init, iterations,
  labels).  ``predict`` is compared with ``labels_`` row by row.

``--synthetic``: a seeded dense set (``--rows`` x 100, k=100, Gaussian blobs,
float32), made chunk by chunk on the driver for scikit-learn and from the same
seeded chunks on the workers (a dask array) for daskangel, and a seeded sparse
power-law set (``--sparse-rows`` x ``--sparse-features``, 20 entries a row);
``--iters`` (10) Lloyd iterations from the same given centres (``tol=0``), time
per iteration against scikit-learn with 2 threads on the same rows (scikit-learn
first, ``copy_x=False``; the driver's copy is dropped before daskangel runs):
daskangel's is the median step between iterations of its history, scikit-learn's
the difference between a fit of ``--iters`` iterations and one of 2 (so neither
counts a fit's set-up passes); peak RSS per worker.  Dense input is stored dense
on the workers (``DenseBatch``: 4 bytes an entry), persisted once and fitted twice:
every row assigned every iteration (``daskangel.kmeans.bounds: false``), then with
Hamerly's bounds (the default); each fit prints every step and, per task, its rows
and its seconds pulling, assigning, pushing and waiting at the clock (the balance).
``--sk-elkan`` adds scikit-learn's ``algorithm='elkan'`` (its bounded Lloyd) per iteration.
"""

from __future__ import annotations

import argparse
import gzip
import io
import os
import resource
import sys
import time
import zipfile
from typing import Any

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _data import data_root, have


def read_jester(root: Any, max_rows: int | None = None) -> np.ndarray | None:
    path = root / "jester" / "jester-data-1.zip"
    if not have(path):
        return None
    with zipfile.ZipFile(path) as z, z.open("jester-data-1.csv") as f:
        A = np.loadtxt(io.TextIOWrapper(f), delimiter=",", max_rows=max_rows)
    X = A[:, 1:]
    return np.where(X == 99, 0.0, X)


def read_20news_tfidf(root: Any, max_lines: int | None = None) -> sp.csr_matrix | None:
    path = root / "20news-bow" / "docword.20news.txt.gz"
    if not have(path):
        return None
    from sklearn.feature_extraction.text import TfidfTransformer

    with gzip.open(path, "rt") as f:
        D, W, _ = (int(f.readline()) for _ in range(3))
        t = np.loadtxt(f, dtype=np.int64, max_rows=max_lines)
    if max_lines is not None:  # the first documents only (the last one may be cut: dropped)
        D = int(t[:, 0].max()) - 1
        t = t[t[:, 0] <= D]
    X = sp.csr_matrix((t[:, 2].astype(np.float64), (t[:, 0] - 1, t[:, 1] - 1)), shape=(D, W))
    return sp.csr_matrix(TfidfTransformer().fit_transform(X))


def inertia(X: Any, C: np.ndarray, block: int = 4096) -> float:
    """Exact sum of squared distances to the nearest of ``C`` (float64, in blocks)."""
    C = np.asarray(C, np.float64)
    cn = (C * C).sum(1)
    total = 0.0
    for s in range(0, X.shape[0], block):
        B = X[s : s + block]
        if sp.issparse(B):
            B = sp.csr_matrix(B, dtype=np.float64)
            xn = np.asarray(B.multiply(B).sum(1)).ravel()
            dots = np.asarray(B @ C.T)
        else:
            B = np.asarray(B, np.float64)
            xn = (B * B).sum(1)
            dots = B @ C.T
        d2 = np.maximum(xn[:, None] - 2 * dots + cn[None], 0.0)
        total += float(d2.min(1).sum())
    return total


def peak_rss_mib(client: Any) -> float:
    """Largest peak RSS over the workers (MiB)."""

    def rss() -> float:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0

    return max(client.run(rss).values())


def run_sklearn(X: Any, k: int, n_init: int) -> dict[str, Any]:
    from sklearn.cluster import KMeans
    from threadpoolctl import threadpool_limits

    with threadpool_limits(2):
        t = time.perf_counter()
        km = KMeans(n_clusters=k, n_init=n_init, random_state=0).fit(X)
        dt = time.perf_counter() - t
    return {
        "system": f"scikit-learn KMeans(n_init={n_init})",
        "seconds": dt,
        "inertia": inertia(X, km.cluster_centers_),
        "n_iter": int(km.n_iter_),
        "agree": 1.0,
    }


def run_daskml(client: Any, X: Any, k: int) -> dict[str, Any]:
    name = "dask-ml KMeans (k-means||)"
    try:
        import dask.array as da
        from dask_ml.cluster import KMeans
    except ImportError as e:
        return {"system": name, "error": f"not installed ({e})"}
    t = time.perf_counter()
    try:
        Xd = da.from_array(X, chunks=(max(1, X.shape[0] // 2), X.shape[1]))
        km = KMeans(n_clusters=k, random_state=0).fit(Xd)
    except Exception as e:  # noqa: BLE001 - a refusal is a result
        return {"system": name, "error": f"{type(e).__name__}: {str(e)[:90]}"}
    dt = time.perf_counter() - t
    return {
        "system": name,
        "seconds": dt,
        "inertia": inertia(X, km.cluster_centers_),
        "n_iter": int(getattr(km, "n_iter_", -1)),
        "agree": float("nan"),
    }


def run_ours(X: Any, k: int, minibatch: bool, **kw: Any) -> dict[str, Any]:
    from daskangel.models import KMeans, MiniBatchKMeans

    est = (MiniBatchKMeans if minibatch else KMeans)(n_clusters=k, random_state=0, **kw)
    n_init = int(kw.get("n_init", 1))
    t = time.perf_counter()
    est.fit(X)
    dt = time.perf_counter() - t
    labels = np.asarray(est.labels_)
    agree = float((np.asarray(est.predict(X)) == labels).mean())
    C = est.cluster_centers_
    out = {
        "system": f"daskangel {type(est).__name__}" + (f"(n_init={n_init})" if n_init > 1 else ""),
        "seconds": dt,
        "inertia": inertia(X, C),
        "n_iter": int(est.n_iter_),
        "agree": agree,
    }
    est.close()
    return out


def table(title: str, rows: list[dict[str, Any]], ref: float) -> None:
    print(f"\n{title}")
    print(
        f"  {'system':40s} {'seconds':>8s} {'inertia':>14s} {'vs sklearn':>10s} {'iters':>6s} "
        f"{'predict=labels':>14s}"
    )
    for r in rows:
        if "error" in r:
            print(f"  {r['system']:40s} {r['error']}")
            continue
        print(
            f"  {r['system']:40s} {r['seconds']:8.2f} {r['inertia']:14.6g} "
            f"{r['inertia'] / ref - 1:+10.2%} {r['n_iter']:6d} {r['agree']:14.4f}"
        )


def compare(
    client: Any,
    name: str,
    X: Any,
    k: int,
    n_init: int,
    minibatch_kw: dict[str, Any] | None,
    peers: bool = True,
    n_inits: tuple[int, ...] = (1,),
    ours_kw: dict[str, Any] | None = None,
) -> None:
    print(
        f"{name}: {X.shape[0]} x {X.shape[1]}{' sparse' if sp.issparse(X) else ''}, k={k}",
        flush=True,
    )
    rows = [run_sklearn(X, k, n_init)]
    if peers:
        rows.append(run_daskml(client, X, k))
    for n_init in n_inits:
        rows.append(run_ours(X, k, False, n_init=n_init, **(ours_kw or {})))
    if minibatch_kw is not None:
        rows.append(run_ours(X, k, True, **minibatch_kw))
    table(name, rows, rows[0]["inertia"])
    print(f"  peak RSS per worker: {peak_rss_mib(client):.0f} MiB")


def seeds_table(
    client: Any, name: str, X: Any, k: int, seeds: list[int], init: str | None = None
) -> None:
    """Like for like: scikit-learn ``KMeans(n_init=3)`` and daskangel ``KMeans(n_init=3)``
    (each keeping the best of its 3 runs; ``init``: daskangel's, default its default)
    with the same ``random_state`` values."""
    from sklearn.cluster import KMeans as SkKMeans
    from threadpoolctl import threadpool_limits

    from daskangel.models import KMeans

    kw: dict[str, Any] = {} if init is None else {"init": init}
    print(f"\n{name}: KMeans(n_init=3) by random_state, inertia from the returned centres"
          f" (daskangel init={kw.get('init', 'default')!r})")  # fmt: skip
    print(
        f"  {'seed':>4s} {'scikit-learn':>14s} {'daskangel':>14s} {'diff':>8s} {'vs sklearn seed 0':>18s}"
    )
    sk_all, ours_all = [], []
    for seed in seeds:
        with threadpool_limits(2):
            sk = inertia(
                X, SkKMeans(n_clusters=k, n_init=3, random_state=seed).fit(X).cluster_centers_
            )
        t = time.perf_counter()
        km = KMeans(n_clusters=k, n_init=3, random_state=seed, **kw).fit(X)
        took = time.perf_counter() - t
        ours = inertia(X, km.cluster_centers_)
        km.close()
        sk_all.append(sk)
        ours_all.append(ours)
        print(f"  {seed:4d} {sk:14.6g} {ours:14.6g} {ours / sk - 1:+8.2%} {ours / sk_all[0] - 1:+18.2%}"
              f"   ({took:.0f} s)", flush=True)  # fmt: skip
    a, b = float(np.median(sk_all)), float(np.median(ours_all))
    print(
        f"  median {a:12.6g} {b:14.6g} {b / a - 1:+8.2%}  (mean: {np.mean(ours_all) / np.mean(sk_all) - 1:+.2%})"
    )


def dense_chunk(i: int, rows: int, k: int, d: int = 100) -> np.ndarray:
    """Rows ``[i * rows, (i + 1) * rows)`` of the seeded dense set: Gaussian blobs
    around ``k`` centres (the same rows wherever they are made)."""
    centres = np.random.default_rng(0).normal(0, 4, (k, d))
    rng = np.random.default_rng([0, i])
    X = rng.standard_normal((rows, d), dtype=np.float32)
    X += centres[rng.integers(0, k, rows)].astype(np.float32)
    return X


def dense_set(rows: int, k: int, chunk: int = 500_000) -> tuple[np.ndarray, Any]:
    """The seeded dense set on the driver (for scikit-learn) and as a dask array made
    on the workers from the same chunks (for daskangel): the driver never ships it."""
    import dask
    import dask.array as da

    sizes = [min(chunk, rows - s) for s in range(0, rows, chunk)]
    local = np.empty((rows, 100), np.float32)
    for i, (s, m) in enumerate(zip(range(0, rows, chunk), sizes, strict=True)):
        local[s : s + m] = dense_chunk(i, m, k)
    parts = [
        da.from_delayed(dask.delayed(dense_chunk)(i, m, k), (m, 100), np.float32)
        for i, m in enumerate(sizes)
    ]
    return local, da.concatenate(parts)


def sparse_chunk(i: int, rows: int, d: int, nnz_row: int = 20) -> sp.csr_matrix:
    """Rows ``[i * rows, (i + 1) * rows)`` of the seeded power-law set: ``nnz_row``
    features a row, feature ``f`` drawn with density ~ 1 / (f + 1) (the inverse
    of its continuous CDF, ``(d + 1)^u - 1``; duplicates summed), values 1,
    float32 (the same rows wherever made)."""
    rng = np.random.default_rng([1, i])
    u = rng.random(rows * nnz_row)
    cols = np.minimum(np.exp(u * np.log(d + 1.0)).astype(np.int64) - 1, d - 1)
    ptr = np.arange(0, rows * nnz_row + 1, nnz_row, dtype=np.int64)
    X = sp.csr_matrix((np.ones(cols.size, np.float32), cols.astype(np.int32), ptr), shape=(rows, d))
    X.sum_duplicates()
    return X


def sparse_set(rows: int, d: int, chunk: int = 500_000) -> tuple[sp.csr_matrix, Any]:
    """The seeded power-law set on the driver (for scikit-learn) and as a dask array of
    CSR chunks made on the workers from the same seeds (for daskangel)."""
    import dask
    import dask.array as da

    sizes = [min(chunk, rows - s) for s in range(0, rows, chunk)]
    local = sp.vstack([sparse_chunk(i, m, d) for i, m in enumerate(sizes)], format="csr")
    meta = sp.csr_matrix((0, d), dtype=np.float32)
    parts = [
        da.from_delayed(dask.delayed(sparse_chunk)(i, m, d), (m, d), np.float32, meta=meta)
        for i, m in enumerate(sizes)
    ]
    return local, da.concatenate(parts)


def sk_sparse_iteration(X: sp.csr_matrix, init: np.ndarray, reps: int) -> tuple[float, int]:
    """scikit-learn (2 threads) on CSR rows: seconds of one Lloyd iteration, its own
    kernel (``lloyd_iter_chunked_sparse``: assignment, sums, new centres) called
    ``reps`` times from ``init`` (median).  A whole fit would add its set-up passes,
    and at 10 M rows each iteration is minutes."""
    from sklearn.cluster._k_means_lloyd import lloyd_iter_chunked_sparse
    from threadpoolctl import threadpool_limits

    k = init.shape[0]
    C = np.ascontiguousarray(init, X.dtype)
    new = np.zeros_like(C)
    w = np.ones(X.shape[0], X.dtype)
    in_c, shift = np.zeros(k, X.dtype), np.zeros(k, X.dtype)
    labels = np.full(X.shape[0], -1, np.int32)
    took = []
    with threadpool_limits(2):
        for _ in range(reps):
            t = time.perf_counter()
            lloyd_iter_chunked_sparse(X, w, C, new, in_c, labels, shift, 2)
            took.append(time.perf_counter() - t)
            C, new = new, C
    return float(np.median(took)), reps


def sk_per_iteration(
    X: Any, init: np.ndarray, iters: int, algorithm: str = "lloyd"
) -> tuple[float, int]:
    """scikit-learn (2 threads): seconds per Lloyd iteration from ``init`` (``tol=0``):
    the time of a fit of ``iters`` iterations minus that of a fit of 2, over the
    difference (a fit's own passes -- row norms, the final labels -- cancel out).
    The 2-iteration fit runs twice and the faster counts: a first fit slowed by the
    machine's load made the difference too small (356 ms for 10 M x 100, 19:03Z)."""
    from sklearn.cluster import KMeans as SkKMeans
    from threadpoolctl import threadpool_limits

    k = init.shape[0]
    took = {}
    with threadpool_limits(2):
        for n in (2, 2, max(iters, 3)):
            t = time.perf_counter()
            sk = SkKMeans(n_clusters=k, init=init, n_init=1, max_iter=n, tol=0.0, copy_x=False,
                          algorithm=algorithm)  # fmt: skip
            sk.fit(X)
            s = time.perf_counter() - t
            took[int(sk.n_iter_)] = min(s, took.get(int(sk.n_iter_), s))
    (a, ta), (b, tb) = sorted(took.items())
    return (tb - ta) / max(b - a, 1), b


def ours_per_iteration(
    client: Any, X: Any, init: np.ndarray, iters: int, bounds: bool
) -> dict[str, Any]:
    """daskangel: seconds per Lloyd iteration (the median step of its history's
    clock), iterations, fit seconds, and where each task's seconds went.
    ``bounds``: ``daskangel.kmeans.bounds`` on the workers (Hamerly's bounds on dense rows)."""
    import dask

    from daskangel.models import KMeans

    client.run(lambda: dask.config.set({"daskangel.kmeans.bounds": bounds}))
    t = time.perf_counter()
    km = KMeans(n_clusters=init.shape[0], init=init, max_iter=iters, tol=0.0).fit(X)
    fit_s = time.perf_counter() - t
    n = max(int(km.n_iter_), 1)
    steps = np.diff(km.history_.time.to_numpy(float))
    per = float(np.median(steps)) if steps.size else float(km.history_.time.iloc[-1]) / n
    tasks = [
        (int(r["rows"]), r["seconds"], r.get("stored", "?"))
        for r in sorted(km.train_result_.results, key=lambda r: r["index"])
    ]
    km.close()
    client.run(lambda: dask.config.set({"daskangel.kmeans.bounds": True}))
    return {"per": per, "n": n, "fit": fit_s, "steps": steps, "tasks": tasks}


def report(client: Any, name: str, shape: tuple[int, int], k: int, sk: Any, ours: dict[str, Any],
           label: str = "daskangel") -> None:  # fmt: skip
    print(
        f"synthetic {name} {shape[0]} x {shape[1]}, k={k}: per Lloyd iteration "
        f"{label} {ours['per'] * 1e3:.1f} ms ({ours['n']} its; fit {ours['fit']:.1f} s with the "
        f"data's preparation), scikit-learn (2 threads) {sk[0] * 1e3:.1f} ms "
        f"({sk[1]} its), ratio {ours['per'] / sk[0]:.2f}; peak RSS per worker "
        f"{peak_rss_mib(client):.0f} MiB",
        flush=True,
    )
    print(f"  {label} steps (ms): " + " ".join(f"{s * 1e3:.0f}" for s in ours["steps"]))
    for i, (rows, sec, stored) in enumerate(ours["tasks"]):
        parts = ", ".join(f"{a} {b:.2f}" for a, b in sec.items())
        print(f"  task {i}: {rows} rows ({stored}); seconds: {parts}", flush=True)


def synthetic(
    client: Any,
    rows: int,
    sparse_rows: int,
    d_sparse: int,
    k: int,
    iters: int,
    elkan: bool = False,
    sk_reps: int = 2,
) -> None:
    """Time per Lloyd iteration on seeded dense and sparse sets (module docstring)."""
    from daskangel.data import from_array

    if rows:
        local, Xd = dense_set(rows, k)
        init = np.asarray(local[:k], np.float64)
        sk = sk_per_iteration(local, init, iters)
        print(f"scikit-learn lloyd (2 threads): {sk[0] * 1e3:.1f} ms an iteration", flush=True)
        if elkan:
            ske = sk_per_iteration(local, init, iters, "elkan")
            print(f"scikit-learn elkan (2 threads): {ske[0] * 1e3:.1f} ms an iteration", flush=True)
        del local  # scikit-learn's copy goes before daskangel's workers fill up
        ds = from_array(Xd, dense=True).persist(client, n_partitions=2)
        for bounds in (False, True):
            label = "daskangel" + (" (Hamerly's bounds)" if bounds else " (every row)")
            report(client, "dense", (rows, 100), k, sk,
                   ours_per_iteration(client, ds, init, iters, bounds), label)  # fmt: skip
        ds.release()
    if sparse_rows:
        t = time.perf_counter()
        local_s, Xs = sparse_set(sparse_rows, d_sparse)
        shape = local_s.shape
        print(f"sparse set {shape[0]} x {shape[1]}, nnz {local_s.nnz} "
              f"({local_s.data.nbytes + local_s.indices.nbytes + local_s.indptr.nbytes >> 20} MiB "
              f"CSR float32), made in {time.perf_counter() - t:.1f} s", flush=True)  # fmt: skip
        init = np.asarray(local_s[:k].toarray(), np.float64)
        sk = sk_sparse_iteration(local_s, init, sk_reps)
        print(f"scikit-learn sparse (2 threads): {sk[0] * 1e3:.1f} ms an iteration "
              f"(its kernel, median of {sk[1]})", flush=True)  # fmt: skip
        del local_s
        ds = from_array(Xs).persist(client, n_partitions=2)
        report(client, "sparse", shape, k, sk, ours_per_iteration(client, ds, init, iters, True))
        ds.release()


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--smoke", action="store_true", help="tiny generated blobs, < 60 s")
    ap.add_argument("--datasets", default="jester,20news")
    ap.add_argument("--k", type=int, default=20)
    ap.add_argument("--n-init", default="1,3", help="daskangel KMeans runs, one row each")
    ap.add_argument("--synthetic", action="store_true")
    ap.add_argument(
        "--seeds", default=None, help="e.g. 0,1,2: KMeans(n_init=3) like for like by seed"
    )
    ap.add_argument("--init", default=None, help="daskangel KMeans init (default: its default)")
    ap.add_argument("--rows", type=int, default=1_000_000, help="dense synthetic rows")
    ap.add_argument("--sparse-rows", type=int, default=None, help="default: --rows; 0 skips")
    ap.add_argument("--sparse-features", type=int, default=100_000)
    ap.add_argument("--iters", type=int, default=10, help="--synthetic: Lloyd iterations")
    ap.add_argument("--sk-reps", type=int, default=2,
                    help="--synthetic: scikit-learn sparse iterations timed (median)")  # fmt: skip
    ap.add_argument("--sk-elkan", action="store_true", help="--synthetic: scikit-learn's elkan too")
    args = ap.parse_args()
    from distributed import Client, LocalCluster

    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
        ) as cl,
        Client(cl) as client,
    ):
        if args.smoke:
            # dask-ml is left out: on the shared 2 cores it alone can outlast the smoke budget.
            # Every section, tiny: the data sets' first rows when they are there, and
            # the synthetic sets (dense and sparse per-iteration paths).
            J = read_jester(data_root(), max_rows=1000)
            if J is not None:
                compare(client, "smoke jester[:1000]", J, 5, 1, {"max_iter": 1},
                        peers=False, ours_kw={"max_iter": 5})  # fmt: skip
                seeds_table(client, "smoke jester[:300]", J[:300], 3, [0])
            N = read_20news_tfidf(data_root(), max_lines=20_000)
            if N is not None:
                compare(client, f"smoke 20news[:{N.shape[0]}]", N, 5, 1, None,
                        peers=False, ours_kw={"max_iter": 5})  # fmt: skip
            synthetic(client, 1000, 1000, 500, 4, 2)
            return
        if args.synthetic:
            sparse_rows = args.rows if args.sparse_rows is None else args.sparse_rows
            synthetic(client, args.rows, sparse_rows, args.sparse_features, 100, args.iters,
                      args.sk_elkan, args.sk_reps)  # fmt: skip
            return
        root = data_root()
        for name in args.datasets.split(","):
            X = read_jester(root) if name == "jester" else read_20news_tfidf(root)
            if X is None:
                continue
            if args.seeds is not None:
                seeds_table(client, name, X, args.k, [int(v) for v in args.seeds.split(",")],
                            args.init)  # fmt: skip
                continue
            n_inits = tuple(int(v) for v in args.n_init.split(","))
            compare(client, name, X, args.k, 3, {"max_iter": 30}, n_inits=n_inits)


if __name__ == "__main__":
    main()
