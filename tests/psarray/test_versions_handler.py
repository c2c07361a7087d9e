"""The servers' lean ``daskangel_versions`` handler (``PSWorkerPlugin.handle_versions``,
the lean ``version_token``'s request), on a process cluster: an idle server reads the
versions at once, a server with a write queued behind its reply answers only once
that write is applied (read-your-writes), refusals come back as error replies, and
compressed-row increments (scattered behind their replies) are counted by the token
right after each one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
from distributed import Client

import daskangel as angel
from daskangel._wire import raise_if_error
from daskangel.errors import StaleLayoutError
from daskangel.psarray._versions import lean_versions

pytestmark = pytest.mark.timeout(180)

SHAPE = (400, 30)
BLOCKS = (50, 30)  # 8 row blocks, on both servers


@pytest.fixture(scope="module")
def ps(client: Client) -> Iterator[angel.PSContext]:
    with angel.PSContext(client) as ctx:
        yield ctx


async def _queued_then_versions(name: str, dask_worker: Any = None) -> dict[str, Any]:
    """(On a server's worker, on its event loop) queue a compressed-row add to each
    of this worker's blocks of ``name`` behind its reply, read the versions as they
    stand, then ask the handler: it must answer after the adds."""
    plug = next(p for p in dask_worker.plugins.values() if hasattr(p, "servers"))
    (idx, srv), *_ = [
        (i, s) for i, s in plug.servers.items() if any(k[0] == name for k in s.blocks)
    ]
    mine = sorted(g for (a, g) in srv.blocks if a == name)
    parts = [
        {
            "block": g,
            "csr_rows": np.array([0, 3], np.int32),
            "csr_len": np.array([2, 1], np.int32),
            "csr_cols": np.array([1, 5, 2], np.int32),
            "values": np.ones(3),
        }
        for g in mine
    ]
    await srv.run("update", 64, may_defer=True, array=name, parts=parts, add=True)
    queued = srv.behind
    before = [srv.blocks[(name, g)].version for g in mine]
    got = await plug.handle_versions(None, server=idx, array=name, blocks=mine)
    idle = await plug.handle_versions(None, server=idx, array=name, blocks=mine)
    stale = await plug.handle_versions(None, server=idx, array=name, blocks=[10_000])
    wrong = await plug.handle_versions(None, server=idx, array=name, blocks=mine, uid="another")
    return {
        "queued": queued,
        "before": before,
        "got": got,
        "idle": idle,
        "stale": stale,
        "wrong": wrong,
    }


def test_the_handler_answers_after_the_writes_queued_before_it(
    ps: angel.PSContext, client: Client
) -> None:
    """With a scattered add queued behind its reply on each server, the handler's
    versions count it (one more than the blocks had when it was asked); asked
    again on the now idle server, the same; a block the server does not hold and
    another creation's uid come back as StaleLayoutError replies, nothing changed."""
    a = ps.zeros("vh-queued", SHAPE, dtype="float64", block_shape=BLOCKS)
    a.increment(sp.csr_matrix(np.ones(SHAPE)))  # each server's first update runs undeferred
    start = lean_versions(a._binding, a.name, a.meta)
    assert start is not None
    out = client.run(_queued_then_versions, "vh-queued")
    assert len(out) == 2
    for got in out.values():
        assert got["queued"]
        assert got["got"] == [v + 1 for v in got["before"]] == got["idle"]
        for bad in ("stale", "wrong"):
            with pytest.raises(StaleLayoutError):
                raise_if_error(got[bad])
    now = lean_versions(a._binding, a.name, a.meta)
    assert now == {g: v + 1 for g, v in start.items()}
    want = np.ones(SHAPE)
    for g in range(SHAPE[0] // BLOCKS[0]):
        want[g * BLOCKS[0] + 0, [1, 5]] += 1
        want[g * BLOCKS[0] + 3, 2] += 1
    np.testing.assert_array_equal(a.get(), want)


def test_the_token_counts_every_compressed_row_increment_at_once(ps: angel.PSContext) -> None:
    """Compressed-row increments (scattered behind their replies) of a few rows
    each: right after each one, the lean versions have moved on exactly the blocks
    it wrote, and the sum is exact."""
    a = ps.zeros("vh-csr", SHAPE, dtype="int32", block_shape=BLOCKS)
    a.increment(sp.csr_matrix(np.ones(SHAPE, np.int32)))  # each server's first, undeferred
    versions = lean_versions(a._binding, a.name, a.meta)
    assert versions is not None
    rng = np.random.default_rng(3)
    want = np.ones(SHAPE, np.int64)
    for _ in range(12):
        X = sp.random(*SHAPE, density=0.01, random_state=rng, format="csr", dtype=np.float64)
        X.data = rng.integers(1, 5, X.nnz).astype(np.float64)
        X = X.astype(np.int32)
        a.increment(X)
        want += X.toarray()
        written = {int(r) // BLOCKS[0] for r in np.unique(X.nonzero()[0])}
        now = lean_versions(a._binding, a.name, a.meta)
        assert now == {g: v + (g in written) for g, v in versions.items()}
        versions = now
    np.testing.assert_array_equal(a.get(), want.astype(np.int32))


def test_the_handler_is_registered_on_every_worker(ps: angel.PSContext, client: Client) -> None:
    """Every worker of a PS context answers ``daskangel_versions`` (a plain asyncio
    check of the handler table, run on each worker's loop)."""

    async def has(dask_worker: Any = None) -> bool:
        await asyncio.sleep(0)
        return "daskangel_versions" in dask_worker.handlers

    assert all(client.run(has).values())
