"""The row path (issue 14 section 1): random-row gets planned sorted, get_iter and
agent reads without extra copies, and compressed-row (CSR) writes into dense matrices."""

from __future__ import annotations

from typing import Any

import dask
import numpy as np
import pytest
import scipy.sparse as sp

import daskangel as angel
from daskangel.errors import ShapeMismatchError
from daskangel.psarray._agent import agent_of
from daskangel.psarray._initspec import InitSpec
from daskangel.psarray._plan import plan_coo
from daskangel.psarray._server import PSServer

pytestmark = pytest.mark.timeout(180)


def _matrix(ps: angel.PSContext, name: str, shape: tuple[int, int], dtype: str) -> np.ndarray:
    ref = np.arange(shape[0] * shape[1]).reshape(shape).astype(dtype)
    a = ps.zeros(name, shape, dtype=dtype, block_shape=(7, shape[1]))
    a.set(ref)
    return ref


def test_random_rows_in_request_order(ps: angel.PSContext) -> None:
    ref = _matrix(ps, "m", (50, 6), "float32")
    a = ps.get_array("m")
    rng = np.random.default_rng(0)
    for idx in (rng.permutation(50), rng.integers(0, 50, 80), np.array([9, 3]), [4, 4, 1]):
        np.testing.assert_array_equal(a.get(rows=idx), ref[idx])
        np.testing.assert_array_equal(a.get_async(rows=idx).result(), ref[idx])
        np.testing.assert_array_equal(a.get(rows=idx, cols=2), ref[idx, 2])
        np.testing.assert_array_equal(a.get(rows=idx, cols=[5, 0]), ref[idx][:, [5, 0]])
    mask = np.zeros(50, bool)
    mask[[3, 30]] = True
    np.testing.assert_array_equal(a.get(rows=mask), ref[mask])


def test_get_iter_and_agent_reads(ps: angel.PSContext) -> None:
    ref = _matrix(ps, "g", (60, 40), "int32")  # 7-row blocks of 160 bytes a row
    a = ps.get_array("g")
    rng = np.random.default_rng(1)
    for rows in (np.arange(0, 60, 2), rng.integers(0, 60, 45)):
        seen = []
        for rb, vals in a.get_iter(rows, batch=8):
            np.testing.assert_array_equal(vals, ref[rb])
            seen.append(rb)
        np.testing.assert_array_equal(np.sort(np.concatenate(seen)), np.sort(rows))
    agent = agent_of(a._binding)
    np.testing.assert_array_equal(agent.get("g", rows=np.arange(5, 50)), ref[5:50])
    # the reader owns its result: writing into it changes neither the servers nor a cache
    got = agent.get("g", rows=np.arange(10))
    got[:] = -1
    np.testing.assert_array_equal(a.get(rows=np.arange(10)), ref[:10])


def test_get_iter_in_several_requests(ps: angel.PSContext) -> None:
    """Batches requested in several chunks (all sent up front): every row arrives
    once per occurrence, in request order with ``ordered=True``, for every dtype,
    with duplicates, and an empty request yields nothing (worker processes: the
    replies are serialised)."""
    for dtype in ("int32", "float32", "float64"):
        ref = _matrix(ps, f"chunks-{dtype}", (90, 12), dtype)
        a = ps.get_array(f"chunks-{dtype}")
        agent = agent_of(a._binding)
        per = 5 * 12 * np.dtype(dtype).itemsize  # bytes of a batch of 5 rows
        rows = np.concatenate([np.random.default_rng(2).permutation(90), [7, 7, 0]])
        with dask.config.set({"daskangel.agent.pipeline-request-bytes": 4 * per}):
            r0 = agent.requests
            got = list(a.get_iter(rows, batch=5, ordered=True))
            assert agent.requests - r0 == 5  # 19 batches, at most 4 a request
            assert list(a.get_iter(np.arange(0), batch=5)) == []
            arrived = list(a.get_iter(rows, batch=5))
        np.testing.assert_array_equal(np.concatenate([r for r, _ in got]), rows)
        assert [r.shape[0] for r, _ in got] == [5] * 18 + [3]
        for rb, vals in got + arrived:
            assert vals.dtype == np.dtype(dtype) and vals.shape == (rb.shape[0], 12)
            np.testing.assert_array_equal(vals, ref[rb])
        assert sorted(np.concatenate([r for r, _ in arrived]).tolist()) == sorted(rows.tolist())


def _reply_pools(dask_worker: Any) -> int:
    return len(dask_worker.plugins["daskangel-ps"].reply_pool._bufs)


