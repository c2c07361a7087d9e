"""BSP / SSP / ASP end to end: the staleness bound, BSP = sequential, ASP never waits.

Per-task delays are real work of random size (no sleeps), and where a test needs
tasks to drift apart for sure, a distributed ``Event`` makes them.
"""

from __future__ import annotations

import numpy as np
import pytest
from distributed import Event

import daskangel as angel
from daskangel.comm import configure
from daskangel.train import seceded

N_TASKS = 8
N_CLOCKS = 100


def _work(units: int, m: np.ndarray) -> float:
    """A random amount of real work (small matrix products)."""
    x = m
    for _ in range(units):
        x = np.tanh(x @ m)
    return float(x[0, 0])


def _ssp_task(ctx, seed):
    """Each clock: read the whole log, check it, mark (task, clock) in the log, work."""
    s = ctx.staleness()
    log = ctx.array("ssp_log")  # log[t, c] == 1 once task t pushed its clock-c update
    rng = np.random.default_rng([seed, ctx.task_id])
    m = np.random.default_rng(0).standard_normal((32, 32)) / 8
    missing = 0  # reads missing an update of a clock <= c - s - 1
    too_new = 0  # reads holding an update of a clock > c + s
    leads = []
    for c in ctx.epochs():
        if c == 10 and ctx.task_id == 0:
            # hold task 0 until every other task is s clocks ahead: the bound is exercised
            with seceded():
                for t in range(1, ctx.n_tasks):
                    assert Event(f"{ctx.job}-ahead-{t}").wait(120)
        if c == 10 + s and ctx.task_id != 0:
            Event(f"{ctx.job}-ahead-{ctx.task_id}").set()
        seen = log.get()
        if c - s > 0 and not (seen[:, : c - s] == 1).all():
            missing += 1
        marked = np.flatnonzero(seen.any(axis=0))
        if marked.size and marked.max() > c + s:
            too_new += 1
        leads.append(c - ctx.slowest_clock)
        log.increment(np.float32(1), rows=ctx.task_id, cols=c)
        _work(int(rng.integers(0, 30)), m)  # the update waits buffered: budgeted sends
        ctx.clock()
    return {"missing": missing, "too_new": too_new, "max_lead": max(leads)}


@pytest.mark.timeout(240)
@pytest.mark.filterwarnings("ignore::daskangel.errors.CommBudgetWarning")
@pytest.mark.parametrize(
    ("staleness", "comm"), [(1, None), (3, None), (1, "magnitude"), (3, "random")]
)
def test_ssp_bound_holds_on_reads_and_clock_spread(ps, client, staleness, comm):
    """Also with managed communication on (daskangel.comm.*: budgeted pushes between
    clock boundaries, magnitude-ranked or random; with random also eager refresh of
    the cached log rows within a small server budget): the bound holds."""
    ps.zeros("ssp_log", shape=(N_TASKS, N_CLOCKS), dtype="float32")
    refresh = comm == "random"
    if comm is not None:
        configure(client, budget=2048, policy=comm, interval="5ms", min_send_bytes=16)
    if refresh:
        configure(client, refresh=True, refresh_interval="5ms", server_budget=4096)
    try:
        res = angel.train(
            ps,
            _ssp_task,
            [staleness] * N_TASKS,
            sync=angel.SSP(staleness=staleness),
            epochs=N_CLOCKS,
            progress=False,
        )
        refreshed = client.run(_refreshed) if refresh else {}
    finally:
        if comm is not None:
            configure(
                client,
                budget=None,
                policy="magnitude",
                interval="50ms",
                min_send_bytes="1KiB",
                refresh=False,
                refresh_interval="50ms",
                server_budget=None,
            )
    assert res.clocks == [N_CLOCKS] * N_TASKS
    for r in res.results:
        assert r["missing"] == 0, r
        assert r["too_new"] == 0, r
        assert r["max_lead"] <= staleness, r
    assert res.max_lead == staleness  # the scheduler's record: reached, never exceeded
    assert max(r["max_lead"] for r in res.results) == staleness
    np.testing.assert_array_equal(ps.get_array("ssp_log").get(), 1)
    if comm is not None:  # and budgeted pushes did go out between clock boundaries
        assert ps.status(max_age=0).query("kind == 'task'")["comm_sent"].max() > 0
    if refresh:  # and servers refreshed cached rows between them, within their budget
        assert sum(refreshed.values()) > 0, refreshed
        servers = ps.status(max_age=0).query("kind == 'server'")
        assert (servers["refresh_budget"] == 4096).all()
        assert servers["refresh_sent"].sum() > 0


