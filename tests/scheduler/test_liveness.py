"""Heartbeats: a worker is judged only on the time it was watched (held blocks)."""

from __future__ import annotations

import time
from typing import Any

import dask
import numpy as np
import pytest
from distributed import Client, LocalCluster

import daskangel as angel
from daskangel._compat import workers_info
from daskangel.scheduler._plugin import PLUGIN_NAME


def _liveness(cluster: LocalCluster) -> Any:
    return cluster.scheduler.plugins[PLUGIN_NAME].liveness  # type: ignore[union-attr]


@pytest.mark.timeout(120)
def test_a_worker_that_held_no_blocks_is_not_restarted_when_it_gets_some(
    cluster: LocalCluster, client: Client
) -> None:
    """bench_snapshot found this: after a phase without arrays, a new array's workers
    were restarted at once because their last answer was from the earlier phase."""
    with angel.PSContext(client) as ps:
        live = _liveness(cluster)
        w = ps.zeros("first", (100,))
        holders = {b.server.address for b in w.blocks}
        client.sync(live.check_once)
        assert holders <= set(live.last_seen)
        ps.drop("first")
        client.sync(live.check_once)  # nothing is watched now, nothing is remembered
        assert not holders & set(live.last_seen)
        # pretend the last answer was long ago, as after a long phase without arrays
        timeout = angel.config.get_seconds("daskangel.heartbeat.timeout")
        for a in holders:
            live.last_seen[a] = cluster.loop.asyncio_loop.time() - 10 * timeout  # type: ignore[attr-defined]
        client.sync(live.check_once)  # unwatched: forgotten, not restarted
        before = set(workers_info(client))
        w2 = ps.zeros("second", (100,))
        client.sync(live.check_once)
        assert set(workers_info(client)) == before  # nobody restarted
        assert w2.get().shape == (100,)


def _spin(seconds: float) -> float:
    """CPU work on the worker's event loop (as a first numba compile inside an
    inline PS op): nothing on that loop answers meanwhile."""
    end = time.process_time() + seconds
    x = 0.0
    while time.process_time() < end:
        x += 1.0
    return x


@pytest.mark.timeout(120)
def test_a_busy_worker_is_not_restarted_a_hung_one_is_elsewhere(
    cluster: LocalCluster, client: Client
) -> None:
    """A PS worker whose event loop computes for 2.5x the heartbeat timeout is busy,
    not hung (its nanny sees its process use CPU): it keeps its blocks.  (A
    stopped one is restarted: test_recovery's SIGSTOP test.)"""
    fast = {"daskangel.heartbeat.interval": "200ms", "daskangel.heartbeat.timeout": "2s"}
    with dask.config.set(fast), angel.PSContext(client) as ps:
        w = ps.zeros("busy", (100,), dtype="float64", block_shape=(50,))
        w.increment(np.ones(100))
        holder = w.blocks[0].server.address
        before = set(workers_info(client))
        client.run(_spin, 5.0, workers=[holder])
        assert set(workers_info(client)) == before  # nobody restarted
        np.testing.assert_array_equal(w.get(), np.ones(100))
