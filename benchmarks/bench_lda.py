"""LDA side by side: daskangel's CGS and MA-SVI against tomotopy and scikit-learn, one scorer for all.

Run::

    python benchmarks/bench_lda.py                       # KOS and 20news-bow, K=20, 200 sweeps
    python benchmarks/bench_lda.py --datasets kos --sweeps 100
    python benchmarks/bench_lda.py --staleness           # BSP vs SSP(1) vs SSP(3), LL per second
    python benchmarks/bench_lda.py --fig10 --png lda.png # data vs model vs hybrid (Angel Fig. 10)
    python benchmarks/bench_lda.py --synthetic           # K=20 and K=1000 on a planted corpus
                                                         # (100 M tokens, V=100 k; --synthetic-*)
    python benchmarks/bench_lda.py --smoke               # tiny generated corpus, < 60 s,
                                                         # in-process workers (figures mean nothing)

Data: ``../shared/data/kos`` and ``../shared/data/20news-bow`` (UCI docword;
``--data`` to point elsewhere).  A dataset whose file is absent is skipped with
a message; nothing is downloaded and nothing is written (``--png`` writes the
staleness plot where you say).

Protocol (the issue's): K=20, alpha=0.1, beta=0.01; one 10 % document split by
``daskangel.models.lda.heldout_mask(X, 0.1, seed=0)`` (a seeded hash of each
document: the split the estimator itself uses with ``random_state=0``); every
system's topics are scored by the same code,
``daskangel.models.lda.completion_log_likelihood`` (document completion: theta
folded in on half of each held-out document, the other half scored).

* **daskangel**: ``LDA(solver="cgs")`` on a 2-worker LocalCluster (processes,
  1 thread each: one task per worker), scored in the tasks every
  ``--every`` sweeps; tokens/s per sweep is the training tokens over the
  sweep's wall time (evaluation excluded), median over the sweeps.
* **daskangel MA-SVI**: ``LDA(solver="ma-svi")`` (MA-LDA: SVI on each task, models
  averaged through the PS), ``--svi-passes`` passes (default 10, the MLlib*
  paper's budget) of ``--svi-batch`` documents a minibatch per task (default:
  the estimator's ``batch_size='auto'``), scored after every pass, and its gap
  to scikit-learn's batch VB; the MLlib* paper's Table 3 comparison is printed
  as MA-SVI after 10 passes against CGS after 100 sweeps (LL and seconds).
  ``--no-cgs`` runs MA-SVI and the VB peers only.
* **tomotopy** ``LDAModel`` (CGS, 2 threads), trained ``--every`` sweeps at a
  time, its ``get_topic_word_dist`` scored after each chunk; tokens/s from the
  time in ``train`` only.
* **scikit-learn** ``LatentDirichletAllocation(learning_method="batch")``,
  10 passes (its usual budget: one pass costs ~50 CGS sweeps), and
  ``learning_method="online"`` (batch_size 128, 10 passes), the single-process
  counterpart of MA-SVI.

Printed: held-out LL/token per sweep (every ``--every``), tokens/s, the ratio
to tomotopy measured in the same run, and the time daskangel needs to reach
tomotopy's 100-sweep LL against tomotopy's time for those 100 sweeps.
"""

from __future__ import annotations

import argparse
import gzip
import os
import sys
import time
from typing import Any

import numpy as np
import scipy.sparse as sp

HERE = os.path.dirname(os.path.abspath(__file__))
# $DASKANGEL_DATA, else ../shared/data beside the checkout (as benchmarks/_data.py)
DATA = os.environ.get("DASKANGEL_DATA") or os.path.join(HERE, "..", "..", "shared", "data")
FILES = {
    "kos": ("kos", "docword.kos.txt.gz"),
    "20news": ("20news-bow", "docword.20news.txt.gz"),
}


