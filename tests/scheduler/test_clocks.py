"""The clock, group and status services on a real (in-process) scheduler."""

from __future__ import annotations

import asyncio

import dask
import pytest
from distributed.utils_test import gen_cluster

from daskangel.errors import SyncError
from daskangel.scheduler import DaskAngelSchedulerPlugin
from daskangel.scheduler._clock_rule import SEQ_BITS


async def _setup(c, s):
    await c.register_plugin(DaskAngelSchedulerPlugin())
    return s.plugins["daskangel"]


async def _until(cond):
    """Yield to the event loop until ``cond()`` holds (no timed sleeps).

    Waiting calls are started on the scheduler's own handlers, in this loop, so
    they register within a few loop iterations.
    """
    for _ in range(1_000):
        if cond():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition never held")


@gen_cluster(client=True, nthreads=[])
async def test_register_tick_and_resume(c, s):
    plugin = await _setup(c, s)
    r = await c.scheduler.daskangel_job_register(job="j", n_tasks=3, groups=[0, 1, 2], staleness=1)
    assert list(r["clocks"]) == [0, 0, 0]
    t = await c.scheduler.daskangel_clock_tick(job="j", task=0, clock=0)
    assert t == {"clock": 1, "min": 0, "ready": True}
    t = await c.scheduler.daskangel_clock_tick(job="j", task=0, clock=1)
    assert t["clock"] == 2 and not t["ready"]  # 2 ahead of the slowest under SSP(1)
    again = await c.scheduler.daskangel_clock_tick(job="j", task=0, clock=1)
    assert again["clock"] == 2  # a retried tick does not advance twice
    # a resubmitted task gets the clock the plugin holds
    r = await c.scheduler.daskangel_job_register(job="j", n_tasks=3, groups=[0, 1, 2], staleness=1)
    assert list(r["clocks"]) == [2, 0, 0]
    start = await c.scheduler.daskangel_task_start(job="j", task=0, worker="w")
    assert start["clock"] == 2
    table = await c.scheduler.daskangel_clock_table(job="j")
    assert list(table["clocks"]) == [2, 0, 0] and table["min"] == 0
    assert plugin.clocks.jobs["j"].info[0]["worker"] == "w"
    with pytest.raises(SyncError, match="is registered with 3 tasks, not 4"):
        await c.scheduler.daskangel_job_register(job="j", n_tasks=4, groups=[0] * 4, staleness=1)


@gen_cluster(client=True, nthreads=[])
async def test_wait_releases_once_the_slowest_catches_up(c, s):
    plugin = await _setup(c, s)
    await c.scheduler.daskangel_job_register(job="j", n_tasks=2, groups=[0, 1], staleness=1)
    for clock in (0, 1):
        await c.scheduler.daskangel_clock_tick(job="j", task=0, clock=clock)
    waiter = asyncio.ensure_future(s.handlers["daskangel_clock_wait"](job="j", task=0))
    job = plugin.clocks.jobs["j"]
    await _until(lambda: job.floor_events)
    assert not waiter.done()
    await c.scheduler.daskangel_clock_tick(job="j", task=1, clock=0)
    r = await asyncio.wait_for(waiter, 10)
    assert r["min"] == 1 and r["waited"] >= 0
    assert job.table.max_lead == 1
    assert job.info[0]["waits"] == 1


@gen_cluster(client=True, nthreads=[])
async def test_read_floor_wait_and_task_done(c, s):
    plugin = await _setup(c, s)
    await c.scheduler.daskangel_job_register(job="j", n_tasks=2, groups=[0, 1], staleness=None)
    waiter = asyncio.ensure_future(s.handlers["daskangel_clock_wait"](job="j", task=0, floor=3))
    await _until(lambda: plugin.clocks.jobs["j"].floor_events)
    assert not waiter.done()
    await c.scheduler.daskangel_task_done(job="j", task=1)  # done tasks hold nobody back
    for clock in range(3):
        await c.scheduler.daskangel_clock_tick(job="j", task=0, clock=clock)
    assert (await asyncio.wait_for(waiter, 10))["min"] == 3


