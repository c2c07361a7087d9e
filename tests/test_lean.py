"""The lean wire (``daskangel/_lean.py``): its framing against msgpack's own
round trip, and sparse row pushes and version tokens over it on a process
cluster (2 workers, TCP): exact sums, refused requests that change nothing and
leave the comm in step, an uncaught handler error raised at the caller, comms
closed under the caller (by it or by the server) replaced without a lost write,
and the Dask path wherever the wire does not apply.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import dask
import numpy as np
import pytest
from distributed import Client
from distributed.comm.core import CommClosedError
from hypothesis import given, settings
from hypothesis import strategies as st

import daskangel as angel
from daskangel._lean import FAILED, LEAN_HANDLER, REPLY, REQUEST, LeanPool, decode, encode, lean_all
from daskangel.errors import ShapeMismatchError

from ._rowdata import SHAPE, dense, malformed_csr, random_csr

pytestmark = pytest.mark.timeout(240)

# -- the framing ----------------------------------------------------------------------

_plain = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats(allow_nan=False)
    | st.text(max_size=20) | st.binary(max_size=40),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=5),
    max_leaves=20,
)  # fmt: skip


def _as_read(obj: Any) -> Any:
    """What a message reads back as: lists as tuples (as Dask's msgpack reads them)."""
    if isinstance(obj, list):
        return tuple(_as_read(v) for v in obj)
    if isinstance(obj, dict):
        return {k: _as_read(v) for k, v in obj.items()}
    return obj


@settings(max_examples=150, deadline=None)
@given(st.sampled_from([REQUEST, REPLY, FAILED]), _plain)
def test_every_plain_message_reads_back_as_written(kind: int, obj: Any) -> None:
    assert decode(encode(kind, obj)) == (kind, _as_read(obj))


def test_numpy_scalars_go_as_numbers_and_other_objects_are_refused() -> None:
    assert decode(encode(REPLY, [np.int64(3), np.float32(0.5)])) == (REPLY, (3, 0.5))
    with pytest.raises(TypeError, match="plain values only, not ndarray"):
        encode(REPLY, np.arange(3))


def test_a_message_of_another_wire_or_cut_short_is_refused() -> None:
    good = encode(REQUEST, ["versions", {"server": 0}])
    with pytest.raises(CommClosedError, match="not a daskangel message"):
        decode(b"DAL0" + good[4:])
    with pytest.raises(CommClosedError, match="not a daskangel message"):
        decode(good[:-1])


def test_only_tcp_and_tls_addresses_take_the_wire() -> None:
    assert LeanPool.supports("tcp://10.0.0.1:8786")
    assert LeanPool.supports("tls://10.0.0.1:8786")
    assert not LeanPool.supports("inproc://10.0.0.1/123/4")
    assert not LeanPool.supports("ucx://10.0.0.1:8786")


# -- on a process cluster ----------------------------------------------------------------


def _pool(a: angel.PSArray) -> LeanPool:
    pool = a._binding._lean
    assert pool is not None, "the lean wire was never used"
    return pool


def _idle(pool: LeanPool) -> set[int]:
    """The pool's idle comms: the loop's and those detached for callers' threads."""
    direct = pool.direct._idle.values() if pool.direct is not None else []
    return {id(c) for comms in pool._idle.values() for c in comms} | {
        id(d.comm) for ds in direct for d in ds
    }


def _pushes(a: angel.PSArray) -> int:
    """Lean push requests the array's servers answered so far (``ps.status()``'s counters)."""
    return sum(int(s["ops"].get("push", [0])[0]) for s in a._binding.run(a._stats))


def _lean_comms(dask_worker: Any) -> int:
    """(``client.run``) comms this worker serves the lean wire on."""
    return sum(op == LEAN_HANDLER for op in dask_worker._comms.values())


def _abort_lean_comms(dask_worker: Any) -> int:
    """(``client.run``) the server side closes every lean comm it serves."""
    comms = [c for c, op in dask_worker._comms.items() if op == LEAN_HANDLER]
    for c in comms:
        c.abort()
    return len(comms)


def _push_in_task(name: str, seed: int) -> None:
    a = angel.PSArray(name)
    a.increment(random_csr(seed))
    a.version_token()


@pytest.fixture(scope="module")
def ps(client: Client) -> Iterator[angel.PSContext]:
    with angel.PSContext(client) as ctx:
        yield ctx


def test_pushes_and_tokens_go_over_kept_comms_and_sum_exactly(
    ps: angel.PSContext, client: Client
) -> None:
    """The client's pushes and tokens take the lean wire (the servers count a
    ``push`` a server a call and serve comms of the lean handler), reusing one comm
    a server; tasks on both workers push at the same time; the sums are exact and
    the token moves with every write."""
    a = ps.zeros("lean-sum", SHAPE, dtype="int32", block_shape=(400, SHAPE[1]))
    before = _pushes(a)
    mats = [random_csr(s) for s in range(4)]
    tokens = []
    for X in mats:
        a.increment(X)
        tokens.append(a.version_token())
    pool = _pool(a)
    assert pool.open == 2 and len(_idle(pool)) == 2  # one kept comm a server
    assert _pushes(a) - before == 2 * len(mats)
    assert len(set(tokens)) == len(tokens)
    assert sum(client.run(_lean_comms).values()) >= 2
    futs = [client.submit(_push_in_task, "lean-sum", s, pure=False) for s in (10, 11, 12)]
    a.increment(mats[0])
    client.gather(futs)
    want = dense(*mats, mats[0], *[random_csr(s) for s in (10, 11, 12)])
    np.testing.assert_array_equal(a.get(), want.astype(np.int32))


def test_a_refused_push_changes_nothing_and_its_comm_stays_in_step(ps: angel.PSContext) -> None:
    """A malformed CSR (a negative row length) is refused by the server through the
    lean wire with the daskangel error; the blocks are unchanged, and the same kept
    comms carry the next push, which applies."""
    a = ps.zeros("lean-bad", SHAPE, dtype="int32", block_shape=(400, SHAPE[1]))
    X = random_csr(7)
    a.increment(X)
    pool = _pool(a)
    kept = _idle(pool)
    bad = malformed_csr()
    before = a.get()
    with (
        dask.config.set({"daskangel.client.follow-bytes": "1B"}),
        pytest.raises(ShapeMismatchError),
    ):
        a.increment(bad)
    np.testing.assert_array_equal(a.get(), before)
    a.increment(X)
    a.version_token()
    assert _idle(pool) == kept  # nothing dropped, nothing opened
    np.testing.assert_array_equal(a.get(), (2 * dense(X)).astype(np.int32))


def test_an_uncaught_handler_error_is_raised_at_the_caller_on_a_comm_kept_in_step(
    ps: angel.PSContext,
) -> None:
    """A versions request missing a field: the handler's TypeError comes back pickled
    and is raised by ``lean_all``; the comm is reused for the next request, which
    answers."""
    a = ps.zeros("lean-err", SHAPE, dtype="int32", block_shape=(400, SHAPE[1]))
    with dask.config.set({"daskangel.client.lean-direct": False}):
        a.version_token()  # a comm idle on the loop, for lean_all
    b = a._binding
    pool = _pool(a)
    s = a.meta.servers[0]
    kept = _idle(pool)

    async def call(msg: dict[str, Any]) -> list[Any]:
        return await lean_all(pool, [(s.address, "daskangel_versions", msg, [], [])])

    with pytest.raises(TypeError, match="blocks"):
        b.run(call, {"server": s.index, "array": a.name})
    assert b.run(call, {"server": s.index, "array": a.name, "blocks": [0]}) == [(0,)]
    assert _idle(pool) == kept


def test_comms_closed_by_either_end_are_replaced_without_losing_a_write(
    ps: angel.PSContext, client: Client
) -> None:
    """The caller's kept comms aborted (a dropped connection seen first by the
    caller), then the servers' (seen by the caller only when it writes or reads):
    every push after either still applies exactly once (a failed lean call goes the
    general path, which resends with the same write tag) and new comms are kept."""
    a = ps.zeros("lean-drop", SHAPE, dtype="int32", block_shape=(400, SHAPE[1]))
    mats = [random_csr(s) for s in range(20, 26)]
    a.increment(mats[0])
    a.version_token()
    pool = _pool(a)
    old = _idle(pool)
    for comms in pool._idle.values():
        for c in comms:
            c.abort()
    if pool.direct is not None:  # detached comms fail in the caller's thread
        for ds in pool.direct._idle.values():
            for d in ds:
                d.sock.close()
    a.increment(mats[1])
    a.version_token()
    assert _idle(pool).isdisjoint(old) and len(_idle(pool)) == 2
    assert sum(client.run(_abort_lean_comms).values()) >= 2
    for X in mats[2:]:
        a.increment(X)
        a.version_token()
    np.testing.assert_array_equal(a.get(), dense(*mats).astype(np.int32))
    assert len(_idle(pool)) == 2


def test_the_dask_path_answers_with_the_key_off(ps: angel.PSContext) -> None:
    """``daskangel.client.lean-wire`` off: no lean comm is taken; the pushes and
    tokens sum and move exactly as over the wire."""
    a = ps.zeros("lean-off", SHAPE, dtype="int32", block_shape=(400, SHAPE[1]))
    a.version_token()
    pool = _pool(a)
    before = (pool.open, _idle(pool))
    with dask.config.set({"daskangel.client.lean-wire": False}):
        assert a._binding.lean([s.address for s in a.meta.servers]) is None
        X = random_csr(30)
        a.increment(X)
        t1 = a.version_token()
        a.increment(X)
        assert a.version_token() != t1
    assert (pool.open, _idle(pool)) == before
    np.testing.assert_array_equal(a.get(), (2 * dense(X)).astype(np.int32))


def _configure(values: dict[str, Any]) -> None:
    """(``client.run``) set dask config keys in this process."""
    dask.config.set(values)


@pytest.mark.parametrize("dtype", ["float32", "int64"])
def test_random_row_gets_read_the_same_rows_over_the_wire(
    ps: angel.PSContext, client: Client, dtype: str
) -> None:
    """Random-row gets (repeated, unsorted rows) over the wire by both of the lean
    get's paths (a coroutine a server, one for all), their replies frames of their
    own read into the caller's buffer or bytes inside the message: the rows numpy
    gives, each answered over the pool's comms (its call counter moves by a
    request a server); with the key off the Dask path gives them, the counter still."""
    shape = (4_000, 64)  # ~380 KB of rows a server for 3,000 rows
    a = ps.zeros(f"lean-get-{dtype}", shape, dtype=dtype, block_shape=(500, shape[1]))
    ref = np.random.default_rng(3).integers(-50, 50, shape).astype(dtype)
    a.set(ref)
    rows = np.random.default_rng(4).integers(0, shape[0], 3_000)
    a.get(rows=rows[:5])
    pool = _pool(a)
    server_keys = ("daskangel.server.reply-frame-bytes",)
    saved = client.run(lambda: {k: dask.config.get(k) for k in server_keys})
    cases = [
        ({}, {}),  # large: a coroutine a server, frames read into place
        ({}, {"daskangel.server.reply-frame-bytes": "1GiB"}),  # ... bytes in the message
        ({"daskangel.client.batched-reply-bytes": "1GiB"}, {}),  # large, one coroutine
    ]
    try:
        for mine, theirs in cases:
            client.run(_configure, theirs or next(iter(saved.values())))
            with dask.config.set(mine):
                before = pool.calls
                np.testing.assert_array_equal(a.get(rows=rows), ref[rows])
                np.testing.assert_array_equal(a.get(rows=rows[:7]), ref[rows[:7]])
                assert pool.calls - before >= 3, (mine, theirs)
    finally:
        client.run(_configure, next(iter(saved.values())))
    before = pool.calls
    with dask.config.set({"daskangel.client.lean-wire": False}):
        np.testing.assert_array_equal(a.get(rows=rows), ref[rows])
    assert pool.calls == before


def test_closing_a_client_closes_its_ps_comms_and_leaves_none_dangling(
    client: Client, cluster: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A second Client that pushed and pulled over both the lean wire and Dask's comms
    (the general path: a get of a slice), closed while still referenced: every comm
    of its binding is closed by ``Client.close`` itself, and collecting it logs no
    "Closing dangling stream" (as every comm left open did)."""
    import gc
    import logging

    before = sum(client.run(_lean_comms).values())
    other = Client(cluster, set_as_default=False)
    try:
        with angel.PSContext(other) as ctx:
            a = ctx.zeros("closing", shape=SHAPE, dtype="int32")
            a.increment(random_csr(9))
            a.version_token()
            assert (a.get(rows=slice(0, 10)) == random_csr(9)[:10].toarray()).all()
            b = a._binding
            lean, pool = _pool(a), b._pool
            assert lean.open >= 1 and pool is not None and pool.open >= 1
            comms = [c for cs in lean._idle.values() for c in cs]
            comms += [c for cs in pool.available.values() for c in cs]
            assert sum(client.run(_lean_comms).values()) > before
    finally:
        other.close()
    assert all(c.closed() for c in comms)
    assert b._lean is None and b._pool is None
    with caplog.at_level(logging.WARNING, logger="distributed.comm.tcp"):
        del a, b, lean, pool, comms, ctx, other
        gc.collect()
    assert "dangling" not in caplog.text
