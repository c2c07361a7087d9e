"""One LocalCluster for the KMeans tests (test_kmeans, test_inputs, test_minibatch):
its worker processes load the compiled kernels once, not once per module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from distributed import Client, LocalCluster

from tests.conftest import make_cluster


@pytest.fixture(scope="package")
def cluster() -> Iterator[LocalCluster]:
    with make_cluster() as c:
        yield c


@pytest.fixture(scope="package")
def client(cluster: LocalCluster) -> Iterator[Client]:
    with Client(cluster, set_as_default=True) as c:
        yield c
