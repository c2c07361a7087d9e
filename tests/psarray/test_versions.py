"""``PSArray.version_token``'s lean round trip (``psarray/_versions.py``), on a
process cluster (2 workers): the same versions as the general path, read after
every write queued before it (write-behind adds included: read-your-writes),
under concurrent writers and tokens; what it declines (its own process's
servers, the actors transport, the key off, a stale layout refused by the
servers) goes the general way and leaves the blocks as they were.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import dask
import numpy as np
import pytest
from distributed import Client

import daskangel as angel
from daskangel._compat import workers_info
from daskangel.psarray._versions import _requests, lean_versions

pytestmark = pytest.mark.timeout(180)

SHAPE = (400, 30)
BLOCKS = (50, 30)  # 8 row blocks, on both servers
KEYS = ("daskangel.server.inline-bytes", "daskangel.server.behind-thread-bytes")


def _general(a: angel.PSArray) -> dict[int, int]:
    parts = {g: {"block": g} for g in range(a.meta.layout.n_blocks)}
    b = a._binding
    return b.run(b.call_blocks, a.name, "versions", parts, {}, {})  # type: ignore[no-any-return]


def _lean(a: angel.PSArray) -> dict[int, int] | None:
    return lean_versions(a._binding, a.name, a.meta)


def _configure(values: dict[str, Any]) -> None:
    dask.config.set(values)


@pytest.fixture(scope="module")
def ps(client: Client) -> Iterator[angel.PSContext]:
    with angel.PSContext(client) as ctx:
        yield ctx


def test_lean_versions_equal_the_general_paths_and_follow_writes(ps: angel.PSContext) -> None:
    """From the client (both servers in other processes): every block's version,
    equal to the general path's, one higher a block after a whole-array write and
    only on the written blocks after a row write; the token changes with them and
    is the same with the key off."""
    a = ps.zeros("v-eq", SHAPE, dtype="float64", block_shape=BLOCKS)
    assert len({b.server for b in a.blocks}) == 2
    n = a.meta.layout.n_blocks
    first = _lean(a)
    assert first is not None and sorted(first) == list(range(n))
    assert first == _general(a)
    t0 = a.version_token()
    a.increment(np.ones(SHAPE))
    after = _lean(a)
    assert after == {g: first[g] + 1 for g in range(n)} == _general(a)
    t1 = a.version_token()
    assert t1 != t0
    with dask.config.set({"daskangel.client.lean-versions": False}):
        assert a.version_token() == t1
    a.increment(np.ones((2, SHAPE[1])), rows=[0, 399])  # the first and last blocks
    last = _lean(a)
    assert last is not None
    assert [g for g in range(n) if last[g] != after[g]] == [0, n - 1]
    assert a.version_token() not in (t0, t1)
    np.testing.assert_array_equal(a.get()[[0, 1, 399]], [[2.0] * 30, [1.0] * 30, [2.0] * 30])


@pytest.mark.parametrize("mode", ["loop", "thread"])
def test_the_token_waits_for_every_queued_add(
    ps: angel.PSContext, client: Client, mode: str
) -> None:
    """Read-your-writes: every received dense add deferred behind its reply (on
    the event loop or in the op thread); right after a burst of them the lean
    token's versions count every add, and a read sees their sum."""
    a = ps.zeros(f"v-behind-{mode}", SHAPE, dtype="float64", block_shape=BLOCKS)
    a.increment(np.zeros(SHAPE))  # a first op of an array runs undeferred
    start = _lean(a)
    assert start is not None
    defaults = {k: dask.config.get(k) for k in KEYS}
    client.run(
        _configure, dict(zip(KEYS, ("0B", "0B" if mode == "thread" else "1TiB"), strict=True))
    )
    try:
        rng = np.random.default_rng(1)
        want = np.zeros(SHAPE)
        for step in range(12):
            v = rng.integers(-3, 4, SHAPE).astype("float64")
            a.increment(v)
            want += v
            got = _lean(a)
            assert got == {g: start[g] + step + 1 for g in start}
    finally:
        client.run(_configure, defaults)
    np.testing.assert_array_equal(a.get(), want)


def _pushes_and_tokens(name: str, seed: int, rounds: int) -> list[str]:
    """(A task) ``rounds`` increments of ones into its own rows, a token after each."""
    a = angel.PSArray(name)
    tokens = []
    for _ in range(rounds):
        a.increment(np.ones((1, SHAPE[1])), rows=[seed])
        tokens.append(a.version_token())
    return tokens


