"""One LocalCluster for the LDA tests that share it (test_lda, test_svi): its worker
processes load the compiled kernels once, not once per module."""

from __future__ import annotations

from tests.conftest import package_cluster

cluster, client = package_cluster()
