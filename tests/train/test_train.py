"""train() / Trainer on a real 2-process LocalCluster: results, history, groups, errors."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator

import dask
import numpy as np
import pandas as pd
import pytest
from distributed import Event

import daskangel as angel
from daskangel._compat import workers_info
from daskangel.errors import JobAbortedError, TaskFailedError
from daskangel.train import seceded


def _sum_step(ctx, part):
    w = ctx.array("w_sum")
    for epoch in ctx.epochs():
        w.increment(np.asarray(part, dtype="float64"), cols=np.arange(4))
        ctx.report(seen=float(w.get().sum()), epoch=epoch)
        ctx.clock()
    return {
        "task": ctx.task_id,
        "group": ctx.group,
        "rank": ctx.rank_in_group,
        "worker": ctx.worker,
    }


def test_data_parallel_results_history_and_status(ps):
    w = ps.zeros("w_sum", shape=(4,), dtype="float64")
    data = [np.full(4, float(i + 1)) for i in range(4)]
    res = angel.train(ps, _sum_step, data, sync=angel.SSP(staleness=1), epochs=5)
    assert [r["task"] for r in res.results] == [0, 1, 2, 3]
    assert res.clocks == [5, 5, 5, 5]
    assert res.max_lead <= 1
    np.testing.assert_array_equal(w.get(), np.full(4, 5 * (1 + 2 + 3 + 4), dtype="float64"))
    h = res.history
    assert isinstance(h, pd.DataFrame)
    assert list(h.columns[:5]) == ["task", "group", "clock", "time", "waited"]
    assert len(h) == 20 and set(h["clock"]) == set(range(5))
    assert {"seen", "epoch"} <= set(h.columns)
    st = ps.status()
    tasks = st[st["kind"] == "task"].set_index("id")
    assert tasks.loc[f"{res.job}/2", "clock"] == 5
    assert (tasks["bytes_in"] > 0).all()  # increments counted per task
    servers = st[st["kind"] == "server"]
    assert len(servers) == len(ps.servers) and (servers["calls"] > 0).any()


def _placement_step(ctx, part):
    return {"rank": ctx.rank_in_group, "group": ctx.group, "part": part}


@pytest.mark.parametrize(
    ("placement", "want"),
    [
        ("replicated", lambda x, r: x),
        ("horizontal", lambda x, r: x[3 * r : 3 * r + 3]),
        ("vertical", lambda x, r: x[:, 2 * r : 2 * r + 2]),
        (lambda item, rank, size: item * (rank + 1), lambda x, r: x * (r + 1)),
    ],
)
def test_group_placement(ps, placement, want):
    items = [np.arange(24).reshape(6, 4) + 100 * g for g in range(2)]
    res = angel.train(ps, _placement_step, items, group_size=2, placement=placement, progress=False)
    assert len(res.results) == 4
    for t, r in enumerate(res.results):
        assert (r["group"], r["rank"]) == (t // 2, t % 2)
        np.testing.assert_array_equal(r["part"], want(items[t // 2], t % 2))


class _Dataset:
    """The shape of the data layer's Dataset: partitions are pinned futures."""

    def __init__(self, partitions):
        self.partitions = partitions


def _where_step(ctx, part):
    return (ctx.worker, int(part.sum()))


def test_dataset_partitions_pin_tasks_to_their_workers(ps, client):
    workers = sorted(workers_info(client))
    parts = [client.scatter(np.full(3, i), workers=[workers[i % 2]], hash=False) for i in range(4)]
    res = angel.train(ps, _where_step, _Dataset(parts), progress=False)
    for i, (worker, total) in enumerate(res.results):
        assert worker == workers[i % 2] and total == 3 * i


def _failing_step(ctx, part):
    for epoch in ctx.epochs(10_000):  # the others would run "forever" unless stopped
        if ctx.task_id == 2 and epoch == 3:
            raise ValueError(f"bad partition in task {ctx.task_id}")
        ctx.clock()


def test_first_error_names_the_task_with_its_traceback_and_stops_the_rest(ps):
    trainer = angel.Trainer(ps, _failing_step, None, groups=4, sync=angel.SSP(1), progress=False)
    with pytest.raises(TaskFailedError) as info:
        trainer.result()
    msg = str(info.value)
    assert "task 2 (group 2, rank 0) failed: ValueError: bad partition in task 2" in msg
    assert "Remote traceback" in msg and "_failing_step" in msg
    assert isinstance(info.value.__cause__, ValueError)
    assert all(f.status == "finished" for f in trainer.futures)  # the others ended cleanly
    table = trainer.table()
    assert table["status"] == "failed"
    assert max(table["clocks"]) < 100


