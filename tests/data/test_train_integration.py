"""A persisted Dataset feeds angel.train: one task per partition, on its worker."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import daskangel as angel


@pytest.mark.timeout(120)
def test_train_reads_every_row_once_per_epoch_on_the_partitions_workers(client):
    n = 3000
    X = sp.random(n, 50, density=0.1, random_state=0, format="csr", dtype=np.float32)
    ds = angel.data.from_array(X, np.arange(n), storage="memory_disk", memory_budget=40_000)
    ds = ds.persist(n_partitions=4)

    def fn(ctx, part):
        from distributed import get_worker

        seen = ctx.array("seen")
        for epoch in ctx.epochs():
            for b in part.batches(128, shuffle=True, seed=3, epoch=epoch):
                seen.increment(np.ones(b.n_rows, np.float32), cols=b.labels.astype(np.int64))
            ctx.clock()
        return get_worker().address, part.n_rows

    with angel.PSContext(client) as ps:
        seen = ps.zeros("seen", shape=(n,), dtype="float32")
        res = angel.train(ps, fn, ds, epochs=3, progress=False)
        np.testing.assert_array_equal(seen.get(), np.full(n, 3.0, np.float32))
    where = [r[0] for r in res.results]
    assert where == ds.workers and sum(r[1] for r in res.results) == n
