"""The lean wire from the caller's thread (``daskangel/_leandirect.py``) on a process
cluster (TCP): blocking pushes and tokens made in the calling thread (the client's
and a task's), exact sums; writes the caller does not wait for, and the key off,
on the loop as before; a refused push raised at the call with nothing changed;
the liveness watch run while waiting; sockets failed under the caller replaced
without a lost or doubled write.
"""

from __future__ import annotations

from collections.abc import Iterator

import dask
import numpy as np
import pytest
from distributed import Client

import daskangel as angel
from daskangel._lean import LeanPool
from daskangel._leandirect import DirectPool
from daskangel.errors import ShapeMismatchError

from ._rowdata import SHAPE, dense, malformed_csr, random_csr

pytestmark = pytest.mark.timeout(240)


def _direct(a: angel.PSArray) -> DirectPool:
    lean = a._binding._lean
    assert lean is not None and lean.direct is not None, "no call went from the thread"
    return lean.direct


def _in_task(name: str, seeds: list[int]) -> None:
    """Pushes and tokens from a task (on a server's worker: its own blocks are
    written by a direct call, so these take the loop's general path)."""
    a = angel.PSArray(name)
    for s in seeds:
        a.increment(random_csr(s))
        a.version_token()


@pytest.fixture(scope="module")
def ps(client: Client) -> Iterator[angel.PSContext]:
    with angel.PSContext(client) as ctx:
        yield ctx


def test_only_tcp_addresses_are_called_from_the_thread() -> None:
    assert DirectPool.supports("tcp://10.0.0.1:8786")
    assert not DirectPool.supports("tls://10.0.0.1:8786")
    assert not DirectPool.supports("inproc://10.0.0.1/123/4")


def test_blocking_pushes_and_tokens_are_made_in_the_calling_thread(
    ps: angel.PSContext, client: Client
) -> None:
    """``increment`` and ``version_token`` from the client's thread go from the
    thread (a request a server a call); ``increment_async`` and the key off go
    through the loop; with tasks writing at the same time the sums are exact, and
    every token differs."""
    a = ps.zeros("direct-sum", SHAPE, dtype="int32", block_shape=(400, SHAPE[1]))
    mats = [random_csr(s) for s in range(3)]
    tokens = [a.version_token()]
    d = _direct(a)
    start = d.calls
    for X in mats:
        a.increment(X)
        tokens.append(a.version_token())
    assert d.calls - start == 2 * 2 * len(mats)
    assert len(set(tokens)) == len(tokens)
    lean: LeanPool = a._binding._lean  # type: ignore[assignment]
    before, loop_before = d.calls, lean.calls
    a.increment_async(mats[0]).result()
    with dask.config.set({"daskangel.client.lean-direct": False}):
        a.increment(mats[1])
        a.version_token()
    assert d.calls == before and lean.calls - loop_before == 6
    futs = [client.submit(_in_task, "direct-sum", [s, s + 1], pure=False) for s in (10, 20)]
    for X in mats:
        a.increment(X)
    client.gather(futs)
    want = dense(*mats, *mats, mats[0], mats[1], *[random_csr(s) for s in (10, 11, 20, 21)])
    np.testing.assert_array_equal(a.get(), want.astype(np.int32))


def test_a_refused_push_raises_at_the_call_and_changes_nothing(ps: angel.PSContext) -> None:
    """A malformed CSR (a negative row length) refused by the servers: raised at
    ``increment`` with the daskangel error, the blocks unchanged, the same sockets
    in step for the next push."""
    a = ps.zeros("direct-bad", SHAPE, dtype="int32", block_shape=(400, SHAPE[1]))
    X = random_csr(7)
    a.increment(X)
    d = _direct(a)
    kept = {id(x) for xs in d._idle.values() for x in xs}
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
    assert {id(x) for xs in d._idle.values() for x in xs} == kept
    np.testing.assert_array_equal(a.get(), (2 * dense(X)).astype(np.int32))


def test_the_liveness_watch_runs_while_waiting(ps: angel.PSContext) -> None:
    """With the liveness check at a millisecond the calling thread asks the
    registry while it waits (no server lost): every call still answers from the
    thread and sums exactly."""
    a = ps.zeros("direct-watch", SHAPE, dtype="int32", block_shape=(400, SHAPE[1]))
    mats = [random_csr(s) for s in (40, 41, 42)]
    a.version_token()
    start = _direct(a).calls
    with dask.config.set({"daskangel.client.liveness-check": "1ms"}):
        for X in mats:
            a.increment(X)
            a.version_token()
    assert _direct(a).calls - start == 4 * len(mats)
    np.testing.assert_array_equal(a.get(), dense(*mats).astype(np.int32))


def _abort_lean_comms(dask_worker: object) -> int:
    """(``client.run``) the server side closes every lean comm it serves."""
    from daskangel._lean import LEAN_HANDLER

    comms = [c for c, op in dask_worker._comms.items() if op == LEAN_HANDLER]  # type: ignore[attr-defined]
    for c in comms:
        c.abort()
    return len(comms)


def test_sockets_failed_under_the_caller_are_replaced_without_losing_a_write(
    ps: angel.PSContext, client: Client
) -> None:
    """The caller's idle sockets closed, then the servers' ends: the next pushes
    and tokens fail on them, go the general path (the push resent with its write
    tag: applied once), and new sockets serve the calls after."""
    a = ps.zeros("direct-drop", SHAPE, dtype="int32", block_shape=(400, SHAPE[1]))
    mats = [random_csr(s) for s in range(50, 56)]
    a.increment(mats[0])
    a.version_token()
    d = _direct(a)
    for xs in d._idle.values():
        for x in xs:
            x.sock.close()
    a.increment(mats[1])
    a.version_token()
    assert sum(client.run(_abort_lean_comms).values()) >= 2
    for X in mats[2:]:
        a.increment(X)
        a.version_token()
    np.testing.assert_array_equal(a.get(), dense(*mats).astype(np.int32))
    before = d.calls
    a.increment(mats[0])
    assert d.calls - before == 2