def test_row_gets_reuse_their_buffers(ps: angel.PSContext) -> None:
    """Servers gather a get's rows into reused reply buffers and the caller receives
    rows planned sorted into a reused scratch buffer: repeated gets allocate no new
    buffers, and every result stays its own (no later get changes an earlier one)."""
    ref = np.arange(3000 * 40, dtype="float64").reshape(3000, 40)  # 320 bytes a row
    a = ps.zeros("pooled", ref.shape, dtype="float64")  # a block per server
    a.set(ref)
    rng = np.random.default_rng(3)
    rows = rng.choice(3000, 1200, replace=False)
    idx = [rng.permutation(rows) for _ in range(8)]  # the same sizes every time
    # a reply's buffer is free once Dask's comm handler drops it (at its next request)
    got = [a.get(rows=i) for i in idx[:3]]
    before = sum(ps.client.run(_reply_pools).values())
    scratch = a._binding._scratch
    assert scratch is not None
    n_scratch = len(scratch._bufs)
    got += [a.get(rows=i) for i in idx[3:]]
    got.append(a.get_async(rows=idx[0]).result())
    assert sum(ps.client.run(_reply_pools).values()) == before > 0
    assert len(scratch._bufs) == n_scratch
    # results are views of reused buffers: a dropped result's buffer serves the
    # next get, and no result still held is shared
    results = a._binding._results
    assert results is not None
    one = a.get(rows=idx[1])
    n = len(results._bufs)
    for i in (2, 3, 4):
        del one
        one = a.get(rows=idx[i])
        np.testing.assert_array_equal(one, ref[idx[i]])
        assert not any(np.shares_memory(one, g) for g in got)
    assert len(results._bufs) == n
    for i, g in zip(idx + idx[:1], got, strict=True):
        np.testing.assert_array_equal(g, ref[i])
        assert not any(np.shares_memory(g, x) for x in scratch._bufs)


@pytest.mark.parametrize("dtype", ["int32", "float32", "float64"])
def test_csr_increment_and_set(ps: angel.PSContext, dtype: str) -> None:
    shape = (40, 30)
    a = ps.zeros("c", shape, dtype=dtype, block_shape=(9, 30))
    rng = np.random.default_rng(2)
    rows = rng.integers(0, 40, 120)
    cols = rng.integers(0, 30, 120)
    vals = rng.integers(1, 5, 120).astype(dtype)
    X = sp.csr_matrix((vals, (rows, cols)), shape=shape)  # duplicates summed by scipy
    # a CSR with duplicate entries in a row (not canonical): they add up
    dup = sp.csr_matrix(
        (np.ones(3, dtype), np.array([4, 4, 7]), np.array([0] * 6 + [3] * 35)), shape=shape
    )
    assert plan_coo(a.meta, X, None, None)[0][0].keys() >= {"csr_rows", "csr_cols", "csr_len"}
    a.increment(X)
    a.increment(dup)
    want = X.toarray() + dup.toarray()
    np.testing.assert_array_equal(a.get(), want)
    Y = sp.random(40, 30, density=0.1, random_state=3, format="csr")
    Y.data = rng.integers(1, 5, Y.nnz).astype(float)
    Y = Y.astype(dtype)
    a.set(Y)
    want[Y.nonzero()] = Y.toarray()[Y.nonzero()]
    np.testing.assert_array_equal(a.get(), want)


def test_csr_falls_back_where_it_does_not_apply(ps: angel.PSContext) -> None:
    X = sp.random(12, 20, density=0.2, random_state=4, format="csr", dtype="float32")
    s = ps.zeros("sp", (12, 20), dtype="float32", sparse=True)  # sparse blocks: coordinates
    b = ps.zeros("cb", (12, 20), dtype="float32", block_shape=(5, 7))  # cut by columns too
    for arr in (s, b):
        assert "coo_rows" in next(iter(plan_coo(arr.meta, X, None, None)[0].values()))
        arr.increment(X)
        np.testing.assert_allclose(arr.get(), X.toarray())
    bad = X.copy()
    bad.data[1] = np.nan  # skipped entries go the coordinate way
    b.increment(bad, on_nonfinite="skip")
    want = 2 * X.toarray()
    want[bad.nonzero()[0][1], bad.nonzero()[1][1]] -= X.data[1]
    np.testing.assert_allclose(b.get(), want, rtol=1e-6)


