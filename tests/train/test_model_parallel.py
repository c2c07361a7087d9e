"""Angel's round-robin model parallelism: a leader rotates column slices over its group."""

from __future__ import annotations

from collections import defaultdict

import numpy as np

import daskangel as angel
from daskangel.psarray import PSArray

N_ROWS, N_COLS, EPOCHS = 6, 8, 4


def _round_robin_task(ctx, part):
    W = ctx.array("mp_W")
    busy = PSArray("mp_busy")  # busy[group, slice]: members working on it right now
    width = N_COLS // ctx.group_size
    log = []
    clashes = 0
    for epoch in ctx.epochs():
        for rnd, s in enumerate(ctx.round_robin()):
            busy.increment(np.float64(1), rows=ctx.group, cols=s)  # applied at once
            if busy.get(rows=ctx.group, cols=s) != 1:
                clashes += 1
            cols = np.arange(s * width, (s + 1) * width)
            W.get(cols=cols)
            W.increment(np.full((N_ROWS, width), float(part.sum())), cols=cols)
            ctx.flush()  # this round's update is on the servers before the ack
            busy.increment(np.float64(-1), rows=ctx.group, cols=s)
            log.append((ctx.group, epoch, rnd, ctx.rank_in_group, s))
        ctx.clock()
    return {"log": log, "clashes": clashes}


def test_round_robin_slices_never_collide_within_a_group(ps):
    W = ps.zeros("mp_W", shape=(N_ROWS, N_COLS), dtype="float64", block_shape=(3, 4))
    ps.zeros("mp_busy", shape=(2, 2), dtype="float64")
    data = [np.full((4, 2), 1.0), np.full((4, 2), 2.0)]  # one item per group, rows split
    res = angel.train(
        ps,
        _round_robin_task,
        data,
        groups=2,
        group_size=2,
        placement="horizontal",
        sync=angel.SSP(staleness=1),
        epochs=EPOCHS,
        progress=False,
    )
    log = [entry for r in res.results for entry in r["log"]]
    assert len(log) == 4 * EPOCHS * 2  # 4 tasks, 2 rounds per epoch
    by_round = defaultdict(list)
    by_member = defaultdict(list)
    for group, epoch, rnd, rank, s in log:
        by_round[(group, epoch, rnd)].append(s)
        by_member[(group, epoch, rank)].append(s)
    for key, slices in by_round.items():  # no two members of a group on one slice in a round
        assert sorted(slices) == [0, 1], key
    for key, slices in by_member.items():  # each member visits every slice once per epoch
        assert sorted(slices) == [0, 1], key
    assert all(r["clashes"] == 0 for r in res.results)
    # each member's half of its group's item sums to 4 (group 0) or 8 (group 1)
    np.testing.assert_array_equal(W.get(), np.full((N_ROWS, N_COLS), EPOCHS * (4 + 4 + 8 + 8.0)))
    np.testing.assert_array_equal(ps.get_array("mp_busy").get(), 0)
