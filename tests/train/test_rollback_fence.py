"""A rollback fences the writes of the run it abandons (real processes, os._exit).

After a rollback to snapshot S every array holds exactly S's content plus the
writes of the restarted run: a push made before the rollback is never applied
after it, on a surviving server or on one a lost block was rebuilt on.  The race
(the LDA worker-kill test's rare ``sum_w n_wk != n_k``: a survivor's push to the
dead server, retried, landed on the rebuilt block after the restore) is driven
here deterministically: the survivor's push can only go through once the lost
block is rebuilt, i.e. after the restore, because its block is on the killed
worker and the push keeps retrying (``daskangel.agent.push-retries``) while the
driver gives up waiting for the task (``daskangel.train.stop-timeout``) and rolls
back.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dask
import numpy as np
import pytest
from distributed import Event

import daskangel as angel
from daskangel.errors import JobAbortedError, ServerLostError
from daskangel.train import seceded
from tests.scheduler.test_recovery import FAST
from tests.train._rollback import rollback_setup

CLOCKS = 3


def _retry_long() -> None:
    """On a worker: a push to a lost server keeps retrying (up to ~200 s)."""
    dask.config.set({"daskangel.agent.push-retries": 100})


def _wait_lost(y: Any) -> None:
    """Return once a read of ``y`` fails because a server holding it was declared lost
    (each read blocks until the scheduler has decided; none returns wrong data)."""
    while True:
        try:
            y.get()
        except ServerLostError:
            return


def _step(victim: str, prefix: str) -> Callable[[Any, Any], int]:
    def step(ctx: Any, item: Any) -> int:
        y = ctx.array("y")
        first = not Event(f"{prefix}-dying").is_set()  # the run before the rollback
        for c in ctx.epochs(CLOCKS):
            if c == 1 and first:
                if ctx.worker == victim:
                    Event(f"{prefix}-dying").set()
                    os._exit(1)
                with seceded():
                    assert Event(f"{prefix}-dying").wait(60)
                _wait_lost(y.plain)
                # a push of the abandoned run to the lost block: it retries until the
                # block is rebuilt by the rollback's restore, and must not land then
                y.increment(np.array([0, 100], "int64"))
                try:
                    ctx.flush()
                finally:
                    Event(f"{prefix}-stale-done").set()
                raise JobAbortedError("the abandoned run ends here")
            if c == 1 and ctx.task_id == 0:  # the restarted run: once the stale push is done
                with seceded():
                    assert Event(f"{prefix}-stale-done").wait(60)
            y.increment(np.array([1, 1], "int64"))
            ctx.clock()
        return int(ctx.task_id)

    return step


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_push_of_the_abandoned_run_never_lands_after_the_restore(tmp_path: Path) -> None:
    with rollback_setup(tmp_path, {**FAST, "daskangel.train.stop-timeout": "1s"}) as (
        cluster,
        c,
        ps,
        y,
    ):
        victim = y.blocks[1].server.address
        assert y.blocks[0].server.address != victim  # one block on each worker
        c.run(_retry_long)
        res = angel.train(ps, _step(victim, tmp_path.name), [None, None], sync=angel.BSP(),
                          epochs=CLOCKS, progress=False)  # fmt: skip
        assert res.rollbacks == 1, res
        # each clock adds 1 per task to both entries; the abandoned push (+100) is fenced
        np.testing.assert_array_equal(y.get(), [2 * CLOCKS, 2 * CLOCKS])
        snapshots = cluster.scheduler.plugins["daskangel"].snapshots  # type: ignore[union-attr]
        assert ps.id in snapshots.fences  # the job's run, for servers that join later
    assert ps.id not in snapshots.fences  # the closed context's fences are dropped
