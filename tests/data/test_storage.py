"""Storage levels on a 2-process cluster: same reader, every row once per epoch,
memory held to the budget."""

from __future__ import annotations

import os

import dask
import numpy as np
import pytest
import scipy.sparse as sp

import daskangel as angel

N = 100_000


@pytest.fixture(scope="module")
def rows():
    X = sp.random(N, 200, density=0.1, random_state=5, format="csr", dtype=np.float32)
    return X, np.arange(N)


CHUNK = 64 * 1024


def _persist(rows, storage, budget=None):
    X, y = rows
    with dask.config.set({"daskangel.data.chunk-bytes": CHUNK}):
        return angel.data.from_array(X, y, storage=storage, memory_budget=budget).persist(
            n_partitions=4
        )


def _epochs(part, n_epochs, seed, shuffle=True):
    """A training pass as a task would run it: the labels seen, per epoch."""
    out = []
    for e in range(n_epochs):
        seen = [b.labels for b in part.batches(1000, shuffle=shuffle, seed=seed, epoch=e, window=2)]
        assert all(s.shape[0] == 1000 for s in seen[:-1])
        out.append(np.concatenate(seen).astype(np.int64))
    return out


def _managed(client):
    return client.run(lambda dask_worker: dask_worker.state.nbytes)


@pytest.mark.timeout(120)
def test_memory_disk_quarter_budget_reads_every_row_once_per_epoch(client, rows):
    data_bytes = _persist(rows, "memory").info
    total = sum(i.memory_nbytes for i in data_bytes)
    budget = total // 8  # per worker: a quarter of the data over the 2 workers
    ds = _persist(rows, "memory_disk", budget)
    per_worker = {}
    for i in ds.info:
        per_worker[i.worker] = per_worker.get(i.worker, 0) + i.memory_nbytes
        assert i.disk_nbytes > 0
    assert all(0 < m <= budget for m in per_worker.values())
    assert sum(i.memory_nbytes + i.disk_nbytes for i in ds.info) >= total * 0.95
    epochs = client.gather(ds.map_partitions(_epochs, 3, 11))
    for e in range(3):
        seen = np.sort(np.concatenate([p[e] for p in epochs]))
        np.testing.assert_array_equal(seen, np.arange(N))
    assert not np.array_equal(epochs[0][0], epochs[0][1])  # a new order each epoch
    again = client.gather(ds.map_partitions(_epochs, 1, 11))
    np.testing.assert_array_equal(again[0][0], epochs[0][0])  # same seed, same order


def _pass_peak(part):
    import tracemalloc

    next(iter(part.batches(500, shuffle=True, seed=0, window=2)))  # compile kernels first
    tracemalloc.start()
    try:
        n = sum(b.n_rows for b in part.batches(100, shuffle=True, seed=1, window=2))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return n, peak, part.disk_nbytes


@pytest.mark.timeout(120)
def test_disk_keeps_memory_to_a_window(client, rows):
    before = sum(_managed(client).values())
    ds = _persist(rows, "disk")
    assert all(i.memory_nbytes == 0 and i.disk_nbytes > 0 for i in ds.info)
    # Dask's managed memory grows by the handles only, not by the rows
    assert sum(_managed(client).values()) - before < 64 * 1024
    # one pass at a time: tracemalloc measures the whole worker process
    for f, w in zip(ds.partitions, ds.workers, strict=True):
        n, peak, on_disk = client.submit(_pass_peak, f, workers=[w], pure=False).result()
        assert n == N // 4
        # a pass holds a window of 2 chunks (+ a batch), not the partition: ~480 KiB
        # here; tracemalloc also counts the worker's other threads (comms,
        # heartbeats), which add up to a few hundred KiB on a busy machine
        print(f"disk pass: peak {peak / 1024:.0f} KiB, partition {on_disk / 1024:.0f} KiB")
        assert peak < 8 * (2 * CHUNK) < on_disk / 4
    paths = client.gather(ds.map_partitions(lambda p: sorted({c.path for c in p.chunks})))
    assert all(os.path.exists(q) for ps in paths for q in ps)
    ds.release()
    gone = client.run(lambda: all(not os.path.exists(q) for ps in paths for q in ps))
    assert all(gone.values())


