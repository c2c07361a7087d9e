"""PSArray features beyond the conformance suite: creation, layout, dask, display."""

from __future__ import annotations

import itertools
import pickle
import threading
from typing import Any

import dask
import dask.array as da
import numpy as np
import pytest
import scipy.sparse as sp
import sparse
from distributed import Client

import daskangel as angel
from daskangel._compat import workers_info


def test_layout_and_placement(ps: angel.PSContext) -> None:
    w = ps.zeros("w", (1, 2**22), dtype="float32")  # 16 MiB vector
    blocks = w.blocks
    assert len(blocks) >= 2 * len(ps.servers)
    assert all(b.rows == (0, 1) for b in blocks)
    # neighbouring column blocks are on different servers
    assert all(a.server != b.server for a, b in itertools.pairwise(blocks))
    per_server: dict[Any, int] = {}
    for b in blocks:
        per_server[b.server] = per_server.get(b.server, 0) + b.shape[0] * b.shape[1]
    assert max(per_server.values()) - min(per_server.values()) <= blocks[0].shape[1]
    W = ps.zeros("W", (100_000, 64))
    assert all(b.cols == (0, 64) for b in W.blocks)  # whole rows kept together
    assert all(1 << 20 <= b.shape[0] * 64 * 4 <= 16 << 20 for b in W.blocks[:-1])


def test_repr_and_html(ps: angel.PSContext) -> None:
    w = ps.zeros("w", (1000, 10), block_shape=(250, 10))
    r = repr(w)
    assert "name='w'" in r and "(1000, 10)" in r and "4 blocks on 2 servers" in r
    h = w._repr_html_()
    assert "<table>" in h and "float32" in h and "tcp://" in h


def test_pickle_binds_late(ps: angel.PSContext) -> None:
    w = ps.zeros("w", (5,))
    data = pickle.dumps(w)
    assert len(data) < 200  # the name, not the cluster
    w2 = pickle.loads(data)
    w2.increment(np.ones(5, "float32"))
    np.testing.assert_array_equal(w.get(), np.ones(5))


def test_sparse_memory_and_lazy_init(ps: angel.PSContext) -> None:
    s = ps.zeros("s", (2**40,), sparse=True)
    keys = np.unique(np.random.default_rng(0).integers(0, 2**40, 200_000))
    s.increment(np.ones(keys.size, "float32"), cols=keys)
    assert s.nbytes <= 16 * keys.size  # <= 16 bytes per float32 entry, key included
    np.testing.assert_array_equal(s.get(cols=keys[:10]), 1)
    np.testing.assert_array_equal(s.get(cols=[1, 2, 3]), 0)  # missing keys read init
    r = ps.random("r", (2**40,), sparse=True, dist="normal", seed=5)
    first = r.get(cols=[7, 2**39])
    assert np.all(first != 0)
    np.testing.assert_array_equal(r.get(cols=[7, 2**39]), first)  # stored on first pull
    r.increment(np.ones(1, "float32"), cols=[2**38])  # untouched key: init + delta
    expected = angel.psarray.InitSpec("normal", 0, 1, 5).draw(
        np.array([2**38]), np.dtype("float32")
    )
    np.testing.assert_allclose(r.get(cols=[2**38]), expected + 1, rtol=1e-6)


def test_hash_partitioner(ps: angel.PSContext) -> None:
    h = ps.zeros("h", (3, 2**33), sparse=True, partitioner=angel.HashPartitioner(4))
    cols = np.arange(0, 4000, 4)  # strided keys still spread over all blocks
    h.increment(np.ones((3, cols.size), "float32"), cols=cols)
    got = h.get(rows=[0, 2], cols=cols)
    np.testing.assert_array_equal(got, 1)
    assert len(h.blocks) == 4


def test_sparse_inputs(ps: angel.PSContext) -> None:
    W = ps.zeros("W", (20, 30), dtype="float64", block_shape=(7, 11))
    m = sp.random(20, 30, density=0.2, random_state=1, format="csr")
    W.increment(m)
    c = sparse.COO.from_scipy_sparse(m)
    W.increment(c)
    np.testing.assert_allclose(W.get(), 2 * m.toarray())
    v = ps.zeros("v", (50,), dtype="float64")
    v.increment(sparse.COO(np.array([[3, 3, 9]]), np.array([1.0, 2.0, 4.0]), shape=(50,)))
    np.testing.assert_array_equal(v.get(cols=[3, 9]), [3.0, 4.0])


def test_async_overlap(ps: angel.PSContext) -> None:
    w = ps.zeros("w", (1000,), dtype="int64")
    futs = [w.increment_async(np.ones(1000, "int64")) for _ in range(20)]
    for f in futs:
        assert f.result() is None
    g = w.get_async(cols=[0, 999])
    np.testing.assert_array_equal(g.result(), [20, 20])
    assert g.done()