def read_docword(path: str, max_docs: int | None = None) -> sp.csr_matrix:
    """A UCI docword file as a (D, W) count matrix (its first ``max_docs`` documents:
    the file is sorted by document, so only their lines are read)."""
    with gzip.open(path, "rt") if path.endswith(".gz") else open(path) as f:
        D, W, _ = (int(f.readline()) for _ in range(3))
        if max_docs is None:
            a = np.loadtxt(f, dtype=np.int64, ndmin=2)
        else:
            D = min(D, max_docs)
            lines = []
            for line in f:
                if int(line.split(maxsplit=1)[0]) > D:
                    break
                lines.append(line)
            a = np.loadtxt(lines, dtype=np.int64, ndmin=2).reshape(-1, 3)
    return sp.csr_matrix((a[:, 2], (a[:, 0] - 1, a[:, 1] - 1)), shape=(D, W))


def planted(n_docs: int, V: int, K: int, doc_len: int, seed: int) -> sp.csr_matrix:
    """A corpus from LDA's generative model (alpha 0.1, sparse planted topics)."""
    from daskangel.models.lda._synthetic import planted_counts

    return planted_counts(n_docs, V, K, doc_len, seed)


def cluster(n_workers: int = 2, processes: bool = True) -> Any:
    """The 2-worker cluster (``processes=False`` for ``--smoke``: no worker process
    imports daskangel and loads the kernels again, most of a smoke run's time on 2
    loaded cores; a smoke run's figures mean nothing)."""
    from distributed import Client, LocalCluster

    lc = LocalCluster(
        n_workers=n_workers, threads_per_worker=1, dashboard_address=":0",
        worker_dashboard_address=None, processes=processes,
    )  # fmt: skip
    return lc, Client(lc)


def run_daskangel(
    X: sp.csr_matrix,
    K: int,
    sweeps: int,
    every: int,
    sync: str = "bsp",
    seed: int = 0,
    Xte: sp.csr_matrix | None = None,
    **kw: Any,
) -> dict[str, Any]:
    from daskangel.models import LDA

    kw.setdefault("n_tasks", 2)
    m = LDA(
        n_topics=K, doc_topic_prior=0.1, topic_word_prior=0.01, max_iter=sweeps, sync=sync,
        evaluate_every=every, random_state=seed, progress=False, **kw,
    )  # fmt: skip
    t = time.perf_counter()
    m.fit(X)
    wall = time.perf_counter() - t
    h = m.history_
    out = {
        "curve": [
            (int(r.sweep), float(r.heldout_ll), float(r.time))
            for r in h.itertuples()
            if r.heldout_ll == r.heldout_ll
        ],
        "tps": float(np.nanmedian(h.tokens_per_s.to_numpy())),
        "tokens": m.n_train_tokens_,
        "wall": wall,
        "timings": [r.get("timings") for r in m.train_result_.results],
        "steps": getattr(m, "n_steps_", None),
    }
    if Xte is not None:  # the peers' scorer on the final topics (= the last in-fit score)
        from daskangel.models.lda import completion_log_likelihood

        ll, n = completion_log_likelihood(Xte, m.components_, 0.1, seed=seed)
        out["ll_ext"] = ll / n
    m.close()
    return out


def run_tomotopy(Xtr: sp.csr_matrix, Xte: sp.csr_matrix, K: int, sweeps: int, every: int,
                 seed: int = 0) -> dict[str, Any] | None:  # fmt: skip
    try:
        import tomotopy as tp
    except ImportError:
        print("  tomotopy not installed (pip install 'daskangel[bench]'): skipped")
        return None
    from daskangel.models.lda import completion_log_likelihood

    mdl = tp.LDAModel(k=K, alpha=0.1, eta=0.01, seed=seed)
    vocab = [str(w) for w in range(Xtr.shape[1])]
    for d in range(Xtr.shape[0]):
        a, b = Xtr.indptr[d], Xtr.indptr[d + 1]
        words = np.repeat(Xtr.indices[a:b], Xtr.data[a:b].astype(np.int64))
        if words.size:
            mdl.add_doc([vocab[w] for w in words])
    mdl.train(0, workers=2)
    ids = np.array([int(w) for w in mdl.used_vocabs], np.int64)
    tokens = int(Xtr.sum())
    curve, spent, rates = [], 0.0, []
    for s in range(every, sweeps + 1, every):
        t = time.perf_counter()
        mdl.train(every, workers=2)
        dt = time.perf_counter() - t
        spent += dt
        rates.append(tokens * every / max(dt, 1e-9))
        phi = np.full((K, Xtr.shape[1]), 1e-12)
        for k in range(K):
            phi[k, ids] = mdl.get_topic_word_dist(k)
        ll, n = completion_log_likelihood(Xte, phi, 0.1, seed=seed)
        curve.append((s, ll / n, spent))
    # tokens/s: the median over the chunks of ``every`` sweeps (as daskangel's median per sweep)
    return {"curve": curve, "tps": float(np.median(rates)), "tokens": tokens}