def _refreshed(dask_worker) -> int:
    """Units this worker's eager refresh wrote into its cache."""
    from daskangel.psarray import agent_of

    b = getattr(dask_worker, "_daskangel_binding", None)
    return 0 if b is None else int(agent_of(b).refresher.units)


def _bsp_task(ctx, part):
    """Read row c (written during clock c - 1), push into row c + 1."""
    a = ctx.array("bsp_a")
    n = ctx.n_tasks
    t = ctx.task_id
    for c in ctx.epochs():
        row = a.get(rows=c)
        v = int((row.sum() * (t + 1) + c) % 1009)
        a.increment(np.int64(v), rows=c + 1, cols=(t + c) % n)
        a.increment(np.int64(1), rows=c + 1, cols=t)
        ctx.clock()


def _bsp_sequential(n_tasks: int, n_clocks: int) -> np.ndarray:
    a = np.zeros((n_clocks + 1, n_tasks), np.int64)
    a[0] = np.arange(1, n_tasks + 1)
    for c in range(n_clocks):
        deltas = np.zeros(n_tasks, np.int64)
        for t in range(n_tasks):
            deltas[(t + c) % n_tasks] += (a[c].sum() * (t + 1) + c) % 1009
            deltas[t] += 1
        a[c + 1] += deltas
    return a


def test_bsp_equals_sequential_execution(ps):
    n_tasks, n_clocks = 6, 30
    a = ps.zeros("bsp_a", shape=(n_clocks + 1, n_tasks), dtype="int64", block_shape=(4, 3))
    a.set(np.arange(1, n_tasks + 1, dtype=np.int64), rows=0)
    res = angel.train(ps, _bsp_task, None, groups=n_tasks, sync=angel.BSP(), epochs=n_clocks)
    assert res.max_lead == 0
    np.testing.assert_array_equal(a.get(), _bsp_sequential(n_tasks, n_clocks))


def _asp_task(ctx, part):
    w = ctx.array("asp_w")
    if ctx.task_id == 0:  # starts only after every other task has finished all its clocks
        with seceded():
            for t in range(1, ctx.n_tasks):
                assert Event(f"{ctx.job}-done-{t}").wait(120)
    for _ in ctx.epochs():
        w.get()
        w.increment(1.0, cols=ctx.task_id)
        ctx.clock()
    if ctx.task_id != 0:
        Event(f"{ctx.job}-done-{ctx.task_id}").set()


def test_asp_never_waits(ps):
    w = ps.zeros("asp_w", shape=(4,), dtype="float64")
    res = angel.train(ps, _asp_task, None, groups=4, sync=angel.ASP(), epochs=30, progress=False)
    assert res.waited == [0.0] * 4  # no task ever waited at a clock or a read
    assert res.max_lead >= 29  # tasks 1-3 ran all 30 clocks while task 0 was at clock 0
    np.testing.assert_array_equal(w.get(), [30.0] * 4)
    table = ps.client.sync(ps.client.scheduler.daskangel_clock_table, job=res.job)
    assert all(t["waits"] == 0 for t in table["tasks"])


