"""memory:// lives in one process: on a cluster whose workers are processes of their
own, snapshot/save/load to such a URL is refused with a message that says so (it
used to fail later, with errors that never mentioned why)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from distributed import Client, LocalCluster

import daskangel as angel
from daskangel.errors import InvalidArgumentError

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def client() -> Iterator[Client]:
    with (
        LocalCluster(
            n_workers=1, threads_per_worker=1, processes=True, dashboard_address=":0"
        ) as c,
        Client(c) as cl,
    ):
        yield cl


def test_memory_urls_are_refused_on_process_workers(client: Client, tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match=r"snapshot: 'memory://snap' .* one process"):
        angel.PSContext(client, snapshot="memory://snap")
    with angel.PSContext(client) as ps:
        w = ps.zeros("w", shape=(10,), dtype="float32")
        w.increment(np.ones(10, "float32"), cols=np.arange(10))
        with pytest.raises(InvalidArgumentError, match=r"url: 'memory://m' .*processes=False"):
            ps.save("memory://m")
        with pytest.raises(InvalidArgumentError, match="memory://"):
            ps.load("memory://m")
        ps.save(str(tmp_path / "m"))  # a directory works
        np.testing.assert_array_equal(angel.load_arrays(str(tmp_path / "m"))["w"], np.ones(10))


def test_memory_urls_work_on_thread_workers() -> None:
    with (
        LocalCluster(
            n_workers=1, threads_per_worker=1, processes=False, dashboard_address=":0"
        ) as c,
        Client(c) as cl,
        angel.PSContext(cl) as ps,
    ):
        w = ps.zeros("w2", shape=(4,), dtype="float32")
        w.increment(np.full(4, 2, "float32"), cols=np.arange(4))
        ps.save("memory://threads-ok")
        np.testing.assert_array_equal(angel.load_arrays("memory://threads-ok")["w2"], np.full(4, 2))