def run_sklearn(Xtr: sp.csr_matrix, Xte: sp.csr_matrix, K: int, passes: int = 10,
                seed: int = 0, method: str = "batch") -> dict[str, Any]:  # fmt: skip
    from sklearn.decomposition import LatentDirichletAllocation

    from daskangel.models.lda import completion_log_likelihood

    m = LatentDirichletAllocation(n_components=K, doc_topic_prior=0.1, topic_word_prior=0.01,
                                  learning_method=method, max_iter=passes, random_state=seed)  # fmt: skip
    t = time.perf_counter()
    m.fit(Xtr)
    spent = time.perf_counter() - t
    ll, n = completion_log_likelihood(Xte, m.components_, 0.1, seed=seed)
    return {"ll": ll / n, "tps": int(Xtr.sum()) * passes / spent, "time": spent}


def _at(curve: list[tuple[int, float, float]], sweep: int) -> tuple[float, float] | None:
    for s, ll, t in curve:
        if s == sweep:
            return ll, t
    return None


def compare(name: str, X: sp.csr_matrix, K: int, sweeps: int, every: int, peers: bool,
            svi: dict[str, Any] | None = None, sklearn: bool = True,
            cgs: bool = True) -> None:  # fmt: skip
    from daskangel.models.lda import heldout_mask

    held = heldout_mask(X, 0.1, 0)
    Xtr, Xte = X[~held], X[held]
    print(f"\n== {name}: D={X.shape[0]} V={X.shape[1]} tokens={int(X.sum())} "
          f"(train {int(Xtr.sum())}, held out {held.sum()} docs), K={K}, {sweeps} sweeps")  # fmt: skip
    skl = run_sklearn(Xtr, Xte, K) if peers and sklearn else None
    ours = compare_cgs(X, Xtr, Xte, K, sweeps, every, peers) if cgs else None
    if skl:
        print(f"sklearn  : batch VB 10 passes LL {skl['ll']:.4f}, {skl['tps'] / 1e6:.2f} M "
              f"tokens/s, {skl['time']:.1f} s")  # fmt: skip
    if svi is not None:
        compare_svi(X, Xtr, Xte, K, ours, svi, peers, skl)


