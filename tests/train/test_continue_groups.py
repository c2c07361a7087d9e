"""``recovery="continue"``: a group member restarted after its worker died redoes its
clock's group rounds and joins its partner where it waits (real processes, a real kill).

Rank 1's worker dies at clock 1 while rank 0 waits for it at a barrier: at the
clock's first barrier, or at its last (rank 1 had passed the first barrier, the job
barrier and both rounds of leader commands of the clock).  The driver resubmits
rank 1, which resumes at clock 1.  Before the fix its barrier and mailbox counters
restarted at 0: it waited at round 0, which rank 0 had passed long before, while
rank 0 waited for it at a later round, until ``daskangel.clock.wait-timeout`` (20 s
here) failed the job.  Now rounds are numbered per clock and the scheduler lets a
restarted member through the rounds its partners already passed (handing out the
same commands again), so it meets rank 0 where rank 0 waits.
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
from daskangel.scheduler._clock_rule import SEQ_BITS
from tests.scheduler.test_recovery import FAST
from tests.train._rollback import rollback_setup

CLOCKS = 3
CONFIG = {**FAST, "daskangel.clock.wait-timeout": "20s"}


def _arrived(job: str, seq: int, dask_scheduler: Any = None) -> list[int]:
    """On the scheduler: the ranks waiting at barrier ``seq`` of group 0 of ``job``."""
    r = dask_scheduler.plugins["daskangel"].groups.rounds.get((job, 0, "barrier", seq))
    return sorted(r.arrived) if r is not None else []


def _die_once_rank0_waits(ctx: Any, k: int, prefix: str) -> None:
    """Kill this worker once rank 0 waits at barrier ``k`` of this clock."""
    seq = (ctx.iteration << SEQ_BITS) | k
    client = get_client()
    while client.run_on_scheduler(_arrived, ctx.job, seq) != [0]:
        pass
    Event(f"{prefix}-dying").set()
    os._exit(1)


def _step(prefix: str, at: int) -> Callable[[Any, Any], list[int]]:
    def step(ctx: Any, item: Any) -> list[int]:
        y = ctx.array("y")
        slices: list[int] = []
        for c in ctx.epochs(CLOCKS):
            y.increment(np.array([1, 1], "int64"))
            ctx.flush()
            die = c == 1 and ctx.rank_in_group == 1 and not Event(f"{prefix}-dying").is_set()
            if die and at == 0:
                _die_once_rank0_waits(ctx, 0, prefix)
            ctx.barrier()  # barrier 0 of the clock
            ctx.job_barrier(c)
            slices += list(ctx.round_robin())  # two rounds of leader commands
            if die and at == 1:
                _die_once_rank0_waits(ctx, 1, prefix)
            ctx.barrier()  # barrier 1 of the clock
            ctx.clock()
        return slices

    return step


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.parametrize("at", [0, 1], ids=["first-barrier", "last-barrier"])
def test_a_restarted_member_redoes_its_clocks_rounds_and_meets_its_partner(
    tmp_path: Path, at: int
) -> None:
    with rollback_setup(tmp_path, CONFIG, recovery="continue") as (_, c, ps, _y):
        res = angel.train(ps, _step(tmp_path.name, at), [None], groups=1, group_size=2,
                          sync=angel.BSP(), epochs=CLOCKS, progress=False)  # fmt: skip
        assert Event(f"{tmp_path.name}-dying", client=c).is_set()  # the kill happened
        assert res.restarts == 1, res
        assert res.clocks == [CLOCKS, CLOCKS]
        # rank k works on slice (k + r) % 2 in round r; the restarted rank 1 ran
        # clocks 1 and 2 again (its clock-0 run died with its worker's results)
        assert res.results == [[0, 1] * CLOCKS, [1, 0] * (CLOCKS - 1)]
        plugin_state = c.run_on_scheduler(_group_state, res.job)
        assert plugin_state == (0, 0, 0)  # a finished job leaves no round behind


def _group_state(job: str, dask_scheduler: Any = None) -> tuple[int, int, int]:
    """On the scheduler: rounds, passed marks and kept mailbox rounds of ``job``."""
    g = dask_scheduler.plugins["daskangel"].groups
    return (
        sum(k[0] == job for k in g.rounds),
        sum(k[0] == job for k in g.passed),
        sum(k[0] == job for k in g.done),
    )
