"""Re-using an array's name (issue 14 section 4.1) on a real 2-process LocalCluster.

A notebook user re-running a cell drops ``"w"`` (or closes the context) and
creates ``"w"`` again with another shape or dtype.  Worker processes cached the
old array's metadata and rows; every layer must notice the new creation.
"""

from __future__ import annotations

import numpy as np
import pytest

import daskangel as angel
from daskangel._compat import workers_info
from daskangel.errors import StaleLayoutError
from daskangel.psarray import PSArray, get_agent
from daskangel.psarray._binding import get_binding


def _use(w: PSArray) -> tuple[float, tuple[int, ...], str, float]:
    """Read through the worker's agent (cached rows), increment, read back."""
    agent = get_agent()
    first = agent.get(w.name)  # fills this process's caches for the name
    w.increment(np.ones(w.shape, w.dtype))
    agent.increment(w.name, np.ones(w.shape, w.dtype))
    agent.flush()
    return float(w.get().sum()), w.shape, w.dtype.name, float(np.asarray(first).sum())


def _on_every_worker(client, w: PSArray) -> list[tuple]:
    workers = sorted(workers_info(client))
    return [client.submit(_use, w, workers=[a], pure=False).result() for a in workers]


@pytest.mark.timeout(240)
def test_drop_then_recreate_with_another_shape_and_dtype(client):
    with angel.PSContext(client) as ps:
        w = ps.zeros("w_reuse", (1000,), dtype="float32")
        assert _on_every_worker(client, w)[-1][0] == 4000.0
        old = w
        ps.drop("w_reuse")
        w = ps.zeros("w_reuse", (50, 40), dtype="float64", block_shape=(25, 40))
        got = _on_every_worker(client, w)
        assert [g[1:3] for g in got] == [((50, 40), "float64")] * 2
        assert got[0][0] == 2 * 2000.0 and got[1][0] == 4 * 2000.0
        # what a task read first is the new array, not rows cached of the old one
        assert got[0][3] == 0.0 and got[1][3] == 2 * 2000.0
        with pytest.raises(StaleLayoutError, match="dropped; an array of that name was created"):
            old.get()
        np.testing.assert_array_equal(w.get(), np.full((50, 40), 4.0))


@pytest.mark.timeout(240)
def test_close_then_recreate_in_a_new_context(client):
    with angel.PSContext(client) as ps:
        w = ps.full("w_ctx", (64, 8), 1.0, dtype="float32", block_shape=(16, 8))
        _on_every_worker(client, w)
    with angel.PSContext(client) as ps:
        w = ps.zeros("w_ctx", (7,), dtype="int64")
        got = _on_every_worker(client, w)
        assert [g[:3] for g in got] == [(14.0, (7,), "int64"), (28.0, (7,), "int64")]


@pytest.mark.timeout(240)
def test_servers_refuse_a_request_planned_for_the_dropped_array(client):
    # a process whose cache escaped the scheduler's notice (here: put back by hand)
    # is refused by the servers, not written into the new blocks
    with angel.PSContext(client) as ps:
        w = ps.zeros("w_srv", (8, 100), dtype="float32", block_shape=(4, 100))
        stale = get_binding(client).metas["w_srv"]
        ps.drop("w_srv")
        w = ps.zeros("w_srv", (8, 100), dtype="float32", block_shape=(2, 100))
        b = get_binding(client)
        b.metas["w_srv"] = stale
        agent = get_agent(client)
        with pytest.raises(StaleLayoutError, match="dropped and created again"):
            agent.increment("w_srv", np.ones((8, 100), "float32"))
            agent.flush()
        np.testing.assert_array_equal(w.get(), np.zeros((8, 100), "float32"))
        assert b.metas["w_srv"].uid == w.meta.uid  # refreshed: the next request works
        agent.increment("w_srv", np.ones((8, 100), "float32"))
        agent.flush()
        np.testing.assert_array_equal(w.get(), np.ones((8, 100), "float32"))
