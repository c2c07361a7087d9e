"""Managed communication: budgeted, prioritised pushes lose nothing and never hang.

The pure pieces (selection, splitting a merge buffer) are property-tested; the push
path runs on one in-process LocalCluster (its config change reaches the workers at
once) under SSP with a budget small enough that most updates wait for the clock
boundary, and the servers must end with exactly the sum of every push.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import dask
import numpy as np
import pytest
import scipy.sparse as sp
from distributed import Client
from hypothesis import given, settings
from hypothesis import strategies as st

import daskangel as angel
from daskangel.comm import CommPolicy, configure, priorities, select
from daskangel.errors import CommBudgetWarning, InvalidArgumentError
from daskangel.psarray import get_agent
from daskangel.psarray._pushbuffer import MergeBuffer

IN_PROCESS = True  # config set here reaches the workers; nothing crosses processes

DEFAULTS = {
    "budget": None,
    "policy": "magnitude",
    "interval": "50ms",
    "warn_interval": "30s",
    "refresh": False,
    "refresh_interval": "50ms",
    "server_budget": None,
}


@pytest.fixture
def managed(client: Client) -> Iterator[Client]:
    try:
        yield client
    finally:
        configure(client, **DEFAULTS)


# -- pure parts -------------------------------------------------------------------------


@settings(deadline=None, max_examples=60)
@given(
    prio=st.lists(st.floats(0, 100), min_size=0, max_size=40),
    budget=st.integers(0, 400),
    policy=st.sampled_from(["magnitude", "random"]),
)
def test_select_fits_the_budget_and_ranks(prio, budget, policy):
    p = np.array(prio, np.float64)
    cost = np.arange(p.shape[0]) % 3 * 8 + 8
    at = select(p, cost, budget, policy, np.random.default_rng(0))
    assert np.all(np.diff(at) > 0) and cost[at].sum() <= budget
    assert np.all(p[at] > 0)
    if policy == "magnitude" and at.shape[0]:
        # nothing left out ranks above what was taken unless it no longer fit
        left = np.setdiff1d(np.flatnonzero(p > 0), at)
        better = left[p[left] > p[at].min()]
        assert np.all(cost[at].sum() + cost[better] > budget)


@settings(deadline=None, max_examples=40)
@given(
    keys=st.lists(st.integers(0, 29), min_size=1, max_size=60),
    pick=st.lists(st.booleans(), min_size=60, max_size=60),
    dense_limit=st.sampled_from([0, 10**6]),
)
def test_split_parts_add_up_to_the_buffer(keys, pick, dense_limit):
    buf = MergeBuffer(30, 2, np.dtype("int64"), 8, dense_limit, merge_bytes=1)
    k = np.array(keys, np.int64)
    v = np.arange(2 * k.shape[0], dtype=np.int64).reshape(-1, 2) - 7
    want = np.zeros((30, 2), np.int64)
    np.add.at(want, k, v)
    buf.add(k, v)
    units, _ = buf.units()
    at = np.flatnonzero(np.array(pick[: units.shape[0]]))
    part = buf.split(at)
    buf.add(k[:3], v[:3])  # keeps merging after a split
    np.add.at(want, k[:3], v[:3])
    got = np.zeros_like(want)
    for b in (part, buf):
        fmt, kk, vv = b.take()
        if fmt == "dense":
            got += vv
        else:
            np.add.at(got, kk, vv)
    np.testing.assert_array_equal(got, want)


def test_relative_magnitude_uses_the_cached_values():
    d = np.array([[1.0, 1.0], [1.0, 0.0]])
    np.testing.assert_allclose(priorities(d, np.array([3.0, 0.0]), eps=1.0), [0.5, 1.0])
    assert priorities(d, None, eps=0.5).tolist() == [4.0, 2.0]


def test_a_bad_key_is_refused_naming_it(client):
    for key, value in [("budget", "fast"), ("budget", -1), ("policy", "largest")]:
        with pytest.raises(InvalidArgumentError, match=rf"daskangel\.comm\.{key}"):
            configure(client, **{key: value})
    assert not CommPolicy.from_config().on  # nothing was set
    with (
        dask.config.set({"daskangel.comm.burst": "1ms"}),
        pytest.raises(InvalidArgumentError, match=r"daskangel\.comm\.burst"),
    ):
        CommPolicy.from_config()


# -- on a cluster -------------------------------------------------------------------------

N_CLOCKS = 12
SHAPES = {"c_rows": (64, 16), "c_vec": (4000,), "c_cnt": (300, 20)}


def _work(ms: float) -> None:
    """Real compute (no sleep) between increments, so budgeted rounds happen mid-clock."""
    m = np.random.default_rng(0).standard_normal((48, 48)) / 8
    x = m
    import time

    end = time.perf_counter() + ms / 1000
    while time.perf_counter() < end:
        x = np.tanh(x @ m)


def _additive(ctx, seed):
    rows, vec, cnt = (ctx.array(n) for n in SHAPES)
    sums = {n: np.zeros(s, np.int64) for n, s in SHAPES.items()}
    for c in ctx.epochs():
        rng = np.random.default_rng([seed, ctx.task_id, c])
        for _ in range(3):
            r = rng.integers(0, 64, 8)
            d = rng.integers(-50, 50, (8, 16))
            rows.increment(d.astype(np.float64), rows=r)
            np.add.at(sums["c_rows"], r, d)
            k = rng.integers(0, 4000, 300)
            e = rng.integers(-9, 10, 300)
            vec.increment(e.astype(np.float64), cols=k)
            np.add.at(sums["c_vec"], k, e)
            i, j = rng.integers(0, 300, 200), rng.integers(0, 20, 200)
            cnt.increment(sp.coo_matrix((np.ones(200, np.int64), (i, j)), shape=(300, 20)))
            np.add.at(sums["c_cnt"], (i, j), 1)
            _work(8)
        rows.get(rows=np.arange(8))  # cached rows: |w| for the relative magnitude
        ctx.clock()
    return sums


@pytest.mark.timeout(180)
@pytest.mark.filterwarnings("ignore::daskangel.errors.CommBudgetWarning")
@pytest.mark.parametrize("policy", ["magnitude", "random"])
def test_small_budget_loses_no_update(ps, cluster, managed, policy):
    ps.zeros("c_rows", shape=SHAPES["c_rows"], dtype="float64")
    ps.zeros("c_vec", shape=SHAPES["c_vec"], dtype="float64")
    ps.zeros("c_cnt", shape=SHAPES["c_cnt"], dtype="int64", block_shape=(100, 20))
    budget = 64 * 1024
    configure(managed, budget=budget, policy=policy, interval="5ms")
    if policy == "random":  # with eager refresh of the cached rows too (servers' budget)
        configure(managed, refresh=True, refresh_interval="5ms", server_budget="16KiB")
    res = angel.train(
        ps, _additive, [1] * 4, sync=angel.SSP(staleness=1), epochs=N_CLOCKS, progress=False
    )
    assert res.clocks == [N_CLOCKS] * 4
    if policy == "random":
        assert sum(managed.run(_refreshed).values()) > 0
    for name in SHAPES:
        want = sum(r[name] for r in res.results)
        np.testing.assert_array_equal(ps.get_array(name).get(), want)  # exactly
    status = ps.status(max_age=0)
    tasks, servers = status.query("kind == 'task'"), status.query("kind == 'server'")
    per_worker = tasks.groupby("worker")[["comm_budget", "comm_sent", "comm_held_back"]].max()
    assert (per_worker["comm_budget"] == budget).all()
    assert per_worker["comm_sent"].sum() > 0  # some went out between clock boundaries
    assert per_worker["comm_held_back"].sum() > 0  # and some waited for them
    assert (tasks["comm_rate"] >= 0).all() and (tasks["comm_short_clocks"] >= 0).all()
    # the dashboard page shows the same: per worker, and per server with eager refresh
    page = _page_tables(f"http://127.0.0.1:{cluster.scheduler.http_server.port}")
    texts = [t for i, t in zip(*page["tasks"], strict=True) if str(i).startswith(res.job)]
    assert len(texts) == 4 and all(t.startswith("budget 64.00 kiB/s, sent ") for t in texts)
    cells = dict(zip(*page["servers"], strict=True))
    assert set(cells) >= {str(s) for s in ps.servers}
    sent = servers.loc[servers["refresh_sent"] > 0, "id"].tolist()
    if policy == "random":  # the servers that refreshed: their budget and bytes sent
        assert sent and (servers["refresh_budget"].isin([0, 16 * 1024])).all()
        for sid in sent:
            assert cells[sid].startswith("budget 16.00 kiB/s, sent "), cells[sid]
            assert not cells[sid].startswith("budget 16.00 kiB/s, sent 0 B,"), cells[sid]
            assert ", held back " in cells[sid] and ", rate " in cells[sid]
    idle = servers.query("refresh_budget == 0 and refresh_sent == 0 and refresh_held_back == 0")
    assert all(cells[sid] == "" for sid in idle["id"])  # eager refresh never on there


def _refreshed(dask_worker) -> int:
    """Units this worker's eager refresh wrote into its cache."""
    from daskangel.psarray import agent_of

    b = getattr(dask_worker, "_daskangel_binding", None)
    return 0 if b is None else int(agent_of(b).refresher.units)