def _until_stopped(ctx, part):
    ready = Event(f"{ctx.job}-started")
    if ctx.task_id == 0:
        ready.set()
    while True:
        ctx.clock()


def test_driver_can_stop_a_job(ps):
    trainer = angel.Trainer(ps, _until_stopped, None, groups=3, progress=False).start()
    assert Event(f"{trainer.job}-started").wait(60)
    trainer.stop("enough")
    with pytest.raises(JobAbortedError, match="enough"):
        trainer.result()


def _resume_step(ctx, part):
    return [*ctx.epochs(6)], ctx.iteration


def test_resubmitted_task_resumes_from_the_plugins_clock(ps, client):
    """A job id already in the clock table resumes from the clocks held there."""
    sched = client.scheduler
    client.sync(
        sched.daskangel_job_register, job="resume", n_tasks=2, groups=[0, 1], staleness=None
    )
    for c in range(4):
        client.sync(sched.daskangel_clock_tick, job="resume", task=1, clock=c)
    res = angel.train(
        ps, _resume_step, None, groups=2, sync=angel.ASP(), name="resume", progress=False
    )
    assert res.results[0] == ([0, 1, 2, 3, 4, 5], 0)
    assert res.results[1] == ([4, 5], 4)


def test_bad_arguments_are_named(ps):
    with pytest.raises(
        ValueError, match=r"data: expected one item per task \(4\) or per group \(2\)"
    ):
        angel.train(ps, _placement_step, [1, 2, 3], groups=2, group_size=2, progress=False)
    with pytest.raises(ValueError, match="placement: expected one of"):
        angel.Trainer(ps, _placement_step, [1], placement="diagonal")
    with pytest.raises(TypeError, match="fn: expected a function"):
        angel.Trainer(ps, "not a function", [1])
    with pytest.raises(ValueError, match="sync: expected BSP"):
        angel.Trainer(ps, _placement_step, [1], sync="eventually")
    with pytest.raises(TypeError, match=r"data: expected a sequence of partitions .* ndarray"):
        angel.Trainer(ps, _placement_step, np.zeros((100, 3)))
    with pytest.raises(ValueError, match="groups: give groups= when data is None"):
        angel.Trainer(ps, _placement_step, None)
    with pytest.raises(ValueError, match=r"array_sync\['w'\]: expected BSP"):
        angel.Trainer(ps, _placement_step, [1], array_sync={"w": -3})


def _all_at_barrier(ctx, part):
    ctx.barrier()  # returns only once every member is waiting in it at the same time
    with seceded():  # user code may leave the pool itself too
        pass
    return ctx.rank_in_group


def test_waiting_tasks_leave_the_thread_pool(ps, client):
    """A group larger than all worker threads together still meets at a barrier."""
    n_threads = sum(w["nthreads"] for w in workers_info(client).values())
    size = n_threads + 2
    res = angel.train(ps, _all_at_barrier, None, groups=1, group_size=size, progress=False)
    assert res.results == list(range(size))


def _job_barrier_step(ctx, part):
    """Each task writes its own row, enters job barrier 0 without waiting, then waits:
    past the barrier every task's write is in (no task reads before all have written)."""
    w = ctx.array("w_jb")
    w.increment(np.ones((1, 2), "int64"), rows=[ctx.task_id])
    ctx.flush()
    pending = ctx.job_barrier(0, wait=False)
    pending.wait()
    seen = int(np.asarray(w.plain.get()).sum())
    ctx.job_barrier(1)  # the waiting form, across groups too
    return seen


def test_job_barrier_spans_every_group(ps):
    ps.zeros("w_jb", shape=(4, 2), dtype="int64")
    res = angel.train(ps, _job_barrier_step, [0, 1], groups=2, group_size=2, progress=False)
    assert res.results == [8, 8, 8, 8]


