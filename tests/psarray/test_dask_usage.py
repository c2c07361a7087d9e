"""PSArray used from inside Dask: client.map tasks and dask.array.map_blocks, on
2 workers at once ("PS service" mode of Angel)."""

from __future__ import annotations

import threading

import dask.array as da
import numpy as np
from distributed import Client

import daskangel as angel


def _push(i: int, w: angel.PSArray) -> int:
    rng = np.random.default_rng(i)
    idx = rng.integers(0, 1000, 500)
    w.increment(np.ones(500, "int64"), cols=idx)  # duplicates are summed
    from distributed import get_worker

    return get_worker().address  # type: ignore[no-any-return]


def test_inside_client_map(ps: angel.PSContext, client: Client) -> None:
    w = ps.zeros("w", (1000,), dtype="int64")
    workers = client.gather(client.map(_push, range(40), w=w))
    assert len(set(workers)) == 2  # both workers pushed
    expected = np.zeros(1000, "int64")
    for i in range(40):
        np.add.at(expected, np.random.default_rng(i).integers(0, 1000, 500), 1)
    np.testing.assert_array_equal(w.get(), expected)


def test_inside_map_blocks(ps: angel.PSContext, client: Client) -> None:
    col_sums = ps.zeros("col_sums", (64,), dtype="float64")
    x = da.random.default_rng(0).random((20_000, 64), chunks=(1000, 64))

    def push(block: np.ndarray) -> np.ndarray:
        col_sums.increment(block.sum(axis=0))
        return block[:1, :1]

    x.map_blocks(push, chunks=(1, 1), dtype=x.dtype).compute()
    np.testing.assert_allclose(col_sums.get(), x.sum(axis=0).compute())


def test_from_driver_threads(ps: angel.PSContext) -> None:
    w = ps.zeros("w", (10,), dtype="int64")
    start = threading.Barrier(8)

    def work() -> None:
        start.wait()
        for _ in range(50):
            w.increment(np.ones(10, "int64"))
            w.get(cols=[0])

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    np.testing.assert_array_equal(w.get(), np.full(10, 400))