@gen_cluster(client=True, nthreads=[])
async def test_group_members_move_in_lockstep_even_under_asp(c, s):
    plugin = await _setup(c, s)
    await c.scheduler.daskangel_job_register(job="j", n_tasks=2, groups=[0, 0], staleness=None)
    r = await c.scheduler.daskangel_clock_tick(job="j", task=0, clock=0)
    assert not r["ready"]
    waiter = asyncio.ensure_future(s.handlers["daskangel_clock_wait"](job="j", task=0))
    await _until(lambda: plugin.clocks.jobs["j"].group_events)
    r = await c.scheduler.daskangel_clock_tick(job="j", task=1, clock=0)
    assert r["ready"]
    await asyncio.wait_for(waiter, 10)


@gen_cluster(client=True, nthreads=[])
async def test_failure_wakes_every_waiter_with_abort(c, s):
    plugin = await _setup(c, s)
    await c.scheduler.daskangel_job_register(job="j", n_tasks=3, groups=[0, 0, 1], staleness=0)
    await c.scheduler.daskangel_clock_tick(job="j", task=0, clock=0)
    clock_waiter = asyncio.ensure_future(s.handlers["daskangel_clock_wait"](job="j", task=0))
    recv = asyncio.ensure_future(
        s.handlers["daskangel_group_recv"](job="j", group=0, seq=0, rank=1)
    )
    await _until(lambda: plugin.clocks.jobs["j"].group_events and plugin.groups.rounds)
    first = await c.scheduler.daskangel_job_fail(
        job="j", task=2, error="ValueError: x", traceback="tb"
    )
    assert first is True
    assert not await c.scheduler.daskangel_job_fail(job="j", task=1, error="later", traceback="")
    for fut in (clock_waiter, recv):
        r = await asyncio.wait_for(fut, 10)
        assert "task 2 failed: ValueError: x" in r["aborted"]
    r = await c.scheduler.daskangel_clock_tick(job="j", task=1, clock=0)
    assert "aborted" in r
    table = await c.scheduler.daskangel_clock_table(job="j")
    assert table["status"] == "failed" and table["error"]["traceback"] == "tb"


async def _stop(plugin, how, job):
    if how == "fail":
        plugin.clocks.fail(job, 1, "ValueError: x")
    elif how == "abort":
        plugin.clocks.abort(job, "enough")
    else:
        plugin.clocks.request_rollback(job, "a worker left")


@pytest.mark.parametrize("how", ["fail", "abort", "rollback"])
@gen_cluster(client=True, nthreads=[])
async def test_a_stop_between_the_waits_checks_and_its_event_still_wakes_it(c, s, how):
    """The stop may land at any step of a starting wait: after the handler's checks,
    before the waiting task (``asyncio.wait_for`` runs it as a task of its own) made
    its event.  Such a waiter waited for ever (``wait-timeout``): the flake of
    ``test_first_error_names_the_task_with_its_traceback_and_stops_the_rest``, whose
    driver cancelled the task at ``stop-timeout``."""
    plugin = await _setup(c, s)
    for steps in range(6):  # stop after 0, 1, ... event loop steps of the waiter
        for floor in (None, 3):
            job = f"j{steps}-{floor}"
            await c.scheduler.daskangel_job_register(job=job, n_tasks=2, groups=[0, 1], staleness=0)
            await c.scheduler.daskangel_clock_tick(job=job, task=0, clock=0)
            waiter = asyncio.ensure_future(
                s.handlers["daskangel_clock_wait"](job=job, task=0, floor=floor)
            )
            for _ in range(steps):
                await asyncio.sleep(0)
            await _stop(plugin, how, job)
            await _until(waiter.done)
            assert "aborted" in waiter.result(), (steps, floor)
            assert not plugin.clocks.jobs[job].floor_events  # nothing left waiting


