"""The fused optimiser step and pull (``ops._steppull``) against a numpy model."""

from __future__ import annotations

import numpy as np
import pytest

import daskangel as angel
from daskangel import HashPartitioner, ops
from daskangel.ops._steppull import StepPull, fusable, step_pull_async

from .test_optim import CASES, Reference, check

pytestmark = pytest.mark.timeout(240)


def _sorted_keys(rng: np.random.Generator, n: int, most: int) -> np.ndarray:
    return np.sort(rng.choice(n, size=int(rng.integers(0, most + 1)), replace=False))


@pytest.mark.parametrize("name", sorted(CASES))
def test_step_pull_of_a_vector_matches_the_reference_and_reads_after_the_step(ps, name):
    rule, fn, init = CASES[name]
    rng = np.random.default_rng(sorted(CASES).index(name))
    n = 40
    w = ps.random("w", (n,), seed=3, low=-1, high=1, dtype="float64", block_shape=(7,))
    ref = Reference(rule, fn, init, w.get())
    opt = rule.attach(ps, w)
    assert fusable(opt, "cols") and len({b.server for b in w.blocks}) == 2
    for _ in range(30):
        keys, pull = _sorted_keys(rng, n, 12), _sorted_keys(rng, n, 12)
        g = rng.normal(size=keys.shape[0])
        [got] = step_pull_async(opt, [g], [keys], [pull], axis="cols").result()
        ref.step(keys, g)
        np.testing.assert_allclose(got, ref.w[pull], rtol=1e-12, atol=1e-15)
        assert got.shape == pull.shape and got.dtype == np.float64
    check(opt, ref)


def test_step_pull_of_rows_matches_the_reference(ps):
    rule, fn, init = CASES["AdaGrad"]
    rng = np.random.default_rng(7)
    n, k = 25, 3
    w = ps.random("w", (n, k), seed=5, low=-1, high=1, dtype="float64", block_shape=(6, k))
    ref = Reference(rule, fn, init, w.get())
    opt = rule.attach(ps, w)
    assert fusable(opt, "rows")
    for _ in range(20):
        keys, pull = _sorted_keys(rng, n, 8), _sorted_keys(rng, n, 8)
        g = rng.normal(size=(keys.shape[0], k))
        [got] = step_pull_async(opt, [g], [keys], [pull], axis="rows").result()
        ref.step((keys[:, None] * k + np.arange(k)).ravel(), g.ravel())
        np.testing.assert_allclose(got, ref.w.reshape(n, k)[pull], rtol=1e-12, atol=1e-15)
    check(opt, ref)


def test_float32_weights_take_a_cast_gradient(ps):
    w = ps.zeros("w", (20,), dtype="float32", block_shape=(6,))
    opt = ops.SGD(lr=0.5).attach(ps, w)
    with pytest.raises(angel.errors.CastingError, match="float64"):
        step_pull_async(opt, [np.ones(2)], [[1, 2]], [[0]]).result()
    [got] = step_pull_async(opt, [np.ones(2)], [[1, 2]], [[0, 2, 19]], casting="same_kind").result()
    assert got.dtype == np.float32 and got.tolist() == [0.0, -0.5, 0.0]


def test_rejected_input_leaves_the_weights_and_state_unchanged(ps):
    w = ps.random("w", (30,), seed=1, dtype="float64", block_shape=(8,))
    opt = ops.AdaGrad(lr=0.1, initial_accumulator=0.1).attach(ps, w)
    w0, h0 = w.get(), opt.state["h"].get()
    bad = [
        (InvalidArgumentError := angel.errors.InvalidArgumentError, ([1.0, 1.0], [3, 2], [0])),
        (InvalidArgumentError, ([1.0, 1.0], [2, 2], [0])),  # a repeated key
        (InvalidArgumentError, ([1.0], [30], [0])),  # outside the array
        (InvalidArgumentError, ([1.0], [1], [-1])),
        (InvalidArgumentError, ([1.0], [1], [5, 4])),  # pull not increasing
        (InvalidArgumentError, ([1.0, 2.0], [1], [0])),  # one gradient per key
        (InvalidArgumentError, ([1.0], [[1]], [0])),
        (angel.errors.NonFiniteError, ([np.nan], [1], [0])),
    ]
    for err, (g, keys, pull) in bad:
        with pytest.raises(err):
            step_pull_async(opt, [np.asarray(g, dtype=np.float64)], [keys], [pull]).result()
    with pytest.raises(InvalidArgumentError, match="one gradient per key list"):
        step_pull_async(opt, [np.ones(1), np.ones(1)], [[1]], [])
    # a request that passes the caller but fails on a server (a local key outside a
    # block) is refused there before anything is committed, on every server
    func = StepPull(
        "daskangel.ops._rules:AdaGrad",
        opt.optimizer.hyper(),
        {
            0: {"k": [np.array([1])], "g": [np.ones(1)]},
            3: {"k": [np.array([99])], "g": [np.ones(1)]},
        },
        axis="cols",
        where=[],
    )
    with pytest.raises(angel.errors.PSFError, match="local index outside"):
        w.psf(func, opt.state["h"])
    np.testing.assert_array_equal(w.get(), w0)
    np.testing.assert_array_equal(opt.state["h"].get(), h0)


