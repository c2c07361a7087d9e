"""Requests and arrays that cannot fit (issue 14 section 4.7), on real process clusters.

A slice used to be expanded into an index array before the request-size check
(numpy's MemoryError for 8 TiB, or seconds and GiB of the caller's memory before
the refusal); a dense array larger than the workers' memory restarted them and lost
unrelated arrays.
"""

from __future__ import annotations

import tracemalloc

import dask
import numpy as np
import pytest
from distributed import Client, LocalCluster

import daskangel as angel
from daskangel._compat import workers_info
from daskangel.errors import RequestTooLargeError, ServerMemoryError
from daskangel.psarray import get_agent


@pytest.mark.timeout(180)
def test_oversized_slices_are_refused_before_anything_is_allocated(ps):
    s = ps.zeros("s_fit", (2**40,), sparse=True)
    W = ps.zeros("W_fit", (4, 2**40), sparse=True)
    d = ps.zeros("d_fit", (1000, 100), dtype="float64")
    tracemalloc.start()
    try:
        cases = [
            lambda: s.get(cols=slice(None)),  # 8 TiB of indices, 4 TiB of values
            lambda: s.get(),
            lambda: s.increment(1.0, cols=slice(0, 2**39)),
            lambda: W.get(rows=0, cols=slice(2**20, None)),
            lambda: W.increment(np.float32(1), rows=[1, 2], cols=slice(None)),
            lambda: get_agent().get("s_fit", cols=slice(None)),
            lambda: get_agent().increment("s_fit", 1.0, cols=slice(0, 2**38)),
        ]
        for case in cases:
            with pytest.raises(RequestTooLargeError, match="nothing was allocated or sent"):
                case()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20, f"refusing the requests allocated {peak:,} bytes"
    with dask.config.set({"daskangel.client.max-request-bytes": "512KiB"}):
        with pytest.raises(RequestTooLargeError, match=r"1,000 x 100 entries of 8 bytes"):
            d.get(rows=slice(None))
        d.get(rows=slice(0, 100))  # 80 KB: fine
    assert s.get(cols=[0, 2**40 - 1]).tolist() == [0.0, 0.0]  # nothing changed


@pytest.mark.timeout(240)
def test_an_array_larger_than_the_servers_memory_is_refused_with_the_figures():
    with (
        LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            memory_limit="1GiB",
            dashboard_address=":0",
            worker_dashboard_address=None,
        ) as cluster,
        Client(cluster) as client,
        angel.PSContext(client) as ps,
    ):
        keep = ps.full("keep", (1000,), 3.0)
        workers = set(workers_info(client))
        with pytest.raises(ServerMemoryError) as e:
            ps.zeros("huge", (2**30,), dtype="float32")  # 4 GiB on two 1 GiB workers
        msg = str(e.value)
        assert "'huge' needs 4.00 GiB of dense blocks" in msg
        assert "memory limit 1.00 GiB x 0.8 allows 819.20 MiB" in msg
        assert isinstance(e.value, MemoryError)
        assert "huge" not in ps.arrays()
        np.testing.assert_array_equal(keep.get(), 3.0)  # nothing lost, nobody restarted
        assert set(workers_info(client)) == workers
        ok = ps.zeros("ok", (2**26,), dtype="float32")  # what fits is still created
        assert ok.shape == (2**26,)
        ps.drop("ok")