def _page_tables(base: str) -> dict[str, tuple[list, list]]:
    """``(ids, cells)`` of the daskangel page's task table ("managed comm (worker)")
    and server table ("eager refresh (server)"), read over HTTP."""
    from bokeh.client import pull_session

    with pull_session(url=f"{base}/individual-daskangel") as session:
        doc = session.document
        tasks = doc.select_one({"name": "daskangel-tasks"}).data
        servers = doc.select_one({"name": "daskangel-servers"}).data
        return {
            "tasks": (list(tasks["id"]), list(tasks["comm_text"])),
            "servers": (list(servers["id"]), list(servers["refresh_text"])),
        }


def test_a_budget_below_a_clock_warns_with_figures_and_does_not_hang(ps, managed):
    a = ps.zeros("c_tiny", shape=(100, 50), dtype="float64")
    configure(managed, budget=100, warn_interval="0s")  # 100 bytes/s
    agent = get_agent(managed)  # this process's agent: the warning surfaces here
    agent.increment("c_tiny", np.ones((100, 50)), rows=np.arange(100), clock=None)
    with pytest.warns(CommBudgetWarning, match=r"100 B/s is below what a clock needs.*held back"):
        agent.flush()
    np.testing.assert_array_equal(a.get(), 1.0)
    assert agent.pusher.comm_status()["comm_short_clocks"] >= 1


