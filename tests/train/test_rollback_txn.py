"""A rollback aborts the two-phase psf updates of the run it abandons (real processes).

A task runs a multi-server psf update (``psf_prepare`` on every server, then
``psf_commit``) at its second clock and its worker dies between the two: the surviving server keeps
the block held for a commit that never comes.  Before the fix the hold outlived
the rollback's restore, and every write of the restarted run to that block
waited for it to expire (``daskangel.ops.prepare-timeout``, 60 s by default,
90 s here): the restarted tasks found the abandoned transaction still holding it.  The rollback's
fence now aborts the abandoned run's prepared transactions, and a restore drops
the hold of a block it replaces.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from distributed import Event, get_client

import daskangel as angel
from daskangel import ops
from tests.scheduler.test_recovery import FAST
from tests.train._rollback import rollback_setup

CLOCKS = 2
# the driver gives up on the stopped tasks at once; a hold expires only after 90 s
CONFIG = {**FAST, "daskangel.train.stop-timeout": "1s", "daskangel.ops.prepare-timeout": "90s"}


@dataclass(frozen=True)
class AddOneDieOn(ops.UpdateFunc):
    """Adds 1 everywhere; the server of block ``die_on`` waits (a FIFO) until the other
    server has staged its part, then kills its worker: the other stays prepared."""

    fifo: str = ""
    die_on: int = 1

    def partition_update(self, part: Any) -> None:
        part.data[...] += 1
        if part.block == self.die_on:
            with open(self.fifo, "rb") as f:  # blocks until the other server writes
                f.read(1)
            os._exit(1)
        with open(self.fifo, "wb") as f:
            f.write(b"x")


def _holds(dask_worker: Any = None) -> list[str]:
    """On a worker: the transactions its PS servers hold blocks for."""
    servers = dask_worker.plugins["daskangel-ps"].servers.values()
    return sorted({t for s in servers for t in s.reserved.values()})


def _step(victim: str, prefix: str, fifo: str) -> Callable[[Any, Any], list[str]]:
    def step(ctx: Any, item: Any) -> list[str]:
        y = ctx.array("y")
        first = not Event(f"{prefix}-dying").is_set()  # the run before the rollback
        held: list[str] = []
        if not first:  # the restarted run, before any write of it: is a block held?
            held = sorted({t for h in get_client().run(_holds).values() for t in h})
        for c in ctx.epochs(CLOCKS):
            if first and c == 1 and ctx.worker == victim:
                Event(f"{prefix}-dying").set()
                y.plain.psf(AddOneDieOn(fifo=fifo, die_on=1))  # never returns
            y.increment(np.array([1, 1], "int64"))
            ctx.clock()
        return held

    return step


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_prepared_transaction_of_the_abandoned_run_does_not_stall_the_new_one(
    tmp_path: Path,
) -> None:
    fifo = str(tmp_path / "staged")
    os.mkfifo(fifo)
    with rollback_setup(tmp_path, CONFIG) as (_, c, ps, y):
        victim = y.blocks[1].server.address
        assert y.blocks[0].server.address != victim  # one block on each worker: two-phase
        res = angel.train(ps, _step(victim, tmp_path.name, fifo), [None, None],
                          sync=angel.BSP(), epochs=CLOCKS, progress=False)  # fmt: skip
        assert res.rollbacks == 1, res
        assert res.results == [[], []]  # the restarted run found no block held
        # the psf's staged +1 is never committed; each clock adds 1 per task
        np.testing.assert_array_equal(y.get(), [2 * CLOCKS, 2 * CLOCKS])
        assert all(h == [] for h in c.run(_holds).values())  # no hold left anywhere