@gen_cluster(client=True, nthreads=[])
async def test_mailboxes_and_barrier(c, s):
    plugin = await _setup(c, s)
    await c.scheduler.daskangel_job_register(job="j", n_tasks=3, groups=[0, 0, 0], staleness=0)
    sched = c.scheduler
    recvs = [
        asyncio.ensure_future(s.handlers["daskangel_group_recv"](job="j", group=0, seq=0, rank=r))
        for r in range(3)
    ]
    await _until(lambda: plugin.groups.rounds)
    assert not any(f.done() for f in recvs)
    await sched.daskangel_group_send(job="j", group=0, seq=0, commands=[[0, 1], [1, 2], [2, 0]])
    got = [(await asyncio.wait_for(f, 10))["payload"] for f in recvs]
    assert [list(g) for g in got] == [[0, 1], [1, 2], [2, 0]]
    acks = asyncio.ensure_future(s.handlers["daskangel_group_acks"](job="j", group=0, seq=0))
    for r in range(3):
        await sched.daskangel_group_ack(job="j", group=0, seq=0, rank=r, payload=r * 10)
    assert list((await asyncio.wait_for(acks, 10))["acks"]) == [0, 10, 20]
    barrier = [
        asyncio.ensure_future(
            s.handlers["daskangel_group_barrier"](job="j", group=0, seq=0, rank=r)
        )
        for r in range(2)
    ]
    await _until(lambda: plugin.groups.rounds)
    assert not any(f.done() for f in barrier)
    await sched.daskangel_group_barrier(job="j", group=0, seq=0, rank=2)
    await asyncio.wait_for(asyncio.gather(*barrier), 10)
    with pytest.raises(SyncError, match="has 3 members, got 2"):
        await sched.daskangel_group_send(job="j", group=0, seq=1, commands=[1, 2])
    with pytest.raises(SyncError, match="has no group 7"):
        await sched.daskangel_group_barrier(job="j", group=7, seq=0, rank=0)


@gen_cluster(client=True, nthreads=[])
async def test_a_restarted_member_passes_the_rounds_its_partners_passed(c, s):
    """``recovery="continue"``: a member restarted at its clock redoes that clock's
    rounds; those every member passed answer at once (the same command again, acks
    and a resent command taken as done), the next one waits for real; a rollback
    (rewound clocks) forgets them."""
    plugin = await _setup(c, s)
    sched = c.scheduler
    await sched.daskangel_job_register(job="j", n_tasks=2, groups=[0, 0], staleness=0)
    seq0, seq1 = 7 << SEQ_BITS, (7 << SEQ_BITS) | 1  # rounds 0 and 1 of clock 7
    both = [
        asyncio.ensure_future(
            s.handlers["daskangel_group_barrier"](job="j", group=0, seq=seq0, rank=r)
        )
        for r in range(2)
    ]
    await asyncio.wait_for(asyncio.gather(*both), 10)
    await sched.daskangel_group_send(job="j", group=0, seq=seq0, commands=["a", "b"])
    for r in range(2):
        await sched.daskangel_group_recv(job="j", group=0, seq=seq0, rank=r)
        await sched.daskangel_group_ack(job="j", group=0, seq=seq0, rank=r, payload=r)
    assert list((await sched.daskangel_group_acks(job="j", group=0, seq=seq0))["acks"]) == [0, 1]
    jb = asyncio.ensure_future(s.handlers["daskangel_job_barrier"](job="j", seq=7, task=0))
    await _until(lambda: ("j", -1, "job", 7) in plugin.groups.rounds)
    await sched.daskangel_job_barrier(job="j", seq=7, task=1)
    await asyncio.wait_for(jb, 10)
    # rank 1 restarted: each of the rounds above answers at once, as it did the first time
    assert await sched.daskangel_group_barrier(job="j", group=0, seq=seq0, rank=1) == {}
    assert await sched.daskangel_job_barrier(job="j", seq=7, task=1) == {}
    assert (await sched.daskangel_group_recv(job="j", group=0, seq=seq0, rank=1))["payload"] == "b"
    assert await sched.daskangel_group_ack(job="j", group=0, seq=seq0, rank=1, payload=9) == {}
    # a restarted leader's resent command changes nothing; its acks are the round's
    await sched.daskangel_group_send(job="j", group=0, seq=seq0, commands=["x", "y"])
    assert (await sched.daskangel_group_recv(job="j", group=0, seq=seq0, rank=0))["payload"] == "a"
    assert list((await sched.daskangel_group_acks(job="j", group=0, seq=seq0))["acks"]) == [0, 1]
    # the next round is a real one: the member waits for its partner
    nxt = asyncio.ensure_future(
        s.handlers["daskangel_group_barrier"](job="j", group=0, seq=seq1, rank=1)
    )
    await _until(lambda: ("j", 0, "barrier", seq1) in plugin.groups.rounds)
    assert not nxt.done()
    await sched.daskangel_group_barrier(job="j", group=0, seq=seq1, rank=0)
    assert await asyncio.wait_for(nxt, 10) == {}
    # a rollback's rewound clocks start the rounds afresh
    plugin.clocks.request_rollback("j", "a worker left")
    plugin.clocks.rewind("j", 0, 10**6)
    again = asyncio.ensure_future(
        s.handlers["daskangel_group_barrier"](job="j", group=0, seq=seq0, rank=1, epoch=10**6)
    )
    await _until(lambda: ("j", 0, "barrier", seq0) in plugin.groups.rounds)
    assert not again.done() and not plugin.groups.done
    await sched.daskangel_group_barrier(job="j", group=0, seq=seq0, rank=0, epoch=10**6)
    assert await asyncio.wait_for(again, 10) == {}


