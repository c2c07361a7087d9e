"""The worker-side agent on a real 2-process LocalCluster.

De-duplication and buffering are exercised inside tasks, on the agent that the
worker's tasks share; other tests use the driver's agent (the same class).
"""

from __future__ import annotations

import threading

import dask
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daskangel.errors import NonFiniteError, PSIndexError, ShapeMismatchError
from daskangel.psarray import PSArray, get_agent
from daskangel.psarray._agent import chunk_batches
from daskangel.psarray._binding import get_binding


def _server_calls(ps, op: str) -> int:
    """Calls of ``op`` served so far, summed over every server (from the servers)."""
    b = ps.binding

    async def stats():
        import asyncio

        return await asyncio.gather(*(b.call(s, "stats", 0, ps.transport) for s in ps.servers))

    return sum(int(s["ops"].get(op, [0])[0]) for s in b.run(stats))


# -- de-duplication and the clock-aware cache ------------------------------------------------


def _pull_from_threads(name: str, rows: list[int], n_threads: int) -> dict:
    agent = get_agent()
    agent.observe_min("dedupe-job", 0)
    before = agent.requests
    start = threading.Barrier(n_threads)
    out: list[np.ndarray] = [np.empty(0)] * n_threads

    def pull(i: int) -> None:
        start.wait()
        out[i] = agent.get(name, rows=rows, job="dedupe-job", floor=0, task=i)

    threads = [threading.Thread(target=pull, args=(i,)) for i in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"requests": agent.requests - before, "values": out}


