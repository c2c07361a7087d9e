"""A partition pinned to a worker that dies is rebuilt on a live one by repair()."""

from __future__ import annotations

import numpy as np
import pytest
from distributed import Client

import daskangel as angel
from tests.conftest import kill_worker, make_cluster


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_repair_rebuilds_partitions_of_a_lost_worker(tmp_path):
    p = tmp_path / "r.svm"
    p.write_bytes(b"".join(b"%d %d:1 %d:2\n" % (i % 2, i % 7 + 1, i % 11 + 8) for i in range(5000)))
    with make_cluster(n_workers=2, threads=1) as cl, Client(cl) as client:
        ds = angel.data.read_libsvm(str(p), storage="disk").persist(n_partitions=4)
        before = ds.compute()
        assert ds.lost() == [] and ds.repair() == []
        victim = ds.workers[0]
        n_lost = ds.workers.count(victim)
        # a real failure: the worker process exits; repair() on the survivor(s)
        kill_worker(client, cl, victim)
        assert ds.lost() == [i for i, w in enumerate(ds.workers) if w == victim]
        lost = ds.repair()
        assert len(lost) == n_lost and victim not in ds.workers
        after = ds.compute()
        assert ds.n_rows == 5000 and ds.n_features == before.n_features
        assert _rows(before) == _rows(after)


def _rows(b):
    dense = b.to_scipy().toarray()
    return sorted(map(tuple, np.column_stack([b.labels, dense]).tolist()))
