"""The pure clock rule, on its own (no Dask)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daskangel.scheduler._clock_rule import (
    ASP,
    BSP,
    SSP,
    ClockTable,
    as_sync,
    may_proceed,
    read_floor,
)


def test_protocol_values():
    assert BSP().staleness == 0
    assert SSP(staleness=3).staleness == 3
    assert ASP().staleness is None
    assert repr(SSP(2)) == "SSP(staleness=2)"
    assert as_sync("bsp") == BSP()
    assert as_sync("asp") == ASP()
    assert as_sync("ssp:4") == SSP(4)
    assert as_sync(0) == BSP()
    assert as_sync(2) == SSP(2)


@pytest.mark.parametrize("bad", [-1, "sometimes", 1.5, None, "ssp:x"])
def test_as_sync_rejects_with_clear_error(bad):
    with pytest.raises(ValueError, match="sync: expected BSP"):
        as_sync(bad)


@pytest.mark.parametrize("bad", [-1, 1.0, True, "2"])
def test_ssp_rejects_bad_staleness(bad):
    with pytest.raises(ValueError, match="staleness: expected an int >= 0"):
        SSP(staleness=bad)


def test_rule_and_floor():
    assert read_floor(7, 2) == 5
    assert read_floor(7, None) is None
    assert may_proceed(7, 5, 2)
    assert not may_proceed(8, 5, 2)
    assert may_proceed(100, 0, None)
    assert may_proceed(5, None, 0)  # nobody left running


def test_tick_is_idempotent_and_min_is_incremental():
    t = ClockTable(3)
    assert t.tick(0, 0) == 1
    assert t.tick(0, 0) == 1  # a retried tick does not advance twice
    assert t.min_clock == 0
    t.tick(1, 0)
    t.tick(2, 0)
    assert t.min_clock == 1
    t.finish(2)
    t.tick(0, 1)
    t.tick(1, 1)
    assert t.min_clock == 2
    t.finish(0)
    t.finish(1)
    assert t.min_clock is None
    assert t.floor_met(10**6)


def test_groups_move_in_lockstep():
    t = ClockTable(4, groups=[0, 0, 1, 1])
    t.tick(0, 0)
    assert not t.ready(0, None)  # even under ASP, member 1 has not caught up
    t.tick(1, 0)
    assert t.ready(0, None) and t.ready(1, None)
    assert t.ready(0, 1) and not t.ready(0, 0)  # BSP across groups: group 1 is behind


def test_bad_arguments():
    with pytest.raises(ValueError, match="tasks"):
        ClockTable(0)
    with pytest.raises(ValueError, match="groups"):
        ClockTable(2, groups=[0])
    with pytest.raises(ValueError, match="task: expected a task id"):
        ClockTable(2).tick(5, 0)
    with pytest.raises(ValueError, match="start"):
        ClockTable(2, start=[0, -1])


@settings(deadline=None, max_examples=60)
@given(
    n=st.integers(1, 8),
    group_size=st.sampled_from([1, 2]),
    staleness=st.one_of(st.none(), st.integers(0, 3)),
    choices=st.lists(st.integers(0, 10**6), min_size=1, max_size=300),
)
def test_random_schedules_respect_the_bound(n, group_size, staleness, choices):
    """Run only tasks the rule lets run; the table must match a brute-force model."""
    groups = [t // group_size for t in range(n)]
    table = ClockTable(n, groups)
    clocks = [0] * n
    done: set[int] = set()
    for x in choices:
        running = [t for t in range(n) if t not in done]
        if not running:
            break
        runnable = [t for t in running if table.ready(t, staleness)]
        assert runnable, "the slowest task can always run"
        t = runnable[x % len(runnable)]
        table.note_release(clocks[t])
        m = min(clocks[u] for u in running)
        assert table.min_clock == m
        if staleness is not None:
            assert clocks[t] - m <= staleness
        for u in running:  # lockstep in a group
            if groups[u] == groups[t]:
                assert clocks[u] >= clocks[t]
        if x % 97 == 0:
            table.finish(t)
            done.add(t)
        else:
            clocks[t] = table.tick(t, clocks[t])
    if staleness is not None:
        assert table.max_lead <= staleness
