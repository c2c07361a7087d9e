"""Server-side optimisers against scalar reference implementations, step by step."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse

import daskangel as angel
from daskangel import ops
from daskangel.psarray import InitSpec

from .funcs import Snapshot

# -- scalar references: one entry at a time, written independently of daskangel.ops ------


def ref_sgd(hp, w, s, i, g):
    w = w - hp["lr"] * (g + hp["l2"] * w)
    if hp["l1"]:
        w = math.copysign(max(abs(w) - hp["lr"] * hp["l1"], 0.0), w)
    return w


def ref_momentum(hp, w, s, i, g):
    s["v"][i] = hp["momentum"] * s["v"][i] + g + hp["l2"] * w
    return w - hp["lr"] * s["v"][i]


def ref_adagrad(hp, w, s, i, g):
    g = g + hp["l2"] * w
    s["h"][i] += g * g
    return w - hp["lr"] * g / (math.sqrt(s["h"][i]) + hp["eps"])


def ref_adam(hp, w, s, i, g):
    g = g + hp["l2"] * w
    s["t"][i] += 1
    t = s["t"][i]
    s["m"][i] = hp["beta1"] * s["m"][i] + (1 - hp["beta1"]) * g
    s["v"][i] = hp["beta2"] * s["v"][i] + (1 - hp["beta2"]) * g * g
    mhat = s["m"][i] / (1 - hp["beta1"] ** t)
    vhat = s["v"][i] / (1 - hp["beta2"] ** t)
    return w - hp["lr"] * mhat / (math.sqrt(vhat) + hp["eps"])


def ref_ftrl(hp, w, s, i, g):
    n_old = s["n"][i]
    if n_old == 0:  # never stepped: the z that gives back w
        l1 = math.copysign(hp["l1"], w) if w else 0.0
        s["z"][i] = -w * (hp["beta"] / hp["alpha"] + hp["l2"]) - l1
    n_new = n_old + g * g
    sigma = (math.sqrt(n_new) - math.sqrt(n_old)) / hp["alpha"]
    s["z"][i] += g - sigma * w
    s["n"][i] = n_new
    z = s["z"][i]
    if abs(z) <= hp["l1"]:
        return 0.0
    return -(z - math.copysign(hp["l1"], z)) / (
        (hp["beta"] + math.sqrt(n_new)) / hp["alpha"] + hp["l2"]
    )


def ref_adarevision(hp, w, s, i, g, version):
    k = hp["max_versions"]
    cur = s["ver"][i]
    v = max(version, cur - (k - 1))  # documented clamp of too-stale versions
    gbck = s["gbar"][i] - s["history"][i][v]
    eta_old = hp["lr"] / math.sqrt(s["zmax"][i])
    s["z"][i] += g * g + 2 * g * gbck
    s["zmax"][i] = max(s["zmax"][i], s["z"][i])
    eta = hp["lr"] / math.sqrt(s["zmax"][i])
    w = w - eta * g + (eta_old - eta) * gbck
    s["gbar"][i] += g
    s["ver"][i] = cur + 1
    s["history"][i].append(s["gbar"][i])
    return w


CASES = {
    "SGD": (ops.SGD(lr=0.1, l1=0.05, l2=0.01), ref_sgd, {}),
    "Momentum": (ops.Momentum(lr=0.05, momentum=0.9, l2=0.01), ref_momentum, {"v": 0.0}),
    "AdaGrad": (
        ops.AdaGrad(lr=0.5, eps=1e-8, l2=0.01, initial_accumulator=0.1),
        ref_adagrad,
        {"h": 0.1},
    ),
    "Adam": (ops.Adam(lr=0.05, l2=0.01), ref_adam, {"m": 0.0, "v": 0.0, "t": 0}),
    "FTRL": (ops.FTRL(alpha=0.5, beta=1.0, l1=0.3, l2=0.1), ref_ftrl, {"z": 0.0, "n": 0.0}),
}


class Reference:
    """Full flat arrays of weights and state, updated one touched entry at a time."""

    def __init__(self, rule, fn, init, w0):
        self.hp = rule.hyper()
        self.fn = fn
        self.w = np.array(w0, dtype=np.float64).ravel()
        self.s = {k: np.full(self.w.shape, v, dtype=type(v)) for k, v in init.items()}

    def step(self, flat, g):
        acc: dict[int, float] = {}
        for i, gi in zip(flat.tolist(), g.tolist(), strict=True):
            acc[i] = acc.get(i, 0.0) + gi  # duplicates summed
        for i, gi in acc.items():
            self.w[i] = self.fn(self.hp, self.w[i], self.s, i, gi)


def check(opt, ref, rtol=1e-9):
    """Weights and every state array against the reference, read in one psf call."""
    got = opt.weights.psf(Snapshot(), *opt.arrays[1:])
    names = ["w"] + [s[0] for s in opt.optimizer.state_slots()]
    want = {"w": ref.w, **ref.s}
    for name, arr in zip(names, got, strict=True):
        np.testing.assert_allclose(arr.ravel(), want[name], rtol=rtol, atol=1e-12, err_msg=name)


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("mode", ["dense", "keys", "grid"])
def test_optimizer_matches_reference_over_50_steps(ps, name, mode):
    rule, fn, init = CASES[name]
    rng = np.random.default_rng(hash((name, mode)) % 2**32)
    if mode == "keys":  # a 1-D vector, gradients touching few keys (with duplicates)
        shape = (50,)
        w = ps.random("w", shape, seed=4, low=-1, high=1, dtype="float64", block_shape=(8,))
    else:  # a matrix cut in 2-D blocks
        shape = (6, 7)
        w = ps.random("w", shape, seed=4, low=-1, high=1, dtype="float64", block_shape=(4, 3))
    ref = Reference(rule, fn, init, w.get())
    opt = rule.attach(ps, w)
    assert {b.server for b in w.blocks} == {b.server for b in opt.state.get("v", w).blocks}
    for _ in range(50):
        if mode == "dense":
            g = rng.normal(size=shape)
            opt.step(g)
            ref.step(np.arange(g.size), g.ravel())
        elif mode == "keys":
            keys = rng.integers(0, shape[0], size=rng.integers(1, 6))
            g = rng.normal(size=keys.shape[0])
            opt.step(g, cols=keys)
            ref.step(keys, g)
        else:
            rows = rng.integers(0, shape[0], size=rng.integers(1, 3))
            cols = rng.integers(0, shape[1], size=rng.integers(1, 4))
            g = rng.normal(size=(rows.size, cols.size))
            if rng.random() < 0.5:
                opt.step(g, rows=rows, cols=cols)
            else:  # the same gradient as a scipy.sparse matrix (duplicates summed)
                rr, cc = np.repeat(rows, cols.size), np.tile(cols, rows.size)
                opt.step(scipy.sparse.coo_matrix((g.ravel(), (rr, cc)), shape=shape))
            ref.step(np.repeat(rows, cols.size) * shape[1] + np.tile(cols, rows.size), g.ravel())
        check(opt, ref)


@pytest.mark.parametrize("name", ["SGD", "Adam", "FTRL"])
def test_optimizer_on_sparse_hashed_weights_with_lazy_init(ps, name):
    """10**9 features stored sparse: only touched keys exist, their start is the lazy draw."""
    rule, fn, init = CASES[name]
    n = 10**9
    w = ps.random(
        "w",
        (n,),
        seed=9,
        low=-0.5,
        high=0.5,
        dtype="float64",
        sparse=True,
        partitioner=angel.HashPartitioner(n_blocks=5),
    )
    opt = rule.attach(ps, w)
    rng = np.random.default_rng(1)
    pool = rng.integers(0, n, size=30)  # the few keys this stream ever touches
    w0 = InitSpec("uniform", -0.5, 0.5, 9).draw(pool, np.dtype("float64"))
    ref = Reference(rule, fn, init, w0)
    for _ in range(50):
        pick = rng.integers(0, pool.size, size=rng.integers(1, 8))
        g = rng.normal(size=pick.size)
        opt.step(g, cols=pool[pick])
        ref.step(pick, g)
        np.testing.assert_allclose(w.get(cols=pool), ref.w, rtol=1e-9)
    for sname, arr in opt.state.items():
        np.testing.assert_allclose(arr.get(cols=pool), ref.s[sname], rtol=1e-9)
    assert w.nbytes < 10_000  # still sparse: nothing but the touched keys is stored


def test_float32_weights_and_casting(ps):
    w = ps.zeros("w", (20,), dtype="float32", block_shape=(6,))
    opt = ops.Adam(lr=0.1).attach(ps, w)
    with pytest.raises(angel.errors.CastingError, match="float64"):
        opt.step(np.ones(3), cols=[1, 2, 3])  # float64 -> float32 refused by default
    opt.step(np.ones(3, "float32"), cols=[1, 2, 3])
    opt.step(np.ones(3), cols=[1, 2, 3], casting="same_kind")
    np.testing.assert_allclose(w.get(cols=[1, 2, 3]), [-0.2] * 3, rtol=1e-5)
    assert w.get(cols=[0]).tolist() == [0.0]
    with pytest.raises(angel.errors.NonFiniteError):
        opt.step(np.array([np.nan], "float32"), cols=[4])
    opt.step(np.array([np.nan, 1.0], "float32"), cols=[4, 5], on_nonfinite="skip")
    assert w.get(cols=[4]).tolist() == [0.0] and w.get(cols=[5])[0] < 0
    with pytest.raises(ValueError, match="expected shape"):
        opt.step(np.ones(4, "float32"), cols=[1, 2])


def test_adarevision_with_delayed_versioned_gradients(ps):
    """Workers pull (values, versions), push later; the server revises the step size."""
    k = 4
    rule = ops.AdaRevision(lr=0.3, initial_accumulator=0.5, max_versions=k)
    n = 30
    w = ps.random("w", (n,), seed=2, low=-1, high=1, dtype="float64", block_shape=(7,))
    opt = rule.attach(ps, w)
    hp = rule.hyper()
    ref_w = w.get().astype(np.float64)
    s = {
        "gbar": np.zeros(n),
        "z": np.full(n, 0.5),
        "zmax": np.full(n, 0.5),
        "ver": np.zeros(n, np.int64),
        "history": [[0.0] for _ in range(n)],
    }
    rng = np.random.default_rng(5)
    pending: dict[int, list] = {}
    with pytest.raises(ValueError, match="versions"):
        opt.step(np.ones(1), cols=[0])
    for t in range(50 + 6):
        for keys, g, vers in pending.pop(t, []):  # pushes that arrive now
            opt.step(g, cols=keys, versions=vers)
            acc: dict[int, list] = {}
            for i, gi, vi in zip(keys.tolist(), g.tolist(), vers.tolist(), strict=True):
                a = acc.setdefault(i, [0.0, vi])
                a[0] += gi
                a[1] = min(a[1], vi)
            for i, (gi, vi) in acc.items():
                ref_w[i] = ref_adarevision(hp, ref_w[i], s, i, gi, vi)
        np.testing.assert_allclose(w.get(), ref_w, rtol=1e-9, atol=1e-12)
        for name in ("gbar", "z", "zmax", "ver"):
            np.testing.assert_allclose(opt.state[name].get(), s[name], rtol=1e-9, atol=1e-12)
        if t < 50:  # a worker pulls a few keys now and pushes 0-5 steps later
            keys = rng.integers(0, n, size=rng.integers(1, 5))
            vals, vers = opt.pull(cols=keys)
            np.testing.assert_array_equal(vers, s["ver"][keys])
            np.testing.assert_allclose(vals, ref_w[keys], rtol=1e-12)
            pending.setdefault(t + int(rng.integers(0, 6)), []).append(
                (keys, rng.normal(size=keys.size), vers)
            )
    assert s["ver"].max() > k  # versions went past the kept history: clamping was exercised
    # a dense full-array step uses versions of the whole array
    vals, vers = opt.pull()
    assert vers.shape == (n,) and vers.dtype == np.int64
    opt.step(np.ones(n), versions=vers)
    assert (opt.state["ver"].get() == vers + 1).all()
    with pytest.raises(angel.errors.PSFError, match="newer than the server"):
        opt.step(np.ones(1), cols=[0], versions=[10**6])
    assert (opt.state["ver"].get() == vers + 1).all()  # the failed step changed nothing


def test_bound_optimizer_steps_from_dask_tasks(ps, client):
    w = ps.zeros("w", (100,), dtype="float64", block_shape=(30,))
    opt = ops.SGD(lr=1.0).attach(ps, w)

    def push(opt, i):
        opt.step(np.ones(10), cols=np.arange(10 * i, 10 * i + 10))
        return i

    assert sorted(client.gather(client.map(push, [opt] * 10, range(10)))) == list(range(10))
    np.testing.assert_array_equal(w.get(), -np.ones(100))
    again = ops.SGD(lr=1.0).reattach(ps, w)
    assert [a.name for a in again.arrays] == ["w"]  # SGD keeps no state
    adam = ops.Adam(lr=0.1).attach(ps, w, name="wa")
    assert sorted(adam.state) == ["m", "t", "v"] and adam.state["m"].name == "wa-m"
    adam.step(np.ones(2), cols=[0, 1])
    back = ops.Adam(lr=0.1).reattach(ps, w, name="wa")
    np.testing.assert_array_equal(back.state["t"].get(cols=[0, 1, 2]), [1, 1, 0])
    adam.drop(ps)
    opt.drop(ps)
    assert sorted(ps.arrays()) == ["w"]


def test_ftrl_keeps_nonzero_start_weights(ps):
    """A zero gradient on weights that do not start at 0 (random factors) leaves them;
    FTRL used to reset every first-touched entry to about 0 (z started at 0)."""
    w = ps.random("w", (4, 3), seed=1, dist="normal", scale=0.1, dtype="float64")
    w0 = np.asarray(w.get())
    opt = ops.FTRL(alpha=0.1, beta=1.0, l1=0.01, l2=0.5).attach(ps, w)
    opt.step(np.zeros((2, 3)), rows=[0, 2])
    np.testing.assert_allclose(w.get(), w0, atol=1e-12)
    opt.step(np.full((1, 3), 1e-3), rows=[1])  # a small gradient moves a little
    assert np.abs(np.asarray(w.get())[1] - w0[1]).max() < 1e-3


@pytest.mark.parametrize("order", [(0, 1), (1, 0)])
def test_step_accumulated_steps_each_entry_once_whatever_the_order(ps, order):
    """Two tasks' gradients summed in an accumulator, each task then stepping the rows it
    touched (overlapping in row 3): the same weights and state as one AdaGrad step of
    the sum, whoever calls first, and the accumulator is back at zero."""
    w = ps.random(
        "w", (8, 3), seed=2, dist="normal", scale=0.1, dtype="float64", block_shape=(3, 3)
    )
    w0 = np.asarray(w.get(), np.float64)
    opt = ops.AdaGrad(lr=0.1).attach(ps, w)
    acc = ps.zeros_like(w, "w.acc", "float64")
    rows = [np.array([0, 3, 4]), np.array([3, 7])]
    grads = [np.arange(9.0).reshape(3, 3) - 4.0, np.array([[1.0, 0.5, 0.5], [0.5, 0.5, 0.5]])]
    for r, g in zip(rows, grads, strict=True):
        acc.increment(g, rows=r)
    for i in order:
        ops.step_accumulated(opt, acc, rows=rows[i])
    G = np.zeros((8, 3))
    np.add.at(G, rows[0], grads[0])
    np.add.at(G, rows[1], grads[1])
    hit = G != 0  # row 3, column 0 sums to -1 + 1 = 0: not stepped (lazy, as untouched)
    assert not hit[3, 0]
    want_h = np.where(hit, G * G, 0.0)
    want = w0 - np.where(hit, 0.1 * G / (np.sqrt(want_h) + 1e-8), 0.0)
    np.testing.assert_allclose(w.get(), want, rtol=1e-12)
    np.testing.assert_allclose(opt.state["h"].get(), want_h, rtol=1e-12)
    np.testing.assert_array_equal(acc.get(), np.zeros((8, 3)))
    untouched = [1, 2, 5, 6]
    np.testing.assert_array_equal(np.asarray(w.get())[untouched], w0[untouched])


@pytest.mark.timeout(60)
def test_plan_of_increasing_keys_cuts_as_the_general_plan_groups():
    """A gradient on increasing keys (a minibatch's pulled keys) is planned by cutting
    them at the block bounds; the plan equals the general path's (sort, sum duplicates,
    group), for cols= of a 1-D array, rows= of a 2-D one, with versions."""
    from daskangel.ops._optim import _coo_plan, _sorted_plan, plan_gradient
    from daskangel.psarray import ArrayMeta
    from daskangel.psarray._layout import BlockPartitioner

    rng = np.random.default_rng(0)

    def same(a, b):
        assert a.keys() == b.keys()
        for blk in a:
            assert a[blk].keys() == b[blk].keys()
            for k in a[blk]:  # a 1-D array's one row may be sent once, broadcast
                np.testing.assert_array_equal(
                    np.broadcast_to(a[blk][k], b[blk][k].shape), b[blk][k]
                )
                assert a[blk][k].dtype == b[blk][k].dtype

    lay1 = BlockPartitioner((1, 7)).layout((1, 50), 4, 3, False)
    m1 = ArrayMeta.new("w", (50,), np.float32, False, lay1, InitSpec())
    keys = np.sort(rng.choice(50, 20, replace=False))
    g = rng.normal(size=20)
    ver = rng.integers(0, 9, 20)
    fast = _sorted_plan(m1, None, keys, g.reshape(1, -1), ver.reshape(1, -1), "same_kind", None)
    assert fast is not None and len(fast) > 2
    assert all(p["rows"].shape == (1,) for p in fast.values())
    gen = _coo_plan(m1, np.zeros(20, np.int64), keys, g.astype(np.float32), ver)
    same(fast, gen)
    plain = plan_gradient(m1, g, None, keys, None, "same_kind", None)
    same(plain, _coo_plan(m1, np.zeros(20, np.int64), keys, g.astype(np.float32), None))
    # not increasing (a duplicate): the general path sums it
    dup = np.array([3, 3, 9])
    assert _sorted_plan(m1, None, dup, np.ones((1, 3), np.float32), None, None, None) is None
    summed = plan_gradient(m1, np.ones(3, np.float32), None, dup, None, None, None)
    got = {
        int(c) + lay1.block_cols(b)[0]: float(v)
        for b, p in summed.items()
        for c, v in zip(p["cols"], p["g"], strict=True)
    }
    assert got == {3: 2.0, 9: 1.0}

    lay2 = BlockPartitioner((9, 3)).layout((40, 3), 8, 3, False)
    m2 = ArrayMeta.new("w2", (40, 3), np.float64, False, lay2, InitSpec())
    rows = np.sort(rng.choice(40, 15, replace=False))
    g2 = rng.normal(size=(15, 3))
    fast2 = plan_gradient(m2, g2, rows, None, None, None, None)
    gen2 = _coo_plan(m2, np.repeat(rows, 3), np.tile(np.arange(3), 15), g2.reshape(-1), None)
    assert len(gen2) > 1
    same(fast2, gen2)