def test_server_refresh_sends_changed_rows_within_its_budget_and_forgets_dropped():
    """Eager refresh on one server (no cluster): only moved rows, largest relative
    change first, within daskangel.comm.server-budget; a drop frees the subscriptions."""
    from daskangel.psarray._initspec import InitSpec
    from daskangel.psarray._server import PSServer

    s = PSServer("local", 0)
    spec = {"block": 0, "kind": "dense", "shape": (6, 4), "dtype": "float64",
            "init": InitSpec().to_dict(), "row0": 10, "col0": 0, "n_cols": 4}  # fmt: skip
    s.dispatch("create", array="W", blocks=[spec])
    s.dispatch("update", array="W", add=False, parts=[{"block": 0, "rows": None,
               "cols": None, "values": np.ones((6, 4))}])  # fmt: skip
    kw = {"array": "W", "sub": "w1", "mode": "rows", "policy": "magnitude", "epsilon": 1e-6}
    first = s.dispatch("refresh", parts=[{"block": 0, "units": "all"}], **kw)[0]
    assert first["keys"].shape == (0,)  # subscribed; nothing moved yet
    d = np.zeros((6, 4))
    d[1], d[4] = 0.5, 3.0  # row 4 moved most
    s.dispatch("update", array="W", add=True, parts=[{"block": 0, "rows": None, "cols": None,
               "values": d}])  # fmt: skip
    with dask.config.set({"daskangel.comm.server-budget": 40, "daskangel.comm.burst": "1s"}):
        st = s.refresh  # type: ignore[attr-defined]
        st.tokens()
        st.bucket.tokens = 40.0  # one row of 8 + 32 bytes now
        got = s.dispatch("refresh", parts=[{"block": 0, "units": None}], **kw)[0]
        assert got["keys"].tolist() == [14]  # global row 10 + 4
        np.testing.assert_array_equal(got["vals"], np.full((1, 4), 4.0))
        st.bucket.tokens = 40.0
        got = s.dispatch("refresh", parts=[{"block": 0, "units": None}], **kw)[0]
        assert got["keys"].tolist() == [11]  # the held-back row goes next
        assert st.status()["refresh_held_back"] == 40 and st.status()["refresh_sent"] == 80
    s.dispatch("drop", array="W")
    assert not st.subs and not st.seen


