"""A worker process killed in the middle of an SGD fit with snapshots on: the fit goes
back to the newest snapshot, finishes, and predicts as well as the fault-free fit.

Snapshots every 3 clocks of 2 per epoch: the one the fit goes back to (clock 9) is
taken in the middle of an epoch, after the tasks wrote their users' rows."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import dask
import pytest
from distributed import Client

from daskangel._compat import workers_info
from daskangel.models import MatrixFactorization
from tests.conftest import kill_worker, make_cluster

from .conftest import planted_ratings, split

EPOCHS, ROUNDS, SNAP, KILL_AT = 12, 2, 3, 10  # the kill comes at clock 10 of 24
# the default heartbeat (a killed process closes its connections: the scheduler removes
# it at once); a short one had busy but healthy workers restarted on 2 loaded cores.
# No blocks move to the killed worker's replacement while the fit runs.
CONFIG = {"daskangel.ps.rebalance-on-join": False}


def _model(snap: Path) -> MatrixFactorization:
    return MatrixFactorization(
        n_factors=8, max_iter=EPOCHS, learning_rate=0.02, clocks_per_epoch=ROUNDS,
        snapshot=str(snap), snapshot_every=SNAP, n_tasks=2, random_state=0, progress=False,
    )  # fmt: skip


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_worker_killed_mid_fit_gives_the_fault_free_rmse(tmp_path: Path) -> None:
    train, test = split(planted_ratings(n_users=300, n_items=120, density=0.25))
    with (
        dask.config.set(CONFIG),
        make_cluster(n_workers=2, threads=1) as cluster,
        Client(cluster) as c,
    ):
        ref = _model(tmp_path / "ref").fit(train)
        want = ref.rmse(test)
        ref.close()
        # the scheduler (in this process) tells every clock tick: the fit's task 0
        # passing clock KILL_AT is the signal to kill a worker (an event, not a sleep)
        reached = threading.Event()

        def watch(job: str, task: int, clock: int, stats: dict[str, Any]) -> None:
            if clock >= KILL_AT:
                reached.set()

        listeners = cluster.scheduler.plugins["daskangel"].clocks.stats_listeners
        listeners.append(watch)
        m = _model(tmp_path / "snap")
        err: list[BaseException] = []

        def fit() -> None:
            try:
                m.fit(train)
            except BaseException as e:  # noqa: BLE001 - re-raised below
                err.append(e)

        t = threading.Thread(target=fit)
        t.start()
        try:
            assert reached.wait(60), "the fit never reached the kill clock"
            victim = sorted(workers_info(c))[0]
            kill_worker(c, cluster, victim)
        finally:
            t.join(100)
            listeners.remove(watch)
        assert not t.is_alive() and not err, err
        res: Any = m.train_result_
        assert res.rollbacks == 1, res  # the kill hit the fit
        assert list(m.history_.epoch) == list(range(1, EPOCHS + 1))
        got = m.rmse(test)
        assert abs(got - want) <= 0.005, (got, want)
        m.close()
