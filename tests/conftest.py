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
from distributed.utils import get_mp_context

import daskangel as angel

# numba caches compiled kernels next to the sources; keep worker processes quiet
os.environ.setdefault("PYTHONWARNINGS", "ignore::DeprecationWarning")

# A LocalCluster closes a nanny for good when its restarted worker has not registered
# within ``distributed.deploy.lost-worker-timeout`` (15 s).  On 2 busy cores a worker
# process killed by a fault-tolerance test can take longer than that to start again
# (imports, kernel cache, PS plugin), and the cluster would shrink for the rest of the
# module: the soak test's "Only 2/3 workers arrived" flake.
dask.config.set({"distributed.deploy.lost-worker-timeout": "300s"})

# Worker processes forked from a forkserver that has imported distributed and daskangel
# once, instead of spawned: a spawned worker imports them again, ~4 s of CPU on the 2-core
# VM, ~8 s a cluster, and the suite starts a process cluster in most of its ~80 modules
# (distributed preloads itself into a forkserver for the same reason).  The workers
# stay separate processes: serialisation, kills and restarts are as real as before.
dask.config.set({"distributed.worker.multiprocessing-method": "forkserver"})
# (after distributed has set its own preload, once, in get_mp_context: ours replaces it)
get_mp_context().set_forkserver_preload(["distributed", "daskangel", "daskangel.models"])


# The order xdist hands the test files out in (``--dist loadfile``: a file runs whole on
# one worker).  xdist's own order is most tests first, which left the few-test files whose
# tests each take a minute or more (kills and rollbacks waiting out timeouts, notebooks)
# to the end, one worker running them while the other idled.  Now: the longest files first
# (``LONGEST_FIRST``, seconds measured on the 2-core VM at 226a17a, fresh clone, load 6-8:
# benchmarks/RESULTS.md, "Suite time, tenth session"), then every file with a
# ``@pytest.mark.slow`` test, then the rest most tests first; the short files fill in at
# the end.  A stale entry only costs balance, never a test.
LONGEST_FIRST = (
    "tests/models/test_sklearn_checks.py",  # 362 s
    "tests/models/lda/test_lda.py",  # 184 s
    # the halves of the smoke runs (1023 s for 11 of 17): after the two above have
    # compiled the models' kernels into the cache (a smoke run first compiled every kernel
    # in its own process and in each of its workers: bench_data over its 240 s at load 13)
    "tests/test_benchmarks.py",
    "tests/test_benchmarks_odd.py",
    "tests/models/mf/test_estimator.py",  # 131 s
    "tests/psarray/test_csrwire.py",  # 122 s
    "tests/psarray/test_writebehind.py",  # 107 s
    "tests/ops/test_builtins.py",  # 99 s
    "tests/models/test_io.py",  # 96 s
)


def pytest_configure(config: pytest.Config) -> None:
    # --dist loadfile: hand the files out in the collection's order (set below)
    if getattr(config.option, "dist", "no") == "loadfile":
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    def path(item: pytest.Item) -> str:
        return item.nodeid.split("::", 1)[0]

    count: dict[str, int] = {}
    slow: set[str] = set()
    for item in items:
        count[path(item)] = count.get(path(item), 0) + 1
        if item.get_closest_marker("slow") is not None:
            slow.add(path(item))
    listed = {p: i for i, p in enumerate(LONGEST_FIRST)}

    def rank(item: pytest.Item) -> tuple[int, int]:
        p = path(item)
        if p in listed:
            return (0, listed[p])
        return (1, 0) if p in slow else (2, -count[p])

    items.sort(key=rank)  # stable: a file's tests keep their order


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