def test_server_refresh_compares_only_rows_written_since_the_last_round():
    """A refresh round reads and diffs the subscribed rows increments wrote since the
    subscriber's last round (and rows held back by the budget), not every subscribed
    row; a write it is not told of (a fill) makes it compare them all once."""
    from daskangel.psarray._initspec import InitSpec
    from daskangel.psarray._server import PSServer

    s = PSServer("local", 0)
    spec = {"block": 0, "kind": "dense", "shape": (1000, 4), "dtype": "float64",
            "init": InitSpec().to_dict(), "row0": 0, "col0": 0, "n_cols": 4}  # fmt: skip
    s.dispatch("create", array="W", blocks=[spec])
    subs = [{"array": "W", "sub": w, "mode": "rows", "policy": "magnitude", "epsilon": 1e-6}
            for w in ("w1", "w2")]  # fmt: skip

    def round(kw: dict[str, Any], units: Any = None) -> list[int]:
        got = s.dispatch("refresh", parts=[{"block": 0, "units": units}], **kw)
        return got[0]["keys"].tolist()  # type: ignore[no-any-return]

    def add(rows: list[int], scale: float = 1.0) -> None:
        vals = scale * np.arange(1, len(rows) + 1, dtype="float64")[:, None] * np.ones((1, 4))
        s.dispatch("update", array="W", add=True,
                   parts=[{"block": 0, "rows": np.array(rows), "cols": None, "values": vals}])  # fmt: skip

    for kw in subs:
        assert round(kw, "all") == []
    st: Any = s.refresh  # type: ignore[attr-defined]
    assert st.last_compared == 0 and st.compared == 0  # just read: nothing to compare
    add([3, 500])
    assert round(subs[0]) == [3, 500] and st.last_compared == 2
    assert round(subs[0]) == [] and st.last_compared == 0
    add([7])
    assert round(subs[1]) == [3, 7, 500] and st.last_compared == 3  # w2: both writes
    with dask.config.set({"daskangel.comm.server-budget": 40, "daskangel.comm.burst": "2s"}):
        st.tokens()
        add([10, 20, 30], 10.0)
        st.bucket.tokens = 40.0  # one row of 8 + 32 bytes
        assert round(subs[0]) == [30] and st.last_compared == 4  # 7, 10, 20, 30
        st.bucket.tokens = 80.0
        assert round(subs[0]) == [10, 20] and st.last_compared == 3  # the held back ones
    s.dispatch("fill", array="W", parts=[{"block": 0}], value=5.0)  # not noted: all compared
    assert len(round(subs[0])) == 1000 and st.last_compared == 1000
    assert round(subs[0]) == [] and st.last_compared == 0
    assert st.compared == 2 + 3 + 4 + 3 + 1000
    assert st.subscribed == 1000 * 9  # what the rounds compared without the record