def compare_cgs(X: sp.csr_matrix, Xtr: sp.csr_matrix, Xte: sp.csr_matrix, K: int, sweeps: int,
                every: int, peers: bool) -> dict[str, Any]:  # fmt: skip
    """CGS against tomotopy: LL per sweep, tokens/s, time to tomotopy's 100-sweep LL."""
    ours = run_daskangel(X, K, sweeps, every)
    tomo = run_tomotopy(Xtr, Xte, K, sweeps, every) if peers else None
    print(f"{'sweep':>6} {'daskangel LL':>13} {'time s':>8} {'tomotopy LL':>12} {'time s':>8}")
    for s, ll, t in ours["curve"]:
        tm = _at(tomo["curve"], s) if tomo else None
        tt = f"{tm[0]:12.4f} {tm[1]:8.2f}" if tm else f"{'':12} {'':8}"
        print(f"{s:6d} {ll:13.4f} {t:8.2f} {tt}")
    last = ours["curve"][-1][1] if ours["curve"] else float("nan")
    print(f"daskangel: LL {last:.4f} after {sweeps} sweeps, {ours['tps'] / 1e6:.2f} M tokens/s "
          f"(median per sweep, 2 workers), fit wall {ours['wall']:.1f} s")  # fmt: skip
    for i, t in enumerate(ours["timings"]):  # where a task's time went, per sweep
        if t:
            print(f"  task {i} seconds a sweep: "
                  + ", ".join(f"{k} {v / sweeps:.4f}" for k, v in t.items()))  # fmt: skip
    if tomo:
        print(f"tomotopy : LL {tomo['curve'][-1][1]:.4f}, {tomo['tps'] / 1e6:.2f} M tokens/s "
              f"(2 threads); daskangel/tomotopy speed ratio {ours['tps'] / tomo['tps']:.2f}")  # fmt: skip
        ref = _at(tomo["curve"], min(100, sweeps))
        if ref is not None:
            hit = next(((s, t) for s, ll, t in ours["curve"] if ll >= ref[0]), None)
            if hit:
                print(f"time to tomotopy's {min(100, sweeps)}-sweep LL {ref[0]:.4f}: daskangel "
                      f"{hit[1]:.2f} s (sweep {hit[0]}) vs tomotopy {ref[1]:.2f} s: ratio "
                      f"{hit[1] / ref[1]:.2f}")  # fmt: skip
            else:
                print(
                    f"daskangel did not reach tomotopy's {min(100, sweeps)}-sweep LL {ref[0]:.4f}"
                )
    return ours


def compare_svi(X: sp.csr_matrix, Xtr: sp.csr_matrix, Xte: sp.csr_matrix, K: int,
                cgs: dict[str, Any] | None, svi: dict[str, Any], peers: bool,
                batch_vb: dict[str, Any] | None = None) -> None:  # fmt: skip
    """MA-SVI's curve, its gap to batch VB, its Table 3 comparison with CGS, and
    scikit-learn's online VB.  ``svi["batch"]`` None: the estimator's default."""
    passes = svi["passes"]
    kw = {} if svi["batch"] is None else {"batch_size": svi["batch"]}
    r = run_daskangel(X, K, passes, 1, solver="ma-svi", Xte=Xte, **kw)
    n_b = (r["steps"] or 0) // passes
    print(f"MA-SVI   : {passes} passes, batch_size={svi['batch'] or 'the default'}: {n_b} "
          "minibatch steps a pass per task (2 tasks, models averaged every minibatch)")  # fmt: skip
    print(f"{'pass':>6} {'MA-SVI LL':>10} {'time s':>8}")
    for s, ll, t in r["curve"]:
        print(f"{s:6d} {ll:10.4f} {t:8.2f}")
    s, ll, t = r["curve"][-1]
    print(f"MA-SVI   : LL {ll:.4f} after {s} passes (peers' scorer on components_: "
          f"{r['ll_ext']:.4f}), {r['tps'] / 1e6:.3f} M tokens/s (median per pass), {t:.2f} s")  # fmt: skip
    if batch_vb:
        print(f"MA-SVI - batch VB (10 passes, same split and scorer) = {ll - batch_vb['ll']:+.4f} "
              "nats/token")  # fmt: skip
    if cgs is None:
        ref = None
    else:
        ref = _at(cgs["curve"], 100) or (cgs["curve"][-1][1:] if cgs["curve"] else None)
    n10 = 10 if _at(r["curve"], 10) else s
    at10 = _at(r["curve"], 10) or (ll, t)
    if ref is not None and cgs is not None:
        n = 100 if _at(cgs["curve"], 100) else cgs["curve"][-1][0]
        print(f"Table 3 (MLlib*): MA-SVI {n10} passes LL {at10[0]:.4f} in {at10[1]:.2f} s vs CGS "
              f"{n} sweeps LL {ref[0]:.4f} in {ref[1]:.2f} s: MA-SVI - CGS = "
              f"{at10[0] - ref[0]:+.4f} nats/token")  # fmt: skip
    if peers and svi.get("online", True):
        on = run_sklearn(Xtr, Xte, K, method="online")
        print(f"sklearn  : online VB 10 passes LL {on['ll']:.4f}, {on['tps'] / 1e6:.3f} M "
              f"tokens/s, {on['time']:.1f} s; MA-SVI/online time ratio "
              f"{t / on['time']:.2f}")  # fmt: skip


