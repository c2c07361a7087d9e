"""A rollback stops a group member waiting at a barrier for a member that died
(real processes, a real kill), and the restarted run's barriers count only its own
members.

Rank 1's worker dies while rank 0 waits for it at barrier 1.  Before the fix the
rollback request did not wake rank 0: the driver gave up on it after
``daskangel.train.stop-timeout`` and cancelled its future, but its thread stayed in
the barrier and its arrival in the round: the restarted rank 1 passed barrier 1
alone (the restarted rank 0 not there yet), and the two then waited for each
other (rank 1 at its clock, rank 0 at a barrier nobody else would reach) until
``daskangel.clock.wait-timeout`` failed the job.  Now rank 0 ends as aborted at once
and the restarted run runs exactly its own rounds.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from distributed import Event, get_client

import daskangel as angel
from daskangel.errors import JobAbortedError
from daskangel.scheduler._clock_rule import SEQ_BITS
from tests.scheduler.test_recovery import FAST
from tests.train._rollback import rollback_setup

CLOCKS = 3
# the driver gives up on a stopped task that does not end after 5 s; a clock wait
# gives up after 20 s (the old code's deadlock failed the job, not the test timeout)
CONFIG = {**FAST, "daskangel.train.stop-timeout": "5s", "daskangel.clock.wait-timeout": "20s"}


def _arrived(job: str, seq: int, dask_scheduler: Any = None) -> list[int]:
    """On the scheduler: the ranks waiting at barrier ``seq`` of group 0 of ``job``."""
    rounds = dask_scheduler.plugins["daskangel"].groups.rounds
    r = rounds.get((job, 0, "barrier", seq))
    return sorted(r.arrived) if r is not None else []


def _step(prefix: str) -> Callable[[Any, Any], int]:
    def step(ctx: Any, item: Any) -> int:
        y = ctx.array("y")
        first = not Event(f"{prefix}-dying").is_set()  # the run before the rollback
        for c in ctx.epochs(CLOCKS):
            y.increment(np.array([1, 1], "int64"))
            ctx.flush()
            if first and c == 1 and ctx.rank_in_group == 1:
                # die once rank 0 waits at barrier 1 (polled on the scheduler)
                client = get_client()
                while _arrived_at(client, ctx.job) != [0]:
                    pass
                Event(f"{prefix}-dying").set()
                os._exit(1)
            try:
                ctx.barrier()
            except JobAbortedError:
                if first:
                    Event(f"{prefix}-woken").set()
                raise
            ctx.clock()
        return int(ctx.task_id)

    return step


def _arrived_at(client: Any, job: str) -> list[int]:
    """The ranks waiting at clock 1's barrier (rounds are numbered per clock)."""
    return list(client.run_on_scheduler(_arrived, job, 1 << SEQ_BITS))


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_a_rollback_ends_a_member_waiting_at_a_barrier_and_restarts_clean(
    tmp_path: Path,
) -> None:
    with rollback_setup(tmp_path, CONFIG) as (_, c, ps, y):
        res = angel.train(ps, _step(tmp_path.name), [None], groups=1, group_size=2,
                          sync=angel.BSP(), epochs=CLOCKS, progress=False)  # fmt: skip
        assert res.rollbacks == 1, res
        assert Event(f"{tmp_path.name}-woken", client=c).is_set()  # aborted, not cancelled
        np.testing.assert_array_equal(y.get(), [2 * CLOCKS, 2 * CLOCKS])