def test_from_array_and_like(ps: angel.PSContext) -> None:
    x = np.arange(600, dtype="float64").reshape(20, 30)
    a = ps.from_array("a", x, block_shape=(6, 7))
    np.testing.assert_array_equal(a.get(), x)
    d = da.from_array(x * 2, chunks=(5, 13))
    b = ps.from_array("b", d)
    np.testing.assert_array_equal(b.get(), x * 2)
    z = ps.zeros_like(a, name="z")
    assert [blk.server for blk in z.blocks] == [blk.server for blk in a.blocks]
    assert [blk.shape for blk in z.blocks] == [blk.shape for blk in a.blocks]
    again = ps.get_array("a")
    np.testing.assert_array_equal(again.get(rows=3), x[3])
    assert sorted(ps.arrays()) == ["a", "b", "z"]


def test_to_dask_array_versions(ps: angel.PSContext) -> None:
    W = ps.random("W", (40, 10), block_shape=(10, 5), seed=2)
    x1 = W.to_dask_array()
    assert x1.chunks == ((10, 10, 10, 10), (5, 5))
    before = x1.compute()
    np.testing.assert_array_equal(before, W.get())
    assert W.to_dask_array().name == x1.name  # no write: same keys
    W.increment(np.ones((40, 10), "float32"))
    x2 = W.to_dask_array()
    assert x2.name != x1.name
    np.testing.assert_allclose(x2.compute(), before + 1)
    s = ps.zeros("s", (4, 100), sparse=True, block_shape=(2, 50))
    s.increment(np.array([[5.0]], "float32"), rows=[3], cols=[60])
    xs = s.to_dask_array()
    chunk = xs.blocks[1, 1].compute()
    assert isinstance(chunk, sparse.COO)
    assert xs.sum().compute() == 5.0
    v = ps.zeros("v", (10,))
    assert v.to_dask_array().shape == (10,)


def test_servers_per_worker_and_explicit_workers(client: Client) -> None:
    with angel.PSContext(client, servers_per_worker=2) as ps:
        assert len(ps.servers) == 4
        w = ps.zeros("w", (1, 8000), block_shape=(1, 1000))
        assert len({b.server for b in w.blocks}) == 4
        w.increment(np.ones((1, 8000), "float32"))
        assert w.get().sum() == 8000
    one = sorted(workers_info(client))[0]
    with angel.PSContext(client, workers=[one]) as ps:
        w = ps.zeros("w", (100,))
        assert {b.server.address for b in w.blocks} == {one}
    with pytest.raises(ValueError, match="workers: not workers of this cluster"):
        angel.PSContext(client, workers=["tcp://10.9.9.9:1"])


def test_resource_workers(client: Client) -> None:
    one = sorted(workers_info(client))[-1]

    async def tag(dask_worker: Any) -> None:
        await dask_worker.set_resources(**{"daskangel-ps": 1})

    client.run(tag, workers=[one])
    with angel.PSContext(client, resource="daskangel-ps") as ps:
        assert [s.address for s in ps.servers] == [one]
    with pytest.raises(ValueError, match="no worker carries the resource 'gpu-ps'"):
        angel.PSContext(client, resource="gpu-ps")


def test_two_contexts_share_cluster(client: Client) -> None:
    with angel.PSContext(client) as a, angel.PSContext(client) as b:
        x = a.zeros("ctx-x", (3,))
        y = b.zeros("ctx-y", (3,))
        assert a.arrays() == ["ctx-x"] and b.arrays() == ["ctx-y"]
        a.close()
        y.increment(np.ones(3, "float32"))  # b unaffected by a closing
        assert y.get().sum() == 3
        with pytest.raises(angel.errors.ContextClosedError):
            x.get()


def test_int_arrays_and_fill(ps: angel.PSContext) -> None:
    a = ps.full("a", (4, 4), 7, dtype="int32")
    a.fill(3)
    np.testing.assert_array_equal(a.get(), np.full((4, 4), 3))
    with pytest.raises(TypeError, match="cannot cast float64 to the array's int32"):
        a.fill(2.5)
    with dask.config.set({"daskangel.client.casting": "same_kind"}):
        a.increment(np.ones((4, 4), "int64"))
    np.testing.assert_array_equal(a.get(), np.full((4, 4), 4))


def test_reads_are_atomic_per_block(ps: angel.PSContext, client: Client) -> None:
    """Whole-block reads, large (server thread) and small (event loop), never see
    half an increment: every block of every read is uniform."""
    w = ps.zeros("w", (2 * 2**20,), dtype="float32", block_shape=(2**20,))  # 4 MiB blocks
    small = ps.zeros("small", (2000,), dtype="float32", block_shape=(1000,))
    stop = threading.Event()

    def writer() -> None:
        ones, ones_small = np.ones(2 * 2**20, "float32"), np.ones(2000, "float32")
        for _ in range(30):
            w.increment(ones)
            small.increment(ones_small)
        stop.set()

    t = threading.Thread(target=writer)
    t.start()
    reads = 0
    while not stop.is_set() or reads < 3:
        for arr, n in ((w, 2**20), (small, 1000)):
            got = arr.get()
            for blk in (got[:n], got[n:]):
                assert blk.min() == blk.max(), "a read saw part of an increment"
        reads += 1
    t.join()
    assert w.get()[0] == 30 and small.get()[-1] == 30
