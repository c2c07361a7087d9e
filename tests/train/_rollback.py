"""Shared set-up of the rollback (and continue) kill tests: a 2-process cluster, a
snapshotting context with ``recovery="rollback"`` and a two-block array ``y`` (one
block a worker)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import dask
from distributed import Client, LocalCluster

import daskangel as angel
from tests.conftest import make_cluster


@contextmanager
def rollback_setup(
    tmp_path: Path, config: dict[str, Any], recovery: str = "rollback"
) -> Iterator[tuple[LocalCluster, Client, Any, Any]]:
    """``with rollback_setup(tmp_path, config) as (cluster, client, ps, y):`` — ``y`` is
    an int64 ``(2,)`` array in blocks of one, ``y.blocks[1]`` on the other worker
    (``recovery="continue"``: the same, lost blocks rebuilt from the snapshot)."""
    with (
        dask.config.set(config),
        make_cluster(n_workers=2, threads=2) as cluster,
        Client(cluster) as c,
        angel.PSContext(
            c, snapshot=str(tmp_path / "snap"), snapshot_every=1, recovery=recovery
        ) as ps,
    ):
        y = ps.zeros("y", (2,), "int64", block_shape=(1,))
        yield cluster, c, ps, y