@pytest.mark.timeout(120)
def test_every_level_gives_the_same_rows_in_the_same_file_order(client, rows):
    X, _ = rows
    got = {}
    for level, budget in (("memory", None), ("disk", None), ("memory_disk", 200_000)):
        ds = _persist(rows, level, budget)
        parts = client.gather(ds.map_partitions(lambda p: p.csr()))
        got[level] = parts
        seq = client.gather(ds.map_partitions(_epochs, 1, 0, False))
        np.testing.assert_array_equal(np.concatenate([s[0] for s in seq]), np.arange(N))
    for level in ("disk", "memory_disk"):
        for a, b in zip(got["memory"], got[level], strict=True):
            assert (a.to_scipy() != b.to_scipy()).nnz == 0
    full = angel.data.CSRBatch.from_arrays(X.indptr, X.indices, X.data, np.arange(N), 200)
    assert (sp.vstack([p.to_scipy() for p in got["memory"]]) != full.to_scipy()).nnz == 0


def test_bad_arguments(client, rows):
    with pytest.raises(ValueError, match="storage"):
        angel.data.from_array(rows[0], storage="ssd")
    with pytest.raises(ValueError, match="memory_budget"):
        angel.data.from_array(rows[0], storage="memory_disk")
    with pytest.raises(RuntimeError, match="persist"):
        angel.data.from_array(rows[0]).n_rows
    p = client.gather(
        _persist(rows, "memory").map_partitions(lambda p: _raises(lambda: list(p.batches(0))))
    )
    assert all("batch_size" in m for m in p)


def _raises(fn):
    try:
        fn()
    except ValueError as e:
        return str(e)
    return ""


@pytest.mark.timeout(120)
def test_dense_rows_stay_dense_in_memory_and_read_the_same_everywhere(client):
    """from_array(X, dense=True): a memory partition holds its block as one DenseBatch
    (no CSR copy); the disk level and every CSR reader see the same rows."""
    X = np.random.default_rng(0).normal(size=(3000, 6)).astype(np.float32)
    X[::7, 2] = 0.0
    y = np.arange(3000)
    for level in ("memory", "disk"):
        with dask.config.set({"daskangel.data.chunk-bytes": 16 * 1024}):
            ds = angel.data.from_array(X, y, dense=True, storage=level).persist(n_partitions=2)
        parts = client.gather(ds.map_partitions(lambda p: p.csr()))
        assert all(isinstance(p, angel.data.DenseBatch) == (level == "memory") for p in parts)
        if level == "memory":  # the CSR view is made once, not on every access
            assert all(p.indices is p.indices and p.indptr is p.indptr for p in parts)
            assert all(np.shares_memory(p.data, p.X) for p in parts)
        got = sp.vstack([p.to_scipy() for p in parts]).toarray()
        np.testing.assert_array_equal(got, X)
        np.testing.assert_array_equal(np.concatenate([p.labels for p in parts]), y)
        seq = client.gather(ds.map_partitions(_epochs, 1, 0, True))
        assert sorted(np.concatenate([s[0] for s in seq]).tolist()) == y.tolist()
        ds.release()


@pytest.mark.timeout(120)
def test_local_rows_split_evenly_over_the_partitions(client):
    """A local matrix is cut into a multiple of n_partitions blocks of equal rows, so
    whole blocks per partition stay balanced (7 blocks on 2 partitions were 4 / 3)."""
    X = sp.random(7000, 50, density=0.2, random_state=1, format="csr", dtype=np.float32)
    nbytes = X.data.nbytes + X.indices.nbytes + X.indptr.nbytes
    with dask.config.set({"daskangel.data.split-bytes": nbytes // 7 + 1}):
        ds = angel.data.from_array(X).persist(n_partitions=2)
    sizes = client.gather(ds.map_partitions(lambda p: p.csr().n_rows))
    assert sorted(sizes) == [3500, 3500]
    got = sp.vstack(client.gather(ds.map_partitions(lambda p: p.csr().to_scipy())))
    assert sorted(map(tuple, got.toarray().tolist())) == sorted(map(tuple, X.toarray().tolist()))
    ds.release()
