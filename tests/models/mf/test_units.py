"""Pure parts of the factorisation family: ids, the user split, the duplicate rule, kernels."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daskangel.errors import InvalidArgumentError, InvalidTypeError
from daskangel.models.mf._ids import IdMap
from daskangel.models.mf._kernels import predict, sgd_block, sse
from daskangel.models.mf._parts import last_wins, split_by_user, user_bounds
from daskangel.models.mf._ratings import Columns, raw_triples
from daskangel.models.mf._recommend import merge_topn, score_block

pytestmark = pytest.mark.timeout(120)


def test_id_map_any_type_and_growth() -> None:
    m = IdMap.of(np.array([30, 10, 20, 10]), "user")
    assert m.ids.tolist() == [10, 20, 30]
    assert m.encode(np.array([20, 99, 10])).tolist() == [1, -1, 0]
    m2, new = m.extend(np.array([5, 10]))
    assert new == 1 and m2.ids.tolist() == [10, 20, 30, 5]  # appended: old rows keep numbers
    s = IdMap.of(np.array(["b", "a"], dtype=object), "item")
    assert s.encode(np.array(["a", "c"], dtype=object)).tolist() == [0, -1]
    assert s.encode(np.array([1, 2])).tolist() == [-1, -1]  # other type: unknown, no error
    r = IdMap.range(4, "user")
    assert r.encode(np.array([3, 4, -1])).tolist() == [3, -1, -1]


def test_ids_refuse_missing_and_fractional_values() -> None:
    with pytest.raises(InvalidArgumentError, match="user: 1 missing"):
        IdMap.of(np.array([1.0, np.nan]), "user")
    with pytest.raises(InvalidArgumentError, match="item: 1 missing"):
        IdMap.of(np.array(["a", None], dtype=object), "item")
    with pytest.raises(InvalidTypeError, match="fractional"):
        IdMap.of(np.array([1.5]), "user")


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(0, 30), min_size=1, max_size=60),
    st.integers(1, 6),
)
def test_user_bounds_cover_every_user_once(users: list[int], n_tasks: int) -> None:
    u = np.array(users)
    counts = np.bincount(u, minlength=31)
    b = user_bounds(counts, n_tasks)
    assert b[0] == 0 and b[-1] == 31 and len(b) == n_tasks + 1
    assert (np.diff(b) >= 0).all()
    parts = split_by_user(u, np.zeros_like(u), np.ones(u.size, np.float32), b, 1)
    seen = np.concatenate([p.u.astype(np.int64) + p.user0 for p in parts])
    assert sorted(seen.tolist()) == sorted(set(users))  # one item: duplicates collapse


def test_duplicates_last_one_wins() -> None:
    u = np.array([0, 1, 0, 0])
    i = np.array([5, 5, 5, 6])
    r = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    uu, ii, rr = last_wins(u, i, r, 10)
    got = {(int(a), int(b)): float(c) for a, b, c in zip(uu, ii, rr, strict=True)}
    assert got == {(0, 5): 3.0, (0, 6): 4.0, (1, 5): 2.0}


def test_raw_triples_checks_name_the_problem() -> None:
    cols = Columns("u", "i", "r")
    with pytest.raises(InvalidArgumentError, match="item_col: column 'i' is not in the ratings"):
        raw_triples(pd.DataFrame({"u": [1], "r": [1.0]}), cols)
    with pytest.raises(InvalidArgumentError, match="column 'r' has 1 NaN or infinite"):
        raw_triples(pd.DataFrame({"u": [1, 2], "i": [1, 2], "r": [1.0, np.inf]}), cols)
    with pytest.raises(InvalidTypeError, match="must be numeric"):
        raw_triples(pd.DataFrame({"u": [1], "i": [1], "r": ["good"]}), cols)
    implicit = Columns("u", "i", "r", implicit=True)
    _, _, r = raw_triples(pd.DataFrame({"u": [1, 2], "i": [3, 3]}), implicit)
    assert r.tolist() == [1.0, 1.0]


def test_sgd_kernel_matches_a_plain_python_update() -> None:
    rng = np.random.default_rng(0)
    P = rng.normal(size=(3, 5)).astype(np.float32)
    Q = rng.normal(size=(4, 5)).astype(np.float32)
    u = np.array([0, 2, 1], np.int32)
    s = np.array([3, 0, 3], np.int32)
    r = np.array([4.0, 2.0, 5.0], np.float32)
    P2, Q2 = P.astype(np.float64), Q.astype(np.float64)
    loss = 0.0
    for k in range(3):
        a, b = u[k], s[k]
        e = r[k] - (3.0 + P2[a, 4] + Q2[b, 4] + P2[a, :4] @ Q2[b, :4])
        loss += e * e
        P2[a, 4] += 0.1 * (e - 0.2 * P2[a, 4])
        Q2[b, 4] += 0.1 * (e - 0.2 * Q2[b, 4])
        pa, qb = P2[a, :4].copy(), Q2[b, :4].copy()
        P2[a, :4] = pa + 0.05 * (e * qb - 0.1 * pa)
        Q2[b, :4] = qb + 0.05 * (e * pa - 0.1 * qb)
    got = sgd_block(np.arange(3), u, s, r, P, Q, 3.0, 0.05, 0.1, 0.1, 0.2)
    assert got == pytest.approx(loss, rel=1e-4)
    np.testing.assert_allclose(P, P2, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(Q, Q2, rtol=1e-4, atol=1e-5)


def test_unknown_rows_fall_back_to_known_biases() -> None:
    P = np.array([[1.0, 0.5]], np.float32)
    Q = np.array([[2.0, -0.5]], np.float32)
    got = predict(np.array([-1, 0, -1]), np.array([-1, -1, 0]), P, Q, 3.0, 1.0, 5.0, True)
    assert got.tolist() == [3.0, 3.5, 2.5]
    assert sse(np.array([0]), np.array([0]), np.array([4.0]), P, Q, 3.0, 1.0, 5.0) == 1.0


def test_streamed_top_n_equals_the_full_ranking() -> None:
    rng = np.random.default_rng(1)
    query = rng.normal(size=(6, 4)).astype(np.float32)
    Q = rng.normal(size=(50, 4)).astype(np.float32)
    rows = rng.permutation(50)
    blocks = ((rows[s : s + 7], Q[rows[s : s + 7]]) for s in range(0, 50, 7))
    top, sc = score_block(query, blocks, 5, 3, cosine=False, bias=True)
    full = query[:, :3] @ Q[:, :3].T + Q[:, 3][None, :]
    np.testing.assert_array_equal(top, np.argsort(-full, axis=1)[:, :5])
    np.testing.assert_allclose(sc, -np.sort(-full, axis=1)[:, :5], rtol=1e-5)
    _, bi = merge_topn(
        np.full((1, 0), -np.inf), np.full((1, 0), -1), np.ones((1, 2)), np.array([3, 4]), 5
    )
    assert bi.tolist() == [[3, 4]]


def test_prepare_lays_each_users_ratings_out_together() -> None:
    from daskangel.models.mf._parts import make_part
    from daskangel.models.mf._prep import prepare

    rng = np.random.default_rng(0)
    u = rng.integers(0, 30, 600)
    part = make_part(0, 0, 30, u, rng.integers(0, 50, 600), np.ones(600, np.float32), 50)
    plain = prepare(part, seed=3, val_fraction=0.1, pull_rows=8)
    runs = prepare(part, seed=3, val_fraction=0.1, pull_rows=8, runs=True)
    # the same training ratings and validation split, the users now in contiguous runs
    assert sorted(zip(plain.u.tolist(), plain.slot.tolist(), strict=True)) == sorted(
        zip(runs.u.tolist(), runs.slot.tolist(), strict=True)
    )
    assert np.array_equal(plain.vu, runs.vu) and np.array_equal(plain.vslot, runs.vslot)
    starts = np.flatnonzero(np.diff(runs.u)) + 1
    assert len(np.unique(runs.u)) == starts.shape[0] + 1  # one run per user
    assert not np.array_equal(np.unique(runs.u[np.r_[0, starts]]), runs.u[np.r_[0, starts]])
    again = prepare(part, seed=3, val_fraction=0.1, pull_rows=8, runs=True)
    assert np.array_equal(again.u, runs.u)  # (cached; seeded either way)


def test_prepare_lays_the_ratings_out_band_by_band_user_by_user_inside() -> None:
    from daskangel.models._core import epoch_order
    from daskangel.models.mf._kernels import fill_blocks, sgd_blocks
    from daskangel.models.mf._parts import make_part
    from daskangel.models.mf._prep import band_blocks, prepare

    rng = np.random.default_rng(1)
    u = rng.integers(0, 30, 800)
    i = rng.integers(0, 60, 800)
    part = make_part(0, 0, 30, u, i, np.ones(800, np.float32), 60)
    runs = prepare(part, seed=3, val_fraction=0.1, pull_rows=8, runs=True)
    bounds = (0, 17, 35, 60)
    d = prepare(part, seed=3, val_fraction=0.1, pull_rows=8, runs=True, bounds=bounds)
    assert d.n_bands == 3 and d.band_starts.tolist()[::3] == [0, d.n_train]
    assert sorted(zip(runs.u.tolist(), runs.slot.tolist(), strict=True)) == sorted(
        zip(d.u.tolist(), d.slot.tolist(), strict=True)
    )
    items = d.keys[d.slot]
    for b in range(3):
        s0, s1 = d.band_starts[b], d.band_starts[b + 1]
        assert ((items[s0:s1] >= bounds[b]) & (items[s0:s1] < bounds[b + 1])).all()
        k0, k1 = d.band_slots[b], d.band_slots[b + 1]
        assert ((d.slot[s0:s1] >= k0) & (d.slot[s0:s1] < k1)).all()
        # inside a band each user's ratings stay together, in their user-run order
        ub = d.u[s0:s1]
        assert len(np.unique(ub)) == np.count_nonzero(np.diff(ub)) + 1
    # an epoch's visit: every rating once, band by band in the visiting order given,
    # each band's blocks spelling out its epoch order; the kernel walking the blocks
    # makes exactly the updates of the kernel over the written-out order
    blocks = band_blocks(d.band_starts, np.array([2, 0, 1]), [5], block=4)
    assert [int(bl.shape[0]) for bl in blocks] == [
        -(-int(d.band_starts[b + 1] - d.band_starts[b]) // 4) for b in (2, 0, 1)
    ]
    orders = []
    for bl, b in zip(blocks, (2, 0, 1), strict=True):
        o = np.empty(int(d.band_starts[b + 1] - d.band_starts[b]), np.int64)
        fill_blocks(bl, d.band_starts[b + 1], 4, o)
        want = epoch_order(o.shape[0], [5, b], block=4) + d.band_starts[b]
        assert np.array_equal(o, want)
        orders.append(o)
    order = np.concatenate(orders)
    assert sorted(order.tolist()) == list(range(d.n_train))
    rng = np.random.default_rng(0)
    P = rng.normal(0, 0.1, (30, 5)).astype(np.float32)
    Q = rng.normal(0, 0.1, (d.keys.shape[0], 5)).astype(np.float32)
    P2, Q2 = P.copy(), Q.copy()
    r = np.linspace(1, 5, d.n_train).astype(np.float32)
    a = sgd_block(order, d.u, d.slot, r, P, Q, 3.0, 0.01, 0.05, 0.01, 0.05)
    b_ = sum(
        sgd_blocks(bl, d.band_starts[b + 1], 4, d.u, d.slot, r, P2, Q2, 3.0, 0.01, 0.05, 0.01, 0.05)
        for bl, b in zip(blocks, (2, 0, 1), strict=True)
    )
    assert a == pytest.approx(b_, rel=1e-6)
    np.testing.assert_array_equal(P, P2)
    np.testing.assert_array_equal(Q, Q2)
    again = band_blocks(d.band_starts, np.array([2, 0, 1]), [5], block=4)
    assert all(np.array_equal(x, y) for x, y in zip(blocks, again, strict=True))  # seeded