def _array_override_task(ctx, part):
    """Job is ASP, but reads of "ov_a" are BSP: they see every earlier clock's updates."""
    a = ctx.array("ov_a")
    short = 0
    for c in ctx.epochs():
        if ctx.task_id == 0:
            _work(5, np.eye(16))
        if a.get().sum() < c * ctx.n_tasks:
            short += 1
        a.increment(1.0, cols=ctx.task_id)
        ctx.clock()
    return short


def test_per_array_protocol_override(ps):
    ps.zeros("ov_a", shape=(4,), dtype="float64")
    res = angel.train(
        ps,
        _array_override_task,
        None,
        groups=4,
        sync=angel.ASP(),
        array_sync={"ov_a": angel.BSP()},
        epochs=15,
        progress=False,
    )
    assert res.results == [0, 0, 0, 0]


def _own_writes_task(ctx, part):
    """Each clock: read the counter with and without ``own_writes``, then add 1 to it."""
    a = ctx.array("own_a")
    seen = []
    for c in ctx.epochs():
        mine = float(a.get(own_writes=True)[0, 0])
        rows = [v for _, v in a.get_iter(rows=[0], batch=1, own_writes=True)]
        seen.append((c, mine, float(rows[0][0, 0]), float(a.get()[0, 0])))
        a.increment(np.ones((1, 1)), rows=[0])
        ctx.clock()
    return seen


def test_ssp_reads_with_own_writes_hold_the_tasks_own_pushes(ps):
    """SSP(2), one task pushing every clock: the pull cache may serve the copy of clock
    c - 2 (without the task's own last two pushes); ``own_writes=True`` never does."""
    ps.zeros("own_a", shape=(1, 1), dtype="float64")
    res = angel.train(
        ps, _own_writes_task, None, groups=1, sync=angel.SSP(staleness=2), epochs=8, progress=False
    )
    for c, mine, piped, cached in res.results[0]:
        assert mine == piped == c  # every earlier push, through get and get_iter
        assert c - 2 <= cached <= c  # (within the bound either way)


def _straggler_task(ctx, spec):
    """``units`` of work per clock, 5x for the straggler: task 0, or task ``c % n`` at clock c."""
    units, rotating = spec
    w = ctx.array("straggler_w")
    m = np.random.default_rng(1).standard_normal((64, 64)) / 10
    for c in ctx.epochs():
        w.get()
        slow = (c % ctx.n_tasks if rotating else 0) == ctx.task_id
        _work(units * (5 if slow else 1), m)
        w.increment(1.0, cols=ctx.task_id)
        ctx.clock()
    return ctx.task_id


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("rotating", [False, True], ids=["same-straggler", "rotating-straggler"])
def test_ssp_with_a_5x_slower_task(ps, record_property, rotating):
    """One task does 5x the work of the others per clock: BSP vs SSP(2) wall time.

    Times are reported, not asserted.  With the same straggler at every clock no
    protocol can finish before the straggler's own work is done; when the slow task
    changes from clock to clock, SSP(2) lets the others absorb it.
    """
    w = ps.zeros("straggler_w", shape=(4,), dtype="float64")
    angel.train(ps, _straggler_task, [(1, rotating)] * 4, epochs=2, progress=False)  # warm-up
    w.fill(0.0)
    times = {}
    for sync in (angel.BSP(), angel.SSP(staleness=2)):
        res = angel.train(
            ps, _straggler_task, [(150, rotating)] * 4, sync=sync, epochs=24, progress=False
        )
        times[repr(sync)] = res.wall_time
        assert res.clocks == [24] * 4
        assert res.max_lead <= sync.staleness
    record_property("bsp_seconds", times["BSP()"])
    record_property("ssp2_seconds", times["SSP(staleness=2)"])
    print(
        f"\n5x straggler ({'rotating' if rotating else 'same task'}): "
        f"BSP {times['BSP()']:.2f}s, SSP(2) {times['SSP(staleness=2)']:.2f}s"
    )
    np.testing.assert_array_equal(ps.get_array("straggler_w").get(), [48.0] * 4)
