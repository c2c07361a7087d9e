"""Heartbeats: a worker is judged only on the time it was watched (held blocks)."""

from __future__ import annotations

from typing import Any

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
