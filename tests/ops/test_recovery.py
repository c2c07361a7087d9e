"""Optimiser state stays co-partitioned with its weights when lost servers are rebuilt."""

from __future__ import annotations

import dask
import numpy as np
import pytest
from distributed import Client

import daskangel as angel
from daskangel import ops
from tests.conftest import kill_worker, make_cluster
from tests.scheduler.conftest import join_rebalanced


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_optimizer_state_moves_with_its_weights(tmp_path):
    with (
        # calls to the dead server give up sooner (each array's cached layout tries once)
        dask.config.set({"daskangel.client.connect-timeout": "2s"}),
        make_cluster(n_workers=3, threads=1) as cluster,
        Client(cluster) as client,
        angel.PSContext(client, snapshot=str(tmp_path / "snap")) as ps,
    ):
        w = ps.zeros("w", (600,), dtype="float64", block_shape=(60,))
        opt = ops.Adam(lr=0.1).attach(ps, w)
        opt.step(np.ones(600))
        ps.snapshot()
        want = [a.get() for a in opt.arrays]
        held: dict[str, int] = {}
        for b in w.blocks:
            held[b.server.address] = held.get(b.server.address, 0) + 1
        # a server with an odd number of blocks: placing them one array at a time
        # would leave the two survivors unevenly loaded and the next array elsewhere
        victim = next(a for a, n in sorted(held.items()) if n % 2 == 1)
        kill_worker(client, cluster, victim)
        got = [a.get() for a in opt.arrays]  # waits for the rebuild
        for g, x in zip(got, want, strict=True):
            np.testing.assert_array_equal(g, x)
        # the nanny's replacement joins and the rebalance on join moves blocks onto
        # it, array by array: the layouts are compared once that has settled (each
        # handle caches its own, so a read mid-move would compare two moments)
        client.wait_for_workers(3, timeout=120)
        client.run_on_scheduler(join_rebalanced)
        ps.refresh()
        layouts = {tuple(b.server for b in a.blocks) for a in opt.arrays}
        assert len(layouts) == 1  # every block of w, m, v, t on the same server
        assert victim not in {s.address for s in layouts.pop()}
        opt.step(np.ones(600))  # binary psfs still find co-partitioned arrays
        assert (opt.state["t"].get() == 2).all()