def test_layouts_and_rules_it_cannot_serve_are_refused_by_name(ps):
    h = ps.zeros("wh", (50,), dtype="float64", partitioner=HashPartitioner(n_blocks=3), sparse=True)
    opt = ops.SGD(lr=0.1).attach(ps, h)
    assert not fusable(opt, "cols")
    with pytest.raises(angel.errors.InvalidArgumentError, match="range-partitioned"):
        step_pull_async(opt, [np.ones(1)], [[1]], [[2]])
    m = ps.zeros("wm", (6, 4), dtype="float64", block_shape=(3, 2))
    assert not fusable(ops.SGD(lr=0.1).attach(ps, m), "rows")  # two column blocks
    v = ps.zeros("wv", (10,), dtype="float64", block_shape=(5,))
    assert not fusable(ops.AdaRevision(lr=0.1).attach(ps, v), "cols")  # needs versions


def test_step_pull_from_dask_tasks_on_worker_processes(ps, client):
    w = ps.zeros("w", (100,), dtype="float64", block_shape=(30,))
    opt = ops.SGD(lr=1.0).attach(ps, w)

    def task(opt, i):
        keys = np.arange(10 * i, 10 * i + 10)
        return step_pull_async(opt, [np.ones(10)], [keys], [keys[::3]]).result()

    got = client.gather(client.map(task, [opt] * 10, range(10)))
    for [r] in got:
        np.testing.assert_array_equal(r, -np.ones(4))  # each task reads its own step
    np.testing.assert_array_equal(w.get(), -np.ones(100))


@pytest.mark.parametrize("name", ["AdaGrad", "Adam", "FTRL"])
def test_several_steps_in_one_message_apply_in_order_and_the_pulls_read_them_all(ps, name):
    rule, fn, init = CASES[name]
    rng = np.random.default_rng(11)
    n = 30
    w = ps.random("w", (n,), seed=2, low=-1, high=1, dtype="float64", block_shape=(8,))
    ref = Reference(rule, fn, init, w.get())
    opt = rule.attach(ps, w)
    for m in (0, 1, 2, 3, 5, 2):
        keys = [_sorted_keys(rng, n, 10) for _ in range(m)]
        keys[:1] = [np.arange(n)[::2]] if m else []  # overlapping key lists
        grads = [rng.normal(size=k.shape[0]) for k in keys]
        pulls = [_sorted_keys(rng, n, 10) for _ in range(int(rng.integers(0, 4)))]
        got = step_pull_async(opt, grads, keys, pulls).result()
        for k, g in zip(keys, grads, strict=True):
            ref.step(k, g)
        assert len(got) == len(pulls)
        for pk, v in zip(pulls, got, strict=True):
            np.testing.assert_allclose(v, ref.w[pk], rtol=1e-12, atol=1e-15)
    check(opt, ref)


@pytest.mark.parametrize("seed", range(5))
def test_patch_sorted_matches_a_searchsorted_patch(seed):
    from daskangel.ops._kernels import patch_sorted

    rng = np.random.default_rng(seed)
    for _ in range(100):
        keys = _sorted_keys(rng, 60, 25)
        at = _sorted_keys(rng, 60, 25)
        vals = rng.normal(size=(keys.shape[0], 3))
        got = rng.normal(size=(at.shape[0], 3))
        want = got.copy()
        for i, a in enumerate(at):
            hit = np.flatnonzero(keys == a)
            if hit.size:
                want[i] = vals[hit[0]]
        patch_sorted(keys, vals, at, got)
        np.testing.assert_array_equal(got, want)


def test_a_hand_made_step_on_unsorted_keys_reads_back_what_it_wrote(ps):
    """The caller sends increasing keys; a psf built by hand with unsorted ones is
    stepped (once per key) and its pull still reads the values it wrote."""
    w = ps.zeros("w", (12,), dtype="float64", block_shape=(12,))
    opt = ops.SGD(lr=1.0).attach(ps, w)
    func = StepPull(
        "daskangel.ops._rules:SGD",
        opt.optimizer.hyper(),
        {
            0: {
                "k": [np.array([7, 2, 5])],
                "g": [np.array([1.0, 2.0, 3.0])],
                "p": [[0, np.arange(12)]],
            }
        },
        axis="cols",
        where=[(12, [(0, slice(0, 12))])],
    )
    [got] = w.psf(func)
    want = np.zeros(12)
    want[[7, 2, 5]] = [-1.0, -2.0, -3.0]
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(w.get(), want)