def staleness(X: sp.csr_matrix, K: int, sweeps: int, every: int, png: str | None,
              syncs: tuple[str, ...] = ("bsp", "ssp:1", "ssp:3")) -> None:  # fmt: skip
    print(f"\n== staleness: {' vs '.join(syncs)}, K={K}, {sweeps} sweeps")
    curves = {}
    for sync in syncs:
        r = run_daskangel(X, K, sweeps, every, sync=sync)
        curves[sync] = r["curve"]
        _s, ll, t = r["curve"][-1]
        print(f"{sync:>6}: LL {ll:.4f} at {t:.2f} s, {r['tps'] / 1e6:.2f} M tokens/s")
    if png:
        _plot(curves, png, per_sweep=False)


def fig10(X: sp.csr_matrix, K: int, sweeps: int, every: int, png: str | None,
          only: tuple[str, ...] = ("data", "model", "hybrid")) -> None:  # fmt: skip
    """Angel's Fig. 10: data vs model vs hybrid parallelism, 4 tasks on the 2 workers."""
    print(f"\n== Angel Fig. 10: data (4 groups x 1) vs model (1 x 4) vs hybrid (2 x 2), "
          f"K={K}, {sweeps} sweeps")  # fmt: skip
    modes: dict[str, dict[str, Any]] = {"data": {}, "model": {}, "hybrid": {"groups": 2}}
    modes = {k: v for k, v in modes.items() if k in only}
    curves = {}
    print(f"{'mode':>7} {'LL':>9} {'train s':>8} {'s/sweep':>8} {'M tok/s':>8}")
    for mode, extra in modes.items():
        r = run_daskangel(X, K, sweeps, every, parallelism=mode, n_tasks=4, **extra)
        curves[mode] = r["curve"]
        s, ll, t = r["curve"][-1]
        print(f"{mode:>7} {ll:9.4f} {t:8.2f} {t / s:8.3f} {r['tps'] / 1e6:8.2f}")
    sw = sorted({s for c in curves.values() for s, _, _ in c})
    print("LL per sweep:  " + " ".join(f"{m:>9}" for m in curves))
    for s in sw:
        row = [
            next((f"{ll:9.4f}" for s2, ll, _ in c if s2 == s), f"{'':9}") for c in curves.values()
        ]
        print(f"{s:13d}  " + " ".join(row))
    if png:
        _plot(curves, png, per_sweep=True)


def _plot(curves: dict[str, list[tuple[int, float, float]]], png: str, per_sweep: bool) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = 2 if per_sweep else 1
    fig, axes = plt.subplots(1, n, figsize=(5 * n, 3.6), squeeze=False)
    for k, c in curves.items():
        if per_sweep:
            axes[0][0].plot([s for s, _, _ in c], [ll for _, ll, _ in c], marker=".", label=k)
        axes[0][n - 1].plot([t for _, _, t in c], [ll for _, ll, _ in c], marker=".", label=k)
    if per_sweep:
        axes[0][0].set_xlabel("sweep")
    axes[0][n - 1].set_xlabel("training seconds")
    for ax in axes[0]:
        ax.set_ylabel("held-out LL / token")
        ax.legend()
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    print(f"wrote {png}")


