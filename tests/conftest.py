"""Shared fixtures: one real LocalCluster (processes, 2 workers) per test module."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from distributed import Client, LocalCluster

import daskangel as angel

# numba caches compiled kernels next to the sources; keep worker processes quiet
os.environ.setdefault("PYTHONWARNINGS", "ignore::DeprecationWarning")


def make_cluster(n_workers: int = 2, threads: int = 2, processes: bool = True) -> LocalCluster:
    return LocalCluster(
        n_workers=n_workers,
        threads_per_worker=threads,
        processes=processes,
        dashboard_address=":0",
        worker_dashboard_address=None,
    )


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with make_cluster() as c:
        yield c


@pytest.fixture(scope="module")
def client(cluster: LocalCluster) -> Iterator[Client]:
    with Client(cluster, set_as_default=True) as c:
        yield c


@pytest.fixture
def ps(client: Client) -> Iterator[angel.PSContext]:
    with angel.PSContext(client) as ctx:
        yield ctx