def test_server_rejects_bad_csr_parts_and_changes_nothing() -> None:
    s = PSServer("local", 0)
    spec = {"kind": "dense", "shape": (4, 5), "dtype": "float32", "init": InitSpec().to_dict()}
    s.dispatch(
        "create", array="w", blocks=[{"block": 0, **spec, "row0": 0, "col0": 0, "n_cols": 5}]
    )
    s.dispatch(
        "create",
        array="z",
        blocks=[{"block": 0, **spec, "kind": "sparse", "row0": 0, "col0": 0, "n_cols": 5}],
    )

    def part(rows: list[int], lens: list[int], cols: list[int]) -> dict[str, object]:
        return {
            "block": 0,
            "csr_rows": np.array(rows, np.int32),
            "csr_len": np.array(lens, np.int32),
            "csr_cols": np.array(cols, np.int32),
            "values": np.ones(len(cols), "float32"),
        }

    good = part([0, 2], [1, 1], [1, 4])
    for bad in (part([0, 2], [1, 2], [1, 4]), part([0], [1, 1], [1, 4])):
        with pytest.raises(ShapeMismatchError):
            s.dispatch("update", array="w", add=True, parts=[good, bad])
    with pytest.raises(angel.errors.PSIndexError):
        s.dispatch("update", array="w", add=True, parts=[part([0, 4], [1, 1], [1, 4])])
    with pytest.raises(angel.errors.PSIndexError):
        s.dispatch("update", array="w", add=True, parts=[part([0], [1], [5])])
    with pytest.raises(angel.errors.InvalidArgumentError):
        s.dispatch("update", array="z", add=True, parts=[good])
    np.testing.assert_array_equal(
        s.dispatch("get", array="w", parts=[{"block": 0, "rows": None, "cols": None}])[0], 0
    )
    s.dispatch("update", array="w", add=True, parts=[good])
    got = s.dispatch("get", array="w", parts=[{"block": 0, "rows": None, "cols": None}])[0]
    assert got[0, 1] == 1 and got[2, 4] == 1 and got.sum() == 2


@pytest.mark.parametrize("kind", ["sorted", "direct"])
def test_cache_insert_merges_in_place(kind: str) -> None:
    """Both pull-cache stores (sorted unit lists; a slot per unit, whose inserts cost
    the batch and not the store) keep a cached unit fresher than the fetch, evict the
    least fresh first and forget everything on clear."""
    from daskangel.psarray._pullcache import DirectStore, UnitStore, make_store

    rng = np.random.default_rng(0)
    s: UnitStore | DirectStore = (
        UnitStore(2, np.dtype("float32"))
        if kind == "sorted"
        else DirectStore(1000, 2, np.dtype("float32"))
    )
    ref: dict[int, tuple[np.ndarray, int]] = {}
    for _ in range(200):
        k = np.unique(rng.integers(0, 1000, int(rng.integers(1, 50))))
        if kind == "direct":
            k = rng.permutation(k)  # a direct store takes unsorted units
        v = rng.random((k.size, 2)).astype("float32")
        f = int(rng.integers(0, 10))
        s.insert(k, v, f)
        for kk, vv in zip(k.tolist(), v, strict=True):
            if kk not in ref or ref[kk][1] <= f:
                ref[kk] = (vv, f)
    ks = sorted(ref)
    assert s.keys.tolist() == ks
    want = np.arange(1000)
    for floor in (0, 5, 9):
        hit, vals = s.lookup(want, floor)
        exp = [k for k in ks if ref[k][1] >= floor]
        assert want[hit].tolist() == exp
        np.testing.assert_array_equal(vals, np.array([ref[k][0] for k in exp]).reshape(-1, 2))
    per = 16 + 2 * 4
    assert s.evict(100 * per) == len(ks) - 100
    hit, _ = s.lookup(want, 0)
    kept = want[hit]
    assert kept.size == 100 and min(ref[k][1] for k in kept) >= max(
        ref[k][1] for k in set(ks) - set(kept.tolist())
    )
    s.clear()
    assert not s.lookup(want, -(2**62))[0].any()
    assert isinstance(make_store(1000, 2, np.dtype("float32")), DirectStore)
    with dask.config.set({"daskangel.agent.direct-index-bytes": 100}):
        assert isinstance(make_store(1000, 2, np.dtype("float32")), UnitStore)


def test_gathers_and_scatters_run_inline_below_their_own_limits() -> None:
    """Gets and updates of scattered entries (compressed rows, coordinates, packed
    pairs) run on the event loop up to their own keys; dense updates keep
    ``inline-bytes`` (the server's thread, or write-behind, above it)."""
    from daskangel.psarray._server import _inline_limit

    csr = {"block": 0, "csr_rows": np.zeros(1, np.int32)}
    with dask.config.set(
        {
            "daskangel.server.inline-bytes": 10,
            "daskangel.server.inline-get-bytes": 20,
            "daskangel.server.inline-scatter-bytes": 30,
        }
    ):
        assert _inline_limit("get", {"parts": [{"block": 0}]}) == 20
        assert _inline_limit("update", {"parts": [csr, {"block": 1, "coo_rows": 1}]}) == 30
        assert _inline_limit("update", {"parts": [csr, {"block": 1, "values": 1}]}) == 10
        assert _inline_limit("update", {"parts": []}) == 10
        assert _inline_limit("fill", {"parts": [csr]}) == 10