def test_concurrent_pulls_of_the_same_rows_send_one_request(ps, client):
    W = ps.random("W_dedupe", shape=(64, 8), block_shape=(16, 8), seed=3)
    rows = [1, 17, 33, 49, 17]  # touches 4 blocks, spread over both servers
    servers = {W.blocks[r // 16].server for r in rows}
    gets_before = _server_calls(ps, "get")
    worker = ps.servers[0].address
    res = client.submit(_pull_from_threads, W.name, rows, 8, workers=[worker]).result()
    assert res["requests"] == 1
    assert _server_calls(ps, "get") - gets_before == len(servers)  # one message per server
    want = W.get(rows=rows)
    for v in res["values"]:
        np.testing.assert_array_equal(v, want)


def test_cache_serves_reads_only_when_fresh_enough(ps):
    W = ps.zeros("W_cache", shape=(10, 4), dtype="float64")
    agent = get_agent(ps.client)
    job = "cache-job"
    agent.observe_min(job, 2)
    r0 = agent.requests
    a = agent.get(W.name, rows=[1, 2], job=job, floor=2)
    W.increment(np.ones(4), rows=1)  # a write the cached copy does not hold
    b = agent.get(W.name, rows=[2, 1], job=job, floor=1)  # staleness allows the copy
    assert agent.requests - r0 == 1
    np.testing.assert_array_equal(b, a[::-1])
    agent.observe_min(job, 5)
    c = agent.get(W.name, rows=[1], job=job, floor=5)  # copy too old for floor 5
    assert agent.requests - r0 == 2
    np.testing.assert_array_equal(c, [[1.0, 1.0, 1.0, 1.0]])
    agent.get(W.name, rows=[1], job=job, floor=None)  # ASP / no clock: never from cache
    assert agent.requests - r0 == 3


def test_agent_reads_match_psarray(ps):
    W = ps.random("W_same", shape=(30, 5), block_shape=(7, 2), seed=1)
    v = ps.random("v_same", shape=(1000,), block_shape=(300,), seed=2)
    agent = get_agent(ps.client)
    full, vfull = W.get(), v.get()
    np.testing.assert_array_equal(agent.get(W.name, rows=[29, 0, 0]), full[[29, 0, 0]])
    np.testing.assert_array_equal(agent.get(W.name, rows=4), full[4])
    np.testing.assert_array_equal(agent.get(W.name), full)
    np.testing.assert_array_equal(
        agent.get(W.name, rows=[1, 2], cols=[4, 0]), full[[1, 2]][:, [4, 0]]
    )
    np.testing.assert_array_equal(agent.get(v.name, cols=[999, 3, 3]), vfull[[999, 3, 3]])
    assert agent.get(v.name, cols=7) == vfull[7]
    with pytest.raises(PSIndexError, match=r"rows: index 30 \(at position 0\) is out of range"):
        agent.get(W.name, rows=[30])


# -- pipelined pulls ----------------------------------------------------------------------------


def test_get_iter_sends_ahead_and_yields_every_row(ps):
    W = ps.random("W_iter", shape=(500, 16), block_shape=(64, 16), seed=5)
    full = W.get()
    agent = get_agent(ps.client)
    rows = np.random.default_rng(0).permutation(500)
    # 4 batches ahead, requests of at most 2 batches
    per = 10 * 16 * 4
    with dask.config.set(
        {
            "daskangel.agent.pipeline-bytes": 4 * per,
            "daskangel.agent.pipeline-request-bytes": 2 * per,
        }
    ):
        r0 = agent.requests
        it = W.get_iter(rows, batch=10, ordered=True)
        first_rows, first_vals = next(it)
        # 2 pairs sent up front, a third once the first had arrived
        assert agent.requests - r0 == 3
        got = [(first_rows, first_vals), *it]
        assert agent.requests - r0 == 25  # every request was a pair of batches
    assert np.array_equal(np.concatenate([r for r, _ in got]), rows)  # request order kept
    for rb, vals in got:
        np.testing.assert_array_equal(vals, full[rb])
    dup = np.concatenate([rows[:200], rows[:50]])  # duplicates across batches
    got = list(agent.get_iter(W.name, dup, batch=32))  # arrival order
    assert sorted(np.concatenate([r for r, _ in got]).tolist()) == sorted(dup.tolist())
    for rb, vals in got:
        np.testing.assert_array_equal(vals, full[rb])


@settings(deadline=None, max_examples=200)
@given(
    n=st.integers(0, 500),
    batch=st.integers(1, 40),
    row_bytes=st.integers(1, 64),
    request=st.integers(1, 4000),
)
def test_chunk_batches_cover_every_row_in_whole_batches(n, batch, row_bytes, request):
    chunks = chunk_batches(n, batch, row_bytes, request)
    k = max(1, request // (batch * row_bytes))  # batches a request may hold
    assert [s for s, _ in chunks[1:]] == [e for _, e in chunks[:-1]]  # contiguous
    assert (chunks[0][0], chunks[-1][1]) == (0, n) if n else chunks == []
    for s, e in chunks:
        assert s % batch == 0 and 0 < e - s <= k * batch
        assert e == n or (e - s) % batch == 0
    if n:  # as few requests as hold the batches
        n_batches = -(-n // batch)
        assert len(chunks) == -(-n_batches // k)


def test_get_iter_rejects_bad_input(ps):
    W = ps.zeros("W_iter_bad", shape=(5, 2))
    v = ps.zeros("v_iter_bad", shape=(5,))
    with pytest.raises(ValueError, match="batch: expected an int >= 1, got 0"):
        next(W.get_iter([1], batch=0))
    with pytest.raises(ShapeMismatchError, match="is 1-D; pipelined pulls fetch rows"):
        next(v.get_iter([1], batch=1))


# -- pruned pulls with server-side key lists ---------------------------------------------------


def _pull_key_set(name: str, ks) -> np.ndarray:
    return PSArray(name).get(cols=ks)


def test_key_set_pull_sends_only_a_tag(ps, client):
    v = ps.random("v_keys", shape=(100_000,), seed=9)
    full = v.get()
    keys = np.random.default_rng(1).choice(100_000, 1000, replace=False)
    keys = np.concatenate([keys, keys[:10]])  # duplicates are fine
    agent = get_agent(ps.client)
    ks = v.key_set(keys)
    assert len(ks) == 1010
    before = dict(agent.counters[None])
    gets = _server_calls(ps, "keys_get")
    np.testing.assert_array_equal(v.get(cols=ks), full[keys])
    assert _server_calls(ps, "keys_get") - gets == len({b.server for b in v.blocks})
    pulled = agent.counters[None]["bytes_pulled"] - before["bytes_pulled"]
    assert pulled == 1000 * 4  # values of the unique keys only
    # a server that lost the list (evicted here) gets it again transparently
    client.run(dask.config.set, {"daskangel.server.key-lists": 1})
    try:
        others = [v.key_set(np.arange(i, 100_000, 1000)) for i in range(3)]
        np.testing.assert_array_equal(v.get(cols=ks), full[keys])
        np.testing.assert_array_equal(v.get(cols=others[0]), full[np.arange(0, 100_000, 1000)])
    finally:
        client.run(dask.config.set, {"daskangel.server.key-lists": 4096})
    # a key set pickles with its keys: a task registers it in its own process
    got = client.submit(_pull_key_set, v.name, ks, workers=[ps.servers[0].address]).result()
    np.testing.assert_array_equal(got, full[keys])
    agent.drop_key_set(ks)
    assert ks.tag not in agent.keysets
    np.testing.assert_array_equal(v.get(cols=ks), full[keys])  # registered again on use
    W = ps.zeros("W_keys_bad", shape=(3, 3))
    with pytest.raises(ShapeMismatchError, match="key sets select columns of a vector"):
        W.key_set([0])


def test_sorted_key_sets_pull_like_any_other(ps):
    """Sorted distinct keys (a task's pruned key list) take the no-gather path; the
    values come back in order, and the returned array is the caller's own."""
    v = ps.random("v_sorted_keys", shape=(100_000,), seed=4)
    full = v.get()
    rng = np.random.default_rng(2)
    sorted_keys = np.sort(rng.choice(100_000, 5000, replace=False))
    for keys in (sorted_keys, sorted_keys[::-1], np.array([0, 99_999]), np.array([7])):
        ks = v.key_set(keys)
        a = v.get(cols=ks)
        np.testing.assert_array_equal(a, full[keys])
        a[:] = -1.0  # a reader's copy: the next pull is not affected
        np.testing.assert_array_equal(v.get(cols=ks), full[keys])
    v.increment(np.ones(sorted_keys.size, "float32"), cols=sorted_keys)
    np.testing.assert_allclose(v.get(cols=sorted_keys), full[sorted_keys] + 1)


# -- the update buffer ------------------------------------------------------------------------


def _increment_from_threads(name: str, n_threads: int, reps: int) -> dict:
    agent = get_agent()
    p = agent.pusher
    with dask.config.set({"daskangel.agent.flush-bytes": "1GiB"}):
        before = dict(p.stats)
        start = threading.Barrier(n_threads)

        def work(i: int) -> None:
            start.wait()
            for _ in range(reps):
                agent.increment(name, np.ones(50), cols=np.arange(0, 500, 10), job="j", clock=0)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(n_threads)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        mid = dict(p.stats)
        (buf,) = p.buffers.values()
        nnz = buf.nnz
        value_before_flush = PSArray(name).get(cols=[0])[0]
        agent.flush()
    return {
        "before": before,
        "mid": mid,
        "after": dict(p.stats),
        "nnz": nnz,
        "v0": value_before_flush,
    }


def test_update_buffer_merges_tasks_increments(ps, client):
    v = ps.zeros("v_merge", shape=(1000,), dtype="float64")
    res = client.submit(
        _increment_from_threads, v.name, 4, 25, workers=[ps.servers[1].address]
    ).result()
    assert res["mid"]["pushes"] == res["before"]["pushes"]  # nothing sent before flush
    assert res["mid"]["increments"] - res["before"]["increments"] == 100
    assert res["nnz"] == 50  # 100 increments merged into 50 distinct keys
    assert res["v0"] == 0.0
    assert res["after"]["pushes"] - res["before"]["pushes"] == 1  # one merged push
    want = np.zeros(1000)
    want[::10][:50] = 100.0
    np.testing.assert_array_equal(v.get(), want)


def test_update_buffer_pushes_by_itself_past_the_threshold(ps):
    W = ps.zeros("W_auto", shape=(200, 32), dtype="float32")
    agent = get_agent(ps.client)
    p = agent.pusher
    with dask.config.set({"daskangel.agent.flush-bytes": "8KiB"}):
        before = p.stats["auto_flushes"]
        for i in range(100):
            agent.increment(
                W.name, np.ones((2, 32), "float32"), rows=[i, i + 100], job="a", clock=0
            )
        assert p.stats["auto_flushes"] > before
        p.wait()  # let the automatic pushes land
        partial = W.get().sum()
        assert 0 < partial <= 200 * 32
        assert partial + p.buffered_bytes() / 4 >= 200 * 32  # rest still buffered
        agent.flush()
    np.testing.assert_array_equal(W.get(), np.ones((200, 32), "float32"))


def _fence_servers(job: str, epoch: int, dask_worker=None) -> bool:
    for srv in dask_worker.plugins["daskangel-ps"].servers.values():
        srv.dispatch("fence", job=job, epoch=epoch)
    return True


@pytest.mark.timeout(60)
def test_a_push_refused_by_a_rollback_fence_does_not_fail_the_next_runs_flush(ps, client):
    """The push error is shared by the tasks of a worker (one UpdatePusher an agent).
    A background push of the run a rollback abandoned, refused by the servers' fence,
    must not be handed to the restarted run's task at its next increment or flush:
    before 3abf277 that task ended 'aborted' and its BSP partner waited for it for
    ever.  The refused push applies nothing; the new run's push applies."""
    v = ps.zeros("v_fenced_push", shape=(4,), dtype="int64", block_shape=(2,))
    client.run(_fence_servers, "job-fenced-push", 2)
    agent = get_agent(ps.client)
    p = agent.pusher
    with dask.config.set({"daskangel.agent.flush-bytes": "1B"}):  # push at once, behind
        before = p.stats["auto_flushes"]
        agent.increment(v.name, np.ones(4, "int64"), job="job-fenced-push", clock=0, epoch=1)
        assert p.stats["auto_flushes"] == before + 1
    with p._cv:  # the refused push has ended (its error, if kept, is set by then)
        assert p._cv.wait_for(lambda: not p.inflight, timeout=30)
    agent.increment(v.name, np.full(4, 5, "int64"), job="job-fenced-push", clock=0, epoch=2)
    agent.flush()  # the restarted run's flush: no stale error
    np.testing.assert_array_equal(v.get(), [5, 5, 5, 5])


def test_dense_and_sparse_wire_formats_apply_the_same(ps):
    v = ps.zeros("v_fmt", shape=(4000,), dtype="float64", block_shape=(1000,))
    agent = get_agent(ps.client)
    p = agent.pusher
    agent.increment(v.name, np.arange(4000.0))  # every key: dense is cheaper
    (buf,) = p.buffers.values()
    assert buf.take()[0] == "dense"
    agent.increment(v.name, [5.0, 5.0], cols=[3, 3])
    agent.flush()
    agent.increment(v.name, [1.0], cols=[7])  # one key: sparse
    (buf,) = p.buffers.values()
    assert buf.take()[0] == "sparse"
    agent.flush()
    want = np.arange(4000.0)
    want[3] += 10
    want[7] += 1
    np.testing.assert_array_equal(v.get(), want)


def test_rejected_increments_are_not_buffered(ps):
    W = ps.zeros("W_reject", shape=(4, 3), dtype="float32")
    agent = get_agent(ps.client)
    agent.flush()
    with pytest.raises(ShapeMismatchError, match=r"values: expected shape \(2, 3\)"):
        agent.increment(W.name, np.ones((2, 2), "float32"), rows=[0, 1])
    with pytest.raises(NonFiniteError, match="non-finite"):
        agent.increment(W.name, np.array([[np.nan, 0, 0]], "float32"), rows=[0])
    with pytest.raises(PSIndexError, match=r"cols: index 3 \(at position 0\) is out of range"):
        agent.increment(W.name, [1.0], rows=[0], cols=[3])
    assert not agent.pusher.buffers
    agent.increment(W.name, np.array([[np.nan, 2, 0]], "float32"), rows=[1], on_nonfinite="skip")
    agent.flush()
    np.testing.assert_array_equal(W.get(rows=1), [0, 2, 0])


def test_a_retried_push_is_applied_exactly_once(ps):
    v = ps.zeros("v_once", shape=(100,), dtype="float64", block_shape=(50,))
    agent = get_agent(ps.client)
    p = agent.pusher
    parts, cost = p.plan(v.name, "entries", "sparse", np.array([1, 60]), np.array([[1.0], [2.0]]))
    b = get_binding(ps.client)
    extra = {"add": True, "tag": b.next_tag(), "clock": 3}
    b.run(p.send, v.name, parts, cost, extra)
    b.run(p.send, v.name, parts, cost, extra)  # the resend a lost reply would cause
    got = v.get()
    assert got[1] == 1.0 and got[60] == 2.0 and got.sum() == 3.0
    extra2 = {**extra, "tag": b.next_tag()}  # a new push with a new tag applies again
    b.run(p.send, v.name, parts, cost, extra2)
    assert v.get().sum() == 6.0