def synthetic(n_tokens: int, V: int, K: int, sweeps: int, seed: int,
              ks: tuple[int, ...] | None = None, peers: bool = False) -> None:  # fmt: skip
    """Tokens/s per sweep and peak memory per worker on a planted corpus, at each of
    ``ks`` topics (tomotopy on the same corpus and topics with ``peers``)."""
    doc_len = 1000
    n_docs = max(1, n_tokens // doc_len)
    t = time.perf_counter()
    X = planted(n_docs, V, K, doc_len, seed)
    print(f"\n== synthetic: {n_docs} docs x {doc_len} tokens = {int(X.sum())} tokens, V={V}, "
          f"planted K={K} (generated in {time.perf_counter() - t:.1f} s, seed {seed}); "
          f"{sweeps} sweeps, no held-out split")  # fmt: skip
    from daskangel.models import LDA

    rates: dict[int, float] = {}
    for k in ks or (20, K):
        m = LDA(n_topics=k, doc_topic_prior=0.1, topic_word_prior=0.01, max_iter=sweeps,
                evaluate_every=0, validation_fraction=0.0, random_state=seed, n_tasks=2,
                progress=False)  # fmt: skip
        t = time.perf_counter()
        m.fit(X)
        wall = time.perf_counter() - t
        tps = m.history_.tokens_per_s.to_numpy()
        peak = m._client().run(_peak_rss)
        print(f"K={k:5d}: tokens/s per sweep {', '.join(f'{v / 1e6:.2f}M' for v in tps)} "
              f"(median {np.median(tps) / 1e6:.2f} M); fit wall {wall:.1f} s (init and "
              f"partitioning included); peak RSS per worker "
              f"{', '.join(f'{v / 2**30:.2f} GiB' for v in peak.values())}")  # fmt: skip
        for i, r in enumerate(m.train_result_.results):
            tm = r.get("timings")
            if tm:
                print(f"  task {i} seconds a sweep: "
                      + ", ".join(f"{a} {b / sweeps:.4f}" for a, b in tm.items()))  # fmt: skip
            if r.get("state_bytes"):
                print(f"  task {i}: {r['tokens']} tokens, worker-side state "
                      f"{r['state_bytes'] / 2**20:.0f} MiB "
                      f"({r['state_bytes'] / max(r['tokens'], 1):.1f} bytes a token)")  # fmt: skip
        rates[k] = float(np.median(tps))
        m.close()
        if peers:
            tomo = _tomotopy_rate(X, k, sweeps, seed)
            if tomo:
                print(f"  tomotopy K={k} (2 threads, same corpus): {tomo / 1e6:.2f} M tokens/s; "
                      f"daskangel/tomotopy {rates[k] / tomo:.2f}")  # fmt: skip
    if len(rates) > 1:
        lo, hi = min(rates), max(rates)
        print(f"K={hi} / K={lo} median tokens/s: {rates[hi] / rates[lo]:.3f} (the issue: >= 0.25)")


def _tomotopy_rate(X: sp.csr_matrix, K: int, sweeps: int, seed: int) -> float | None:
    """tomotopy's tokens/s (2 threads) over ``sweeps`` sweeps of ``X`` (median per sweep)."""
    try:
        import tomotopy as tp
    except ImportError:
        print("  tomotopy not installed (pip install 'daskangel[bench]'): skipped")
        return None
    mdl = tp.LDAModel(k=K, alpha=0.1, eta=0.01, seed=seed)
    vocab = [str(w) for w in range(X.shape[1])]
    for d in range(X.shape[0]):
        a, b = X.indptr[d], X.indptr[d + 1]
        words = np.repeat(X.indices[a:b], X.data[a:b].astype(np.int64))
        if words.size:
            mdl.add_doc([vocab[w] for w in words])
    mdl.train(0, workers=2)
    tokens = int(X.sum())
    rates = []
    for _ in range(sweeps):
        t = time.perf_counter()
        mdl.train(1, workers=2)
        rates.append(tokens / max(time.perf_counter() - t, 1e-9))
    return float(np.median(rates))


def _peak_rss() -> int:
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def smoke(data: str) -> None:
    """Tiny runs of every code path (< 25 s on a quiet machine): the first 300 KOS
    documents side by side with the peers when the data set is there (each missing
    one named, skipped), else a planted corpus; on a tiny planted corpus one run
    each of SSP, model and hybrid parallelism (data parallel BSP ran above) and the
    synthetic section at K=50, 2 sweeps (1 for the synthetic one)."""
    t0 = time.perf_counter()
    X = None
    for name in FILES:
        folder, fname = FILES[name]
        path = os.path.join(data, folder, fname)
        if not os.path.exists(path):
            print(f"{name}: {path} is missing (see ../shared/data/README.md); skipped")
        elif name == "kos":
            X = read_docword(path, max_docs=300)
            X = X[:, np.unique(X.indices)]  # the words these documents use
        else:
            print(f"{name}: read by full runs only (the smoke run takes a slice of KOS)")
    svi = {"passes": 1, "batch": 64}
    if X is not None:
        compare("smoke (KOS, first 300 documents)", X, 10, 4, 2, peers=True, svi=svi)
    else:
        compare("smoke (planted)", planted(300, 400, 5, 60, seed=0), 5, 4, 2, peers=True, svi=svi)
    print(f"[smoke] compare done at {time.perf_counter() - t0:.1f} s")
    P = planted(200, 300, 5, 40, seed=1)
    staleness(P, 5, 2, 1, None, syncs=("ssp:1",))
    fig10(P, 5, 2, 1, None, only=("model", "hybrid"))
    print(f"[smoke] staleness and Fig. 10 done at {time.perf_counter() - t0:.1f} s")
    synthetic(20_000, 1_000, 50, 1, seed=0, ks=(50,))
    print(f"[smoke] done in {time.perf_counter() - t0:.1f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--datasets", default="kos,20news")
    ap.add_argument("--data", default=DATA)
    ap.add_argument("--sweeps", type=int, default=200)
    ap.add_argument("--every", type=int, default=10)
    ap.add_argument("--topics", type=int, default=20)
    ap.add_argument("--no-peers", action="store_true")
    ap.add_argument("--staleness", action="store_true")
    ap.add_argument("--fig10", action="store_true")
    ap.add_argument("--synthetic", action="store_true")
    ap.add_argument("--synthetic-tokens", type=int, default=100_000_000)
    ap.add_argument("--synthetic-words", type=int, default=100_000)
    ap.add_argument("--synthetic-topics", default="20,1000", help="K values, comma-separated")
    ap.add_argument("--synthetic-sweeps", type=int, default=3)
    ap.add_argument("--png", default=None)
    ap.add_argument("--svi-passes", type=int, default=10)
    ap.add_argument(
        "--svi-batch",
        type=int,
        default=None,
        help="MA-SVI documents per minibatch per task (default: the estimator's)",
    )
    ap.add_argument("--no-cgs", action="store_true", help="MA-SVI and the VB peers only")
    ap.add_argument("--no-online", action="store_true", help="skip scikit-learn's online VB")
    ap.add_argument("--no-svi", action="store_true")
    ap.add_argument("--no-sklearn", action="store_true")
    ap.add_argument("--smoke", action="store_true")
    a = ap.parse_args()
    lc, client = cluster(processes=not a.smoke)
    try:
        if a.smoke:
            smoke(a.data)
            return
        for name in filter(None, a.datasets.split(",")):
            folder, fname = FILES[name]
            path = os.path.join(a.data, folder, fname)
            if not os.path.exists(path):
                print(f"{name}: {path} is missing (see ../shared/data/README.md); skipped")
                continue
            X = read_docword(path)
            if not (a.staleness or a.fig10):
                svi = None if a.no_svi else {"passes": a.svi_passes, "batch": a.svi_batch,
                                              "online": not a.no_online}  # fmt: skip
                compare(name, X, a.topics, a.sweeps, a.every, peers=not a.no_peers, svi=svi,
                        sklearn=not a.no_sklearn, cgs=not a.no_cgs)  # fmt: skip
            png = a.png and a.png.replace(".png", f"-{name}.png")
            if a.staleness:
                staleness(X, a.topics, a.sweeps, a.every, png and png.replace(".png", "-ssp.png"))
            if a.fig10:
                fig10(X, a.topics, a.sweeps, a.every, png and png.replace(".png", "-fig10.png"))
        if a.synthetic:
            ks = tuple(int(k) for k in a.synthetic_topics.split(","))
            synthetic(a.synthetic_tokens, a.synthetic_words, 1000, a.synthetic_sweeps, seed=0,
                      ks=ks, peers=not a.no_peers)  # fmt: skip
    finally:
        client.close()
        lc.close()


if __name__ == "__main__":
    sys.exit(main())