@gen_cluster(client=True, nthreads=[])
async def test_wait_timeout_names_the_slowest(c, s):
    await _setup(c, s)
    await c.scheduler.daskangel_job_register(job="j", n_tasks=2, groups=[0, 1], staleness=0)
    await c.scheduler.daskangel_clock_tick(job="j", task=0, clock=0)
    with (
        dask.config.set({"daskangel.clock.wait-timeout": "50ms"}),
        pytest.raises(SyncError, match=r"slowest \(clock, task\): \[\(0, 1\)"),
    ):
        await c.scheduler.daskangel_clock_wait(job="j", task=0)


@gen_cluster(client=True, nthreads=[])
async def test_unknown_job_and_status_rows(c, s):
    await _setup(c, s)
    with pytest.raises(SyncError, match="no training job 'nope'"):
        await c.scheduler.daskangel_clock_tick(job="nope", task=0, clock=0)
    await c.scheduler.daskangel_job_register(
        job="j", n_tasks=2, groups=[0, 1], staleness=2, ctx="c1"
    )
    await c.scheduler.daskangel_clock_tick(
        job="j", task=1, clock=0, stats={"calls": 4, "seconds": 0.004, "bytes_pulled": 80}
    )
    st = await c.scheduler.daskangel_status(ctx="c1")
    rows = {r["id"]: r for r in st["tasks"]}
    assert rows["j/1"]["clock"] == 1 and rows["j/1"]["ahead"] == 1
    assert rows["j/1"]["bytes_out"] == 80 and rows["j/1"]["latency_ms"] == pytest.approx(1.0)
    assert not (await c.scheduler.daskangel_status(ctx="other"))["tasks"]


@gen_cluster(client=True, nthreads=[])
async def test_calls_of_a_run_the_job_rolled_back_from_change_nothing(c, s):
    """After a rollback (``rewind`` into a new run) a task of the abandoned run that
    is still alive is told to stop at its tick or wait, and its end or failure is
    ignored: only the restarted run moves the clocks."""
    plugin = await _setup(c, s)
    await c.scheduler.daskangel_job_register(job="j", n_tasks=2, groups=[0, 1], staleness=0)
    old = (await c.scheduler.daskangel_task_start(job="j", task=0, worker="w"))["epoch"]
    await c.scheduler.daskangel_clock_tick(job="j", task=0, clock=0, epoch=old)
    job = plugin.clocks.jobs["j"]
    new = old + 100
    plugin.clocks.rewind("j", 0, new)
    start = await c.scheduler.daskangel_task_start(job="j", task=0, worker="w")
    assert start == {"clock": 0, "min": 0, "epoch": new}
    stale = await c.scheduler.daskangel_clock_tick(job="j", task=0, clock=0, epoch=old)
    assert "aborted" in stale and f"run {old} was abandoned" in stale["aborted"]
    assert "aborted" in await c.scheduler.daskangel_clock_wait(job="j", task=0, epoch=old)
    await c.scheduler.daskangel_task_done(job="j", task=1, epoch=old)
    assert not await c.scheduler.daskangel_job_fail(job="j", task=1, error="x", epoch=old)
    assert list(job.table.clocks) == [0, 0] and not job.table.done
    assert job.status == "running"
    t = await c.scheduler.daskangel_clock_tick(job="j", task=0, clock=0, epoch=new)
    assert t["clock"] == 1
