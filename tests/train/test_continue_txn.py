"""``recovery="continue"``: a task lost between the two phases of a psf update leaves
no block held behind it (real processes, a real kill).

A task runs a multi-server psf update at its second clock and its worker dies
between ``psf_prepare`` and ``psf_commit``: the surviving server has staged its part
and holds its block for a commit that never comes.  Continue mode fences no run
(only a rollback does), so before the fix the hold stayed until
``daskangel.ops.prepare-timeout`` (600 s here), and every write to that block, the
surviving task's and the restarted task's, waited for it: the job stalled (the
test timed out).  Now the scheduler, told the worker left, has every server abort
the transactions that worker prepared (``release_origin``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from distributed import Event

import daskangel as angel
from tests.scheduler.test_recovery import FAST
from tests.train._rollback import rollback_setup
from tests.train.test_rollback_txn import AddOneDieOn, _holds

CLOCKS = 3
# a hold of the lost task's transaction would outlast the test (its timeout: 180 s)
CONFIG = {**FAST, "daskangel.ops.prepare-timeout": "600s"}


def _step(victim: str, prefix: str, fifo: str) -> Callable[[Any, Any], int]:
    def step(ctx: Any, item: Any) -> int:
        y = ctx.array("y")
        for c in ctx.epochs(CLOCKS):
            if c == 1 and ctx.worker == victim and not Event(f"{prefix}-dying").is_set():
                Event(f"{prefix}-dying").set()
                y.plain.psf(AddOneDieOn(fifo=fifo, die_on=1))  # never returns
            y.increment(np.array([1, 1], "int64"))
            ctx.clock()
        return int(ctx.task_id)

    return step


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_task_lost_between_prepare_and_commit_leaves_no_block_held(tmp_path: Path) -> None:
    fifo = str(tmp_path / "staged")
    os.mkfifo(fifo)
    with rollback_setup(tmp_path, CONFIG, recovery="continue") as (_, c, ps, y):
        victim = y.blocks[1].server.address
        assert y.blocks[0].server.address != victim  # one block on each worker: two-phase
        res = angel.train(ps, _step(victim, tmp_path.name, fifo), [None, None],
                          sync=angel.BSP(), epochs=CLOCKS, progress=False)  # fmt: skip
        assert Event(f"{tmp_path.name}-dying", client=c).is_set()  # the kill happened
        assert res.restarts == 1 and res.rollbacks == 0, res
        assert res.results == [0, 1] and res.clocks == [CLOCKS, CLOCKS]
        assert all(h == [] for h in c.run(_holds).values())  # no hold left anywhere
        # block 0 was never lost: one +1 per task and clock, the psf's staged +1 dropped
        assert int(y.get()[0]) == 2 * CLOCKS
