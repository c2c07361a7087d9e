"""One three-worker process cluster per module for the elastic and recovery tests.

A module sets its daskangel timings in a module-level ``FAST`` dict (the fixture
applies them for the module's lifetime; the scheduler, hence the liveness and
recovery services, runs in this process).  Every test starts with three running
workers: a worker retired by the client (its nanny closed) is replaced, one killed
by a test is awaited while its nanny restarts it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any

import dask
import pytest
from distributed import Client, LocalCluster
from distributed.core import Status

from daskangel._compat import workers_info
from tests.conftest import make_cluster


def resize(cluster: LocalCluster, c: Client, n: int = 3) -> None:
    """Back to ``n`` running workers.  A nanny closed with its retired worker is
    forgotten so that ``scale`` starts another; a nanny still running is left to
    restart its worker (forgetting it would start a fourth)."""
    live = {str(w.get("name")) for w in workers_info(c).values()}
    for name, nanny in list(cluster.workers.items()):
        if str(name) in live:
            continue
        if getattr(nanny, "status", None) == Status.running:
            # restarting its killed worker, or about to close with its retired one
            with contextlib.suppress(TimeoutError):
                c.wait_for_workers(n, timeout=30)
            if getattr(nanny, "status", None) == Status.running:
                continue
        del cluster.workers[name]
    cluster.scale(n)
    c.wait_for_workers(n, timeout=120)


@pytest.fixture(scope="module")
def _cluster3(request: pytest.FixtureRequest) -> Iterator[tuple[LocalCluster, Client]]:
    with (
        dask.config.set(getattr(request.module, "FAST", {})),
        make_cluster(n_workers=3, threads=1) as cluster,
        Client(cluster) as c,
    ):
        yield cluster, c


@pytest.fixture
def cluster3(_cluster3: tuple[LocalCluster, Client]) -> tuple[LocalCluster, Client]:
    """The module's cluster with three running workers."""
    resize(*_cluster3)
    return _cluster3


async def join_rebalanced(dask_scheduler: Any) -> bool:
    """(``client.run_on_scheduler``) Wait for the rebalance that workers joining
    started (``daskangel.ps.rebalance-on-join``); whether one was started."""
    task = dask_scheduler.plugins["daskangel"].handoff._join_task
    if task is not None:
        await asyncio.shield(task)
    return task is not None


def holder_of(name: str, block: int = 0, dask_scheduler: Any = None) -> str:
    """(``client.run_on_scheduler``) The worker holding a block of an array."""
    return str(dask_scheduler.plugins["daskangel"].registry.arrays[name]["servers"][block][0])