def _busy_step(ctx, part):
    """Real work every clock, then one increment of the task's own row.

    A clock's work is 40 ms of this thread's CPU (matrix products until
    ``time.thread_time`` has moved that much), longer than the throttle's 120 ms
    cycle is stopped for only in part: every clock of the throttled task then takes
    ~4x the others' wall time, whatever the machine's load.  A fixed few-ms of work
    (as before) could fall inside a 30 ms running window and not be slowed at all,
    and under load the task was sometimes never flagged."""
    w = ctx.array("w_slow")
    a = np.random.default_rng(ctx.task_id).normal(size=(128, 128))
    for _ in ctx.epochs():
        t0 = time.thread_time()
        while time.thread_time() - t0 < 0.04:
            a = np.tanh(a @ a.T / 128.0)
        w.increment(np.ones((1, 4), "int64"), rows=[ctx.task_id])
        ctx.clock()
    return ctx.worker


@contextlib.contextmanager
def _throttled(pid: int) -> Iterator[None]:
    """Process ``pid`` runs a quarter of the time (SIGSTOP 90 ms, SIGCONT 30 ms), as a
    machine whose CPU quota is spent: a worker really slower than the others."""
    done = threading.Event()

    def loop() -> None:
        while not done.is_set():
            os.kill(pid, signal.SIGSTOP)
            done.wait(0.09)
            os.kill(pid, signal.SIGCONT)
            done.wait(0.03)

    t = threading.Thread(target=loop, daemon=True)
    t.start()
    try:
        yield
    finally:
        done.set()
        t.join()
        os.kill(pid, signal.SIGCONT)


@pytest.mark.timeout(120)
def test_reschedule_slow_moves_a_throttled_workers_task(client):
    """With daskangel.train.reschedule-slow, a task on a throttled worker is flagged
    slow and restarted on the other worker at a clock boundary: the job completes
    with every clock of every task applied exactly once."""
    slow, fast = sorted(workers_info(client))  # task 0 runs on the first
    pid = client.run(os.getpid, workers=[slow])[slow]
    fast_keys = {"daskangel.train.reschedule-slow": True, "daskangel.clock.slow-window": 3}
    with (
        dask.config.set(fast_keys),
        angel.PSContext(client, workers=[fast]) as ps,
        _throttled(pid),
    ):
        w = ps.zeros("w_slow", (2, 4), dtype="int64")
        tr = angel.Trainer(ps, _busy_step, groups=2, sync=angel.BSP(), epochs=12, progress=False)
        res = tr.result()
        np.testing.assert_array_equal(w.get(), np.full((2, 4), 12))
        moved = tr.table()["tasks"][0]
    assert res.moves == 1 and moved["moves"] == 1, (res, moved)
    assert res.results == [fast, fast]  # task 0 finished on the fast worker
    assert sorted(res.history.query("task == 0").clock) == list(range(12))


@pytest.mark.timeout(10)
def test_train_shows_and_checks_the_trainer_options() -> None:
    """train(ps, fn, data, **options) passes its options to Trainer: introspection lists
    them, and an unknown one is refused before anything runs."""
    import inspect

    params = inspect.signature(angel.train).parameters
    assert list(params)[:3] == ["ps", "fn", "data"]
    assert {"epochs", "sync", "resume"} <= set(params)
    assert params["epochs"].kind is inspect.Parameter.KEYWORD_ONLY
    with pytest.raises(TypeError, match="bogus"):
        angel.train(None, print, None, bogus=1)


def _now_step(ctx, part):
    a = ctx.array("w_now")
    a.increment_now(np.arange(6.0)).result()
    seen = np.asarray(a.plain.get())  # no clock yet: applied once its future is done
    ctx.clock()
    return seen, np.asarray(a.get(cache=False))


@pytest.mark.timeout(120)
def test_increment_now_is_applied_at_once_and_counted_as_the_tasks_push(ps):
    """``TaskArray.increment_now`` skips the update buffer: the servers hold the change
    when its future is done, before the task's clock, and the task counters count it;
    ``get(cache=False)`` reads past the pull cache, counted as the task's pull."""
    w = ps.zeros("w_now", shape=(6,), dtype="float64")
    res = angel.train(ps, _now_step, [0, 1], progress=False)
    own = np.arange(6.0)
    for r, after in res.results:  # its own change, and the other's where that came first
        # (each server applies its blocks' part of a push on its own)
        assert np.all((r == own) | (r == 2 * own)), r
        np.testing.assert_array_equal(after, 2 * own)  # BSP: both pushed before the clock
    np.testing.assert_array_equal(w.get(), 2 * np.arange(6.0))
    st = ps.status(max_age=0)
    tasks = st[st["kind"] == "task"]
    assert list(tasks["bytes_in"]) == [6 * 8, 6 * 8]
    assert list(tasks["bytes_out"]) == [6 * 8, 6 * 8]
