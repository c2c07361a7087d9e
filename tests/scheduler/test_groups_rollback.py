"""Group calls across a rollback, on a real (in-process) scheduler: the run a
rollback abandons can neither hold up nor take part in the restarted run's rounds.

Before the fix: a member waiting at a barrier (its partner's worker lost) was not
woken by the rollback request, its arrival stayed in the round and released the
restarted run's barrier of the same ``seq`` as soon as the *other* new member came
(the new rank 0 not there yet); the abandoned leader's command stayed posted for
the restarted run's member; group calls carried no run, so a task of the abandoned
run still alive was counted in and could post commands.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from distributed.utils_test import gen_cluster

from daskangel.scheduler._job import next_run
from tests.scheduler.test_clocks import _setup, _until


def _call(s: Any, handler: str, **kw: Any) -> asyncio.Future[Any]:
    return asyncio.ensure_future(s.handlers[handler](job="j", group=0, **kw))


@pytest.mark.timeout(60)
@gen_cluster(client=True, nthreads=[])
async def test_a_rollback_wakes_group_waiters_and_the_abandoned_run_is_not_counted(c, s):
    plugin = await _setup(c, s)
    await c.scheduler.daskangel_job_register(job="j", n_tasks=2, groups=[0, 0], staleness=0)
    old = (await c.scheduler.daskangel_task_start(job="j", task=0, worker="w"))["epoch"]
    # the abandoned run: its leader posted round 0's commands; rank 0 waits at barrier 0
    await c.scheduler.daskangel_group_send(
        job="j", group=0, seq=0, commands=["old-0", "old-1"], epoch=old
    )
    waiting = _call(s, "daskangel_group_barrier", seq=0, rank=0, epoch=old)
    await _until(lambda: ("j", 0, "barrier", 0) in plugin.groups.rounds)
    plugin.clocks.request_rollback("j", "worker left")
    # woken at once (before: it waited until the driver gave up on it)
    assert "aborted" in await asyncio.wait_for(waiting, 10)
    new = next_run()
    plugin.clocks.rewind("j", 0, new)
    # the restarted run: rank 1 reaches barrier 0 first, and must wait for rank 0
    b1 = _call(s, "daskangel_group_barrier", seq=0, rank=1, epoch=new)
    await _until(lambda: ("j", 0, "barrier", 0) in plugin.groups.rounds)
    # a task of the abandoned run still alive is refused, and not counted in
    stale = await c.scheduler.daskangel_group_barrier(job="j", group=0, seq=0, rank=0, epoch=old)
    assert f"run {old} was abandoned" in stale["aborted"]
    for _ in range(10):
        await asyncio.sleep(0)  # a yield to the loop, not a timed wait
    assert not b1.done()
    b0 = _call(s, "daskangel_group_barrier", seq=0, rank=0, epoch=new)
    assert await asyncio.wait_for(asyncio.gather(b0, b1), 10) == [{}, {}]
    # the restarted member gets the restarted leader's command, not the abandoned one's
    r1 = _call(s, "daskangel_group_recv", seq=0, rank=1, epoch=new)
    stale = await c.scheduler.daskangel_group_send(
        job="j", group=0, seq=0, commands=["old-0", "old-1"], epoch=old
    )
    assert "aborted" in stale
    await _until(lambda: ("j", 0, "mail", 0) in plugin.groups.rounds)
    assert not r1.done()
    await c.scheduler.daskangel_group_send(
        job="j", group=0, seq=0, commands=["new-0", "new-1"], epoch=new
    )
    assert (await asyncio.wait_for(r1, 10))["payload"] == "new-1"
    # acknowledgements: the abandoned run's do not count
    acks = _call(s, "daskangel_group_acks", seq=0, epoch=new)
    stale = await c.scheduler.daskangel_group_ack(job="j", group=0, seq=0, rank=1, epoch=old)
    assert "aborted" in stale
    await c.scheduler.daskangel_group_ack(job="j", group=0, seq=0, rank=0, payload=0, epoch=new)
    for _ in range(10):
        await asyncio.sleep(0)
    assert not acks.done()
    await c.scheduler.daskangel_group_ack(job="j", group=0, seq=0, rank=1, payload=1, epoch=new)
    assert (await asyncio.wait_for(acks, 10))["acks"] == [0, 1]
    # the job barrier too
    jb = asyncio.ensure_future(
        s.handlers["daskangel_job_barrier"](job="j", seq=5, task=1, epoch=new)
    )
    stale = await c.scheduler.daskangel_job_barrier(job="j", seq=5, task=0, epoch=old)
    assert "aborted" in stale
    for _ in range(10):
        await asyncio.sleep(0)
    assert not jb.done()
    await c.scheduler.daskangel_job_barrier(job="j", seq=5, task=0, epoch=new)
    assert await asyncio.wait_for(jb, 10) == {}


@pytest.mark.timeout(60)
@gen_cluster(client=True, nthreads=[])
async def test_task_start_hands_out_the_run_and_is_refused_during_a_rollback(c, s):
    """``task_start`` carries no run because it is what gives a task its run: while
    the job rolls back it is refused, after the rewind it hands out the new run."""
    plugin = await _setup(c, s)
    await c.scheduler.daskangel_job_register(job="j", n_tasks=2, groups=[0, 0], staleness=0)
    old = (await c.scheduler.daskangel_task_start(job="j", task=0, worker="w"))["epoch"]
    plugin.clocks.request_rollback("j", "worker left")
    r = await c.scheduler.daskangel_task_start(job="j", task=1, worker="w")
    assert "rolling back" in r["aborted"]
    new = next_run()
    plugin.clocks.rewind("j", 0, new)
    assert (await c.scheduler.daskangel_task_start(job="j", task=1, worker="w"))["epoch"] == new
    assert new > old
