"""Shared fixtures: one real LocalCluster (processes, 2 workers) per test module."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from typing import Any

import dask
import pytest
from distributed import Client, LocalCluster
from distributed.diagnostics.plugin import SchedulerPlugin

import daskangel as angel

# numba caches compiled kernels next to the sources; keep worker processes quiet
os.environ.setdefault("PYTHONWARNINGS", "ignore::DeprecationWarning")

# A LocalCluster closes a nanny for good when its restarted worker has not registered
# within ``distributed.deploy.lost-worker-timeout`` (15 s).  On 2 busy cores a worker
# process killed by a fault-tolerance test can take longer than that to start again
# (imports, kernel cache, PS plugin), and the cluster would shrink for the rest of the
# module: the soak test's "Only 2/3 workers arrived" flake.
dask.config.set({"distributed.deploy.lost-worker-timeout": "300s"})


def make_cluster(n_workers: int = 2, threads: int = 2, processes: bool = True) -> LocalCluster:
    return LocalCluster(
        n_workers=n_workers,
        threads_per_worker=threads,
        processes=processes,
        dashboard_address=":0",
        worker_dashboard_address=None,
    )


def package_cluster(n_workers: int = 2, threads: int = 2) -> tuple[Any, Any]:
    """``cluster, client = package_cluster()`` in a family's ``conftest.py``: one
    LocalCluster (worker processes) and its default Client for every module of the
    package, so the workers import daskangel and load the compiled kernels once."""

    @pytest.fixture(scope="package")
    def cluster() -> Iterator[LocalCluster]:
        with make_cluster(n_workers=n_workers, threads=threads) as c:
            yield c

    @pytest.fixture(scope="package")
    def client(cluster: LocalCluster) -> Iterator[Client]:
        with Client(cluster, set_as_default=True) as c:
            yield c

    return cluster, client


@pytest.fixture(scope="module")
def cluster(request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    """The module's cluster: worker processes, unless the module sets
    ``IN_PROCESS = True`` (its tests check neither faults nor serialisation between
    processes): each worker process imports daskangel and loads (on a fresh clone:
    compiles) the numba kernels again, seconds of CPU per module on 2 cores."""
    with make_cluster(processes=not getattr(request.module, "IN_PROCESS", False)) as c:
        yield c


@pytest.fixture(scope="module")
def client(cluster: LocalCluster) -> Iterator[Client]:
    with Client(cluster, set_as_default=True) as c:
        yield c


@pytest.fixture
def ps(client: Client) -> Iterator[angel.PSContext]:
    with angel.PSContext(client) as ctx:
        yield ctx


class _RemovalWatch(SchedulerPlugin):
    """Sets a threading.Event when the watched worker leaves the scheduler."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.event = threading.Event()
        self.name = f"removal-watch-{address}"

    def remove_worker(self, scheduler: Any, worker: str, **kwargs: Any) -> None:
        if worker == self.address:
            self.event.set()


async def _exit_soon() -> None:
    os._exit(1)


def kill_worker(client: Client, cluster: LocalCluster, address: str, timeout: float = 60) -> None:
    """Kill a worker process the hard way (``os._exit``) and wait until the
    scheduler has removed it (an event, not a sleep)."""
    watch = _RemovalWatch(address)
    cluster.scheduler.add_plugin(watch)  # type: ignore[union-attr]
    try:
        client.run(_exit_soon, workers=[address], wait=False)
        assert watch.event.wait(timeout), f"worker {address} was not removed in {timeout}s"
    finally:
        cluster.scheduler.remove_plugin(name=watch.name)  # type: ignore[union-attr]
