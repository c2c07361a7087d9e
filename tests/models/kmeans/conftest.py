"""One LocalCluster for the KMeans tests (test_kmeans, test_inputs, test_minibatch):
its worker processes load the compiled kernels once, not once per module."""

from __future__ import annotations

from tests.conftest import package_cluster

cluster, client = package_cluster()
