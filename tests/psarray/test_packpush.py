"""Packed sparse increments through shared memory written from the caller's thread
(:mod:`daskangel.psarray._packpush`), on a process cluster (2 workers).

* a blocking ``increment`` of a sparse vector from the client's thread reaches
  both servers' ``daskangel_push`` handler, its frames read where the caller packed
  them (the shared-request counter rises), new and existing keys sum exactly and
  every buffer is released;
* ``increment_async`` and ``daskangel.client.lean-direct`` off take the general
  path, with the same sums;
* servers that cannot map the buffer answer before applying anything: the
  general path resends over the socket with the same write tag, nothing is added
  twice, and those servers are not offered the buffers again.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import dask
import numpy as np
import pytest
from distributed import Client

import daskangel as angel
from daskangel._shm import supported
from daskangel.psarray._binding import get_binding

pytestmark = [
    pytest.mark.timeout(240),
    pytest.mark.skipif(not supported(), reason="no memfd / /proc here"),
]

WIDTH = 10**8  # 4 blocks of 25 M columns on 2 servers


def _counts(dask_worker: Any) -> tuple[int, int]:
    """(requests read from a caller's shared buffer, pushes) of this worker."""
    plugin = dask_worker.plugins["daskangel-ps"]
    pushes = sum(int(s.op_stats["push"][0]) for s in plugin.servers.values())
    return int(plugin.shm_requests), pushes


def _model(cols: np.ndarray, vals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    u, inv = np.unique(cols, return_inverse=True)
    return u, np.bincount(inv, weights=vals)


def _released(client: Client) -> bool:
    gc.collect()
    shm = get_binding(client).shm_buffers()
    return shm is not None and not any(seg.busy for seg in shm._segs)


@pytest.fixture
def clean_refusals(ps: angel.PSContext, client: Client) -> Iterator[None]:
    yield
    shm = get_binding(client).shm_buffers()
    assert shm is not None
    shm.refused.clear()


def test_blocking_increments_go_from_the_callers_thread(
    ps: angel.PSContext, client: Client
) -> None:
    v = ps.zeros("ppd", (WIDTH,), dtype="float32", sparse=True)
    rng = np.random.default_rng(3)
    cols = rng.integers(0, WIDTH, 400_000)  # ~1.6 MB of packed entries a server
    vals = rng.integers(1, 4, cols.size).astype(np.float32)
    before = client.run(_counts)
    v.increment(vals, cols=cols)  # new keys
    v.increment(vals, cols=cols)  # the same keys again
    after = client.run(_counts)
    for w in after:  # both calls: the push handler, frames read in place
        assert after[w][0] == before[w][0] + 2
        assert after[w][1] == before[w][1] + 2
    u, s = _model(np.concatenate([cols, cols]), np.concatenate([vals, vals]))
    np.testing.assert_array_equal(v.get(cols=u), s.astype(np.float32))
    assert _released(client)


@pytest.mark.parametrize("how", ["async", "loop"])
def test_other_calls_take_the_general_path(ps: angel.PSContext, client: Client, how: str) -> None:
    v = ps.zeros(f"ppg{how}", (WIDTH,), dtype="int32", sparse=True)
    rng = np.random.default_rng(4)
    cols = rng.integers(0, WIDTH, 400_000)
    vals = rng.integers(1, 4, cols.size).astype(np.int32)
    before = client.run(_counts)
    with dask.config.set({"daskangel.client.lean-direct": how != "loop"}):
        for _ in range(2):
            if how == "async":
                v.increment_async(vals, cols=cols).result()
            else:
                v.increment(vals, cols=cols)
    after = client.run(_counts)
    for w in after:  # shared buffers, but no push
        assert after[w][0] == before[w][0] + 2
        assert after[w][1] == before[w][1]
    u, s = _model(np.concatenate([cols, cols]), np.concatenate([vals, vals]).astype(float))
    np.testing.assert_array_equal(v.get(cols=u), s.astype(np.int32))
    assert _released(client)


def test_refused_buffers_are_resent_over_the_socket_once(
    ps: angel.PSContext, client: Client, clean_refusals: None
) -> None:
    v = ps.zeros("ppr", (WIDTH,), dtype="float32", sparse=True)
    rng = np.random.default_rng(5)
    cols = rng.integers(0, WIDTH, 400_000)
    vals = np.ones(cols.size, np.float32)
    before = client.run(_counts)
    client.run(lambda: dask.config.set({"daskangel.server.shm": False}))
    try:
        v.increment(vals, cols=cols)  # refused by both, resent by the general path
        v.increment(vals, cols=cols)  # the general path from the start
    finally:
        client.run(lambda: dask.config.set({"daskangel.server.shm": True}))
    after = client.run(_counts)
    for w in after:
        assert after[w][0] == before[w][0]  # nothing read in place
        assert after[w][1] == before[w][1]  # (a refused push is not counted)
    shm = get_binding(client).shm_buffers()
    assert shm is not None and set(shm.refused) == {b.server.address for b in v.blocks}
    u, s = _model(np.concatenate([cols, cols]), np.ones(2 * cols.size))
    np.testing.assert_array_equal(v.get(cols=u), s.astype(np.float32))
    assert _released(client)