def test_concurrent_tokens_and_writes_sum_exactly(ps: angel.PSContext, client: Client) -> None:
    """Tasks on both workers (their own server called directly: the general path)
    and four client threads (lean tokens on the same comm pool) write and take a
    token after every write, at once: every token differs from the one before it
    in its caller, the sums are exact and the versions count every write."""
    a = ps.zeros("v-conc", SHAPE, dtype="float64", block_shape=BLOCKS)
    start = _lean(a)
    assert start is not None
    workers = sorted(workers_info(client))
    rounds = 15
    futs = [
        client.submit(_pushes_and_tokens, "v-conc", 100 + i, rounds, workers=[w], pure=False)
        for i, w in enumerate(workers)
    ]
    seen: dict[int, list[str]] = {}
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            seen[i] = _pushes_and_tokens("v-conc", 60 * i + 5, rounds)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors and not any(t.is_alive() for t in threads)
    tasks = [f.result() for f in futs]
    for tokens in [*seen.values(), *tasks]:
        assert all(x != y for x, y in itertools.pairwise(tokens))
    want = np.zeros(SHAPE)
    for r in [*(60 * i + 5 for i in range(4)), 100, 101]:
        want[r] = rounds
    np.testing.assert_array_equal(a.get(), want)
    end = _lean(a)
    assert end is not None
    written = {g: 0 for g in start}
    for r in [*(60 * i + 5 for i in range(4)), 100, 101]:
        written[r // BLOCKS[0]] += rounds
    assert end == {g: start[g] + written[g] for g in start} == _general(a)


def _lean_in_task(name: str) -> bool:
    """(A task on a server's worker) whether the lean path answers there."""
    a = angel.PSArray(name)
    return lean_versions(a._binding, a.name, a.meta) is not None


def test_what_the_lean_path_declines_goes_the_general_way(
    ps: angel.PSContext, client: Client
) -> None:
    """None (the general path answers) with the key off, in a task whose process
    holds a server, and on a stale layout: a server refuses the blocks it does
    not hold and nothing changes; the token is the general path's every time."""
    a = ps.zeros("v-decline", SHAPE, dtype="float64", block_shape=BLOCKS)
    a.increment(np.full(SHAPE, 2.0))
    with dask.config.set({"daskangel.client.lean-versions": False}):
        assert _lean(a) is None
    workers = sorted(workers_info(client))
    assert (
        client.submit(_lean_in_task, "v-decline", workers=[workers[0]], pure=False).result()
        is False
    )
    m = a.meta
    swapped = replace(m, servers=tuple(reversed(m.servers)))  # every block sent to the wrong server
    assert swapped.servers != m.servers
    assert lean_versions(a._binding, a.name, swapped) is None
    assert a.version_token() == a.version_token()
    assert _lean(a) == _general(a)
    np.testing.assert_array_equal(a.get(), np.full(SHAPE, 2.0))


def _token_in_task(name: str) -> str:
    """(A task on a server's worker: the general path answers there) the token."""
    return angel.PSArray(name).version_token()


def test_the_token_is_the_same_in_every_process_and_the_plan_follows_the_metadata(
    ps: angel.PSContext, client: Client
) -> None:
    """The client's lean token equals the token a task takes on each worker by
    the general path (a plain hash of the versions, the same in every process),
    before and after a write; the requests are made once per metadata and made
    again for a new one."""
    a = ps.zeros("v-same", SHAPE, dtype="float64", block_shape=BLOCKS)
    workers = sorted(workers_info(client))
    for step in range(2):
        mine = a.version_token()
        theirs = [
            client.submit(_token_in_task, "v-same", workers=[w], pure=False).result()
            for w in workers
        ]
        assert theirs == [mine, mine]
        if step == 0:
            a.increment(np.ones(SHAPE))
            assert a.version_token() != mine
    b, m = a._binding, a.meta
    planned = _requests(b, a.name, m)
    assert planned is not None and _requests(b, a.name, m) is planned
    swapped = replace(m, servers=tuple(reversed(m.servers)))
    again = _requests(b, a.name, swapped)
    assert again is not None and again is not planned
    assert [s.address for s in again[0]] == [s.address for s in reversed(planned[0])]
    with dask.config.set({"daskangel.client.lean-versions": False}):
        assert _requests(b, a.name, m) is None
    assert _lean(a) == _general(a)


def test_the_actors_transport_takes_the_general_path(client: Client) -> None:
    """An array on the actors transport: None, and its token still follows writes."""
    with angel.PSContext(client, transport="actors") as ps:
        a = ps.zeros("v-actors", (40, 10), dtype="float64", block_shape=(10, 10))
        assert _lean(a) is None
        t0 = a.version_token()
        a.increment(np.ones((40, 10)))
        assert a.version_token() != t0
        np.testing.assert_array_equal(a.get(), np.ones((40, 10)))
