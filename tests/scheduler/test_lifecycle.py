"""A clean shutdown prints nothing alarming; a real loss still warns (issue 14 §4.5).

Before: closing a ``LocalCluster`` that still held arrays printed "worker … left;
array 'w' lost blocks [0]" for every worker, and a model fitted without ``ps=``
left a context of its own whose blocks were "lost" the same way when the cluster
closed after the client.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator

import dask
import numpy as np
import pytest
from distributed import Client

import daskangel as angel
from daskangel import models

from ..conftest import make_cluster

pytestmark = pytest.mark.timeout(240)


class _Records(logging.Handler):
    """Keeps daskangel's log records; ``wait(pred)`` blocks until one matches."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []
        self._cond = threading.Condition()

    def emit(self, record: logging.LogRecord) -> None:
        with self._cond:
            self.records.append(record)
            self._cond.notify_all()

    def wait(self, pred: Callable[[logging.LogRecord], bool], timeout: float = 60) -> None:
        with self._cond:
            ok = self._cond.wait_for(lambda: any(pred(r) for r in self.records), timeout)
        assert ok, [r.getMessage() for r in self.records]

    def alarming(self) -> list[str]:
        return [r.getMessage() for r in self.records if r.levelno >= logging.WARNING]


@pytest.fixture
def records() -> Iterator[_Records]:
    h = _Records()
    log = logging.getLogger("daskangel")
    old = log.level
    log.addHandler(h)
    log.setLevel(logging.DEBUG)
    try:
        yield h
    finally:
        log.removeHandler(h)
        log.setLevel(old)


def test_closing_client_then_cluster_prints_nothing_alarming(records: _Records) -> None:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 5))
    y = (X[:, 0] > 0).astype(np.int64)
    with make_cluster(threads=1, processes=False) as cluster:
        with Client(cluster) as client:
            ps = angel.PSContext(client)  # the user's own: lives until closed or the end
            ps.zeros("w", (1000,), "float32").get(cols=slice(0, 10))
            model = models.LogisticRegression(max_iter=1, progress=False).fit(X, y)
            own = model._ps.id
            registry = cluster.scheduler.plugins["daskangel"].registry
            assert any(m["ctx"] == own for m in registry.arrays.values())
        # the client left: the scheduler closed the model's own context and freed it
        records.wait(lambda r: "client" in r.getMessage() and own in r.getMessage())
        assert not any(m["ctx"] == own for m in registry.arrays.values())
        assert "w" in registry.arrays
    # the user's array went with the cluster: said at INFO, not as a loss
    assert any("with the cluster" in r.getMessage() for r in records.records)
    assert records.alarming() == []


def test_a_worker_lost_while_others_run_is_still_a_warning(records: _Records) -> None:
    with (
        dask.config.set({"daskangel.context.shutdown-grace": "0.2s"}),
        make_cluster(n_workers=3, threads=1, processes=False) as cluster,
        Client(cluster) as client,
        angel.PSContext(client) as ps,
    ):
        ps.zeros("w", (3, 100), "float32", block_shape=(1, 100))
        servers = cluster.scheduler.plugins["daskangel"].registry.arrays["w"]["servers"]
        holders = list(dict.fromkeys(s[0] for s in servers))
        assert len(holders) >= 2, servers
        workers = {w.address: w for w in cluster.workers.values()}
        # closed on purpose while two others run: its blocks are handed off, no loss
        client.sync(workers[holders[0]].close)
        records.wait(lambda r: "handed off its blocks" in r.getMessage())
        assert not [r for r in records.records if r.levelno >= logging.WARNING]
        assert not cluster.scheduler.plugins["daskangel"].registry.arrays["w"].get("lost")
        # vanished without closing (as a killed process does): said at once
        cluster.sync(
            cluster.scheduler.remove_worker, holders[1], stimulus_id="test-lost", close=False
        )
        records.wait(lambda r: r.levelno == logging.WARNING and holders[1] in r.getMessage())
        assert not any("with the cluster" in r.getMessage() for r in records.records)
