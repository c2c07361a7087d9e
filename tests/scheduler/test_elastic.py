"""Elastic PS: blocks survive workers leaving (hand-off) and every loss is rebuilt.

Real worker processes: ``client.retire_workers`` and ``cluster.scale`` down move a
leaving worker's blocks first (nothing lost, no snapshot read), a context whose
every server died is rebuilt from its snapshot on live or newly joined workers,
and the client's list of servers follows joins and leaves.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import dask
import numpy as np
import pytest
from distributed import Client

import daskangel as angel
from daskangel import ops
from daskangel._compat import workers_info
from daskangel.errors import HandoffError, ServerLostError, SnapshotError
from tests.conftest import kill_worker, make_cluster
from tests.scheduler.conftest import join_rebalanced

FAST = {
    "daskangel.client.connect-timeout": "2s",
    "daskangel.client.liveness-check": "300ms",
    "daskangel.heartbeat.interval": "200ms",
    "daskangel.heartbeat.timeout": "60s",  # first numba compiles block a loop
    "daskangel.recovery.retry-interval": "300ms",
    "daskangel.recovery.attempts": 40,
}


def _holders(arr: angel.PSArray) -> set[str]:
    return {b.server.address for b in arr.blocks}


@pytest.mark.timeout(180)
def test_retire_moves_blocks_and_keeps_acknowledged_writes(cluster3: Any, tmp_path: Path) -> None:
    """client.retire_workers on a block holder, with increments in flight and
    snapshots on: every acknowledged increment is there exactly once (before the
    hand-off the blocks were lost, and the snapshot rolled them back)."""
    _cluster, c = cluster3
    with angel.PSContext(c, snapshot=str(tmp_path)) as ps:
        w = ps.zeros("w", (1200,), dtype="int64", block_shape=(100,))
        s = ps.zeros("s", (4, 10**9), dtype="float32", sparse=True)
        w.increment(np.ones(1200, "int64"))
        s.increment(np.ones(3, "float32"), rows=1, cols=[0, 5, 10**9 - 1])
        ps.snapshot()
        w.increment(np.ones(1200, "int64"))
        holder = w.blocks[0].server.address
        with _looping(lambda: w.increment(np.ones(1200, "int64"))) as acked:
            retired = c.retire_workers([holder])
        assert holder in retired
        np.testing.assert_array_equal(w.get(), np.full(1200, 2 + len(acked)))
        np.testing.assert_array_equal(s.get(rows=1, cols=[0, 5, 7, 10**9 - 1]), [1, 1, 0, 1])
        ps.refresh()
        assert holder not in _holders(w) | _holders(s)
        assert holder not in {x.address for x in ps.servers}
        assert c.run_on_scheduler(_lost_blocks) == 0


@contextlib.contextmanager
def _looping(call: Callable[[], Any]) -> Iterator[list[int]]:
    """``call()`` over and over in a thread meanwhile; yields the list of those that
    returned (acknowledged), and raises what one raised."""
    stop, acked, errors = threading.Event(), [], []

    def loop() -> None:
        try:
            while not stop.is_set():
                call()
                acked.append(1)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    t = threading.Thread(target=loop)
    t.start()
    try:
        yield acked
    finally:
        stop.set()
        t.join(60)
    assert not errors, errors


def _writing(w: angel.PSArray) -> contextlib.AbstractContextManager[list[int]]:
    """Increments of ones meanwhile; yields the list of those acknowledged."""
    return _looping(lambda: w.increment(np.ones(w.shape[0])))


@pytest.mark.timeout(240)
def test_scale_down_and_up(cluster3: Any) -> None:
    """cluster.scale(n - 1) without snapshots loses nothing; after scaling up the
    context's server list names the new worker; ps.rebalance() (rebalance-on-join
    off) and the rebalance on join (on, the default) spread the blocks onto it
    online, every acknowledged increment applied exactly once."""
    cluster, c = cluster3
    with angel.PSContext(c) as ps:
        w = ps.zeros("w", (1200,), dtype="float64", block_shape=(100,))
        w.increment(np.arange(1200.0))
        assert len(_holders(w)) == 3
        before = set(workers_info(c))
        cluster.scale(2)
        cluster.sync(cluster._correct_state)  # waits for the scale-down to finish
        gone = before - set(workers_info(c))
        np.testing.assert_array_equal(w.get(), np.arange(1200.0))
        ps.refresh()
        assert gone and not gone & _holders(w)
        assert {x.address for x in ps.servers} == set(workers_info(c))
        with dask.config.set({"daskangel.ps.rebalance-on-join": False}):
            cluster.scale(3)
            cluster.sync(cluster._correct_state)
            c.wait_for_workers(3, timeout=120)
        new = set(workers_info(c)) - (before - gone)
        assert new <= {x.address for x in ps.servers}
        w.increment(np.ones(1200))
        np.testing.assert_array_equal(w.get(), np.arange(1200.0) + 1)
        # rebalance online onto the new worker, increments in flight; a second
        # rebalance asked for meanwhile is refused
        assert not new & _holders(w)
        with _writing(w) as acked:
            first, second = c.run_on_scheduler(_two_rebalances, ps.id)
        assert first["blocks"] > 0 and second == "InvalidStateError", (first, second)
        ps.refresh()
        assert _per_server(w) == [4, 4, 4]
        total = np.arange(1200.0) + 1 + len(acked)
        np.testing.assert_array_equal(w.get(), total)
        assert ps.rebalance()["blocks"] == 0  # already even
        # on join: a holder leaves (4 + 4 + 4 -> 6 + 6), a worker joins, and
        # blocks move to it (-> 4 + 4 + 4) while increments go on
        with _writing(w) as acked:
            cluster.scale(2)
            cluster.sync(cluster._correct_state)
            cluster.scale(3)
            c.wait_for_workers(3, timeout=120)
            joined = c.run_on_scheduler(join_rebalanced)
        ps.refresh()
        assert joined and _per_server(w) == [4, 4, 4], (joined, _per_server(w))
        np.testing.assert_array_equal(w.get(), total + len(acked))


def _per_server(arr: angel.PSArray) -> list[int]:
    per = [b.server.address for b in arr.blocks]
    return sorted(per.count(a) for a in set(per))


@pytest.mark.timeout(120)
def test_retiring_the_last_server_of_a_context_is_refused(cluster3: Any) -> None:
    cluster, c = cluster3
    only = sorted(workers_info(c))[0]
    with angel.PSContext(c, workers=[only]) as ps:
        w = ps.zeros("w", (300,), dtype="int64", block_shape=(100,))
        w.increment(np.ones(300, "int64"))
        with pytest.raises(HandoffError, match="no other running PS server"):
            c.retire_workers([only])
        assert only in workers_info(c)
        assert {x.address for x in ps.servers} == {only}
        np.testing.assert_array_equal(w.get(), np.ones(300))
        # adaptive scaling keeps it too
        closable = cluster.scheduler.workers_to_close(n=3)  # type: ignore[union-attr]
        assert only not in closable


@pytest.mark.timeout(120)
def test_retiring_a_holder_whose_blocks_do_not_fit_elsewhere_is_refused(cluster3: Any) -> None:
    """Moving a leaving worker's dense blocks would push the others past
    ``daskangel.server.max-memory-fraction`` of their memory limit: the retirement
    is refused with the figures, nothing moves and the worker stays."""
    _cluster, c = cluster3
    with angel.PSContext(c) as ps:
        w = ps.zeros("w", (3 * 2**21,), dtype="float32", block_shape=(2**21,))  # 8 MiB a block
        w.increment(np.ones(3 * 2**21, "float32"))
        holders = _holders(w)
        assert len(holders) == 3, holders  # one block a worker
        leaving = w.blocks[0].server.address
        limit = min(int(i["memory_limit"]) for i in workers_info(c).values())
        before = {b.server.address for b in w.blocks}
        # each stays under the limit with its own 8 MiB, none could take 4 more
        with (
            dask.config.set({"daskangel.server.max-memory-fraction": 10 * 2**20 / limit}),
            pytest.raises(HandoffError, match="cannot hold the leaving workers' blocks") as e,
        ):
            c.retire_workers([leaving])
        msg = str(e.value)
        assert "would hold" in msg and "8.00 MiB held already" in msg, msg
        assert "nothing was moved or retired" in msg
        assert leaving in workers_info(c)
        assert {b.server.address for b in w.blocks} == before
        np.testing.assert_array_equal(w.get(), np.ones(3 * 2**21))


@pytest.mark.timeout(180)
def test_every_server_lost_is_rebuilt_or_reported_truthfully(cluster3: Any, tmp_path: Path) -> None:
    """A context whose every server dies is rebuilt from its snapshot on the other
    workers; one without a snapshot says so, and refuses to save its lost blocks."""
    cluster, c = cluster3
    victim = sorted(workers_info(c))[0]
    with (
        angel.PSContext(c, workers=[victim], snapshot=str(tmp_path)) as ps,
        angel.PSContext(c, workers=[victim]) as bare,
    ):
        w = ps.zeros("w", (300,), dtype="int64", block_shape=(100,))
        w.increment(np.ones(300, "int64"))
        ps.snapshot()
        v = bare.zeros("v", (300,), block_shape=(100,))
        kill_worker(c, cluster, victim)
        np.testing.assert_array_equal(w.get(), np.ones(300))
        ps.refresh()
        assert victim not in _holders(w)
        with pytest.raises(ServerLostError, match="no snapshot to rebuild them from"):
            v.get()
        with pytest.raises(SnapshotError, match="blocks on lost servers"):
            bare.save(str(tmp_path / "nowhere"))


async def _two_rebalances(ctx: str, dask_scheduler: Any) -> list[Any]:
    svc = dask_scheduler.plugins["daskangel"].handoff
    got = await asyncio.gather(svc.rebalance(ctx), svc.rebalance(ctx), return_exceptions=True)
    return [type(r).__name__ if isinstance(r, BaseException) else r for r in got]


def _lost_blocks(dask_scheduler: Any) -> int:
    reg = dask_scheduler.plugins["daskangel"].registry
    return sum(len(m.get("lost", ())) for m in reg.arrays.values())


@pytest.mark.timeout(240)
def test_one_worker_dies_writing_a_snapshot_and_its_replacement_rebuilds(
    tmp_path: Path,
) -> None:
    """Every server of the context dies during a snapshot write (a one-worker
    cluster): when the nanny's replacement joins, the blocks are rebuilt there from
    the newest complete snapshot (retried until the new worker is ready)."""
    with (
        dask.config.set(FAST),
        make_cluster(n_workers=1, threads=1) as cluster,
        Client(cluster) as c,
        angel.PSContext(c, snapshot=str(tmp_path)) as ps,
    ):
        w = ps.zeros("w", (400,), dtype="int64", block_shape=(100,))
        w.increment(np.ones(400, "int64"))
        ps.snapshot()
        w.increment(np.ones(400, "int64"))
        (victim,) = workers_info(c)

        def arm(dask_worker: Any) -> None:
            dask.config.set({"daskangel.snapshot.crash-after-blocks": 1})

        c.run(arm)
        with pytest.raises(Exception):  # noqa: B017 - the server died mid-write
            ps.snapshot()
        c.wait_for_workers(1, timeout=120)
        np.testing.assert_array_equal(w.get(), np.ones(400))
        ps.refresh()
        assert victim not in _holders(w)
        assert {x.address for x in ps.servers} == set(workers_info(c))


async def _handoff(worker: str, dask_scheduler: Any) -> dict[str, Any]:
    svc = dask_scheduler.plugins["daskangel"].handoff
    out = dict(await svc.handoff([worker]))
    svc.readmit([worker])  # its servers serve again: the rebalance moves blocks back
    return out


@pytest.mark.timeout(180)
def test_optimiser_steps_during_moves_see_their_group_whole(cluster3: Any) -> None:
    """Adam steps (one two-phase psf over w, m, v, t) go on while a worker's blocks
    are handed off and rebalanced back: the four arrays move as one group whose
    routing switches at once, so no step fails or finds part of the group moved,
    and each is applied once to every block (t counts them)."""
    _cluster, c = cluster3
    with dask.config.set({"daskangel.ps.rebalance-on-join": False}), angel.PSContext(c) as ps:
        w = ps.zeros("w", (12 * 16384,), dtype="float64", block_shape=(16384,))
        opt = ops.Adam(lr=0.1).attach(ps, w)
        opt.step(np.ones(w.shape[0]))
        worker = w.blocks[0].server.address
        with _looping(lambda: opt.step(np.ones(w.shape[0]))) as acked:
            out = c.run_on_scheduler(_handoff, worker)
            back = ps.rebalance()
        assert out["blocks"] == back["blocks"] == 4 * 4, (out, back)  # 4 blocks x 4 arrays
        ps.refresh()
        layouts = {tuple(b.server for b in a.blocks) for a in opt.arrays}
        assert len(layouts) == 1 and _per_server(w) == [4, 4, 4]
        np.testing.assert_array_equal(opt.state["t"].get(), np.full(w.shape[0], 1 + len(acked)))
        assert len(acked) > 0
