"""The fast paths of issue 2's performance work, each against a NumPy model.

* reading a get's blocks straight into the output array (``daskangel._recv``),
  over real comms, including replies whose frames do not match what was expected;
* packed sparse increments (``pack_by_bounds`` on the caller, ``update_packed`` on
  the blocks);
* the exponent-bit finite check.
"""

from __future__ import annotations

import gc
import weakref
from typing import Any

import dask
import numpy as np
import pytest
import scipy.sparse as sp
from distributed import Client
from distributed.protocol import to_serialize
from hypothesis import given, settings
from hypothesis import strategies as st

import daskangel as angel
from daskangel._compat import workers_info
from daskangel._recv import landed, match_frames, send_recv_into
from daskangel._wire import unwrap_arrays, wrap_arrays
from daskangel.errors import ShapeMismatchError
from daskangel.psarray import InitSpec
from daskangel.psarray import _kernels as K
from daskangel.psarray import _packed as P
from daskangel.psarray._blocks import DenseBlock, SparseBlock

TRANSPORTS = ["handlers", "actors"]


# -- kernels and blocks (no cluster) ------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(0, 999), max_size=300),
    st.lists(st.integers(1, 998), max_size=4, unique=True),
    st.sampled_from(["float32", "int32"]),
    st.booleans(),
)
def test_pack_by_bounds_groups_and_packs_like_numpy(
    cols: list[int], cuts: list[int], dtype: str, split: bool
) -> None:
    idx = np.array(cols, dtype=np.int64)
    bounds = np.array([0, *sorted(cuts), 1000], dtype=np.int64)
    vals = (np.arange(idx.shape[0]) - 7).astype(dtype)
    starts, packed = P.pack_by_bounds(idx, vals.view(np.uint32), bounds, split)
    for g in range(bounds.shape[0] - 1):
        mine = (idx >= bounds[g]) & (idx < bounds[g + 1])
        got = packed[starts[g] : starts[g + 1]]
        np.testing.assert_array_equal(got >> P.PACK_SHIFT, idx[mine] - bounds[g])
        bits = (got & 0xFFFFFFFF).astype(np.uint32).view(dtype)
        np.testing.assert_array_equal(bits, vals[mine])


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(-5, 1004), min_size=1, max_size=300),
    st.lists(st.integers(1, 998), max_size=3, unique=True),
)
def test_scan_counts_is_the_range_and_the_counts_in_one_pass(
    cols: list[int], cuts: list[int]
) -> None:
    from daskangel.psarray._packkernels import scan_counts

    idx = np.array(cols, dtype=np.int64)
    bounds = np.array([0, *sorted(cuts), 1000], dtype=np.int64)
    lo, hi, counts = scan_counts(idx, bounds)
    assert (lo, hi) == (idx.min(), idx.max())
    inside = idx[(idx >= 0) & (idx < 1000)]
    if inside.size == idx.size:  # (out of range: the caller checks the general way)
        np.testing.assert_array_equal(counts, P.count_by_bounds(idx, bounds))
        np.testing.assert_array_equal(counts, np.histogram(idx, bounds)[0])


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 49), st.integers(-3, 3)), max_size=200),
    st.sampled_from(["float32", "int32"]),
    st.integers(0, 2),
    st.booleans(),
)
def test_update_packed_adds_like_numpy(
    entries: list[tuple[int, int]], dtype: str, row: int, lazy: bool
) -> None:
    cols = np.array([c for c, _ in entries], dtype=np.int64)
    vals = np.array([v for _, v in entries], dtype=dtype)
    _, packed = P.pack_by_bounds(cols, vals.view(np.uint32), np.array([0, 50], np.int64))
    init = InitSpec("uniform", 0.0, 1.0, seed=3, lazy=True) if lazy else InitSpec()
    sparse = SparseBlock((3, 50), np.dtype(dtype), init=init, n_cols=50)
    before = sparse.get(None, None).copy() if lazy else np.zeros((3, 50), dtype)
    dense = DenseBlock(np.zeros((3, 50), dtype))
    sparse.update_packed(row, packed.copy())
    sparse.update_packed(row, packed.copy())  # existing keys the second time
    dense.update_packed(row, packed.copy())
    model = before.copy()
    np.add.at(model[row], cols, vals)
    np.add.at(model[row], cols, vals)
    # float32 sums in another order differ in the last bits (the lazy initial values
    # are fractions; up to 400 adds of |v| <= 3 reach ~1e3, where an ulp is ~1e-4)
    np.testing.assert_allclose(sparse.get(None, None), model, rtol=1e-6, atol=1e-3)
    once = np.zeros((3, 50), dtype)
    np.add.at(once[row], cols, vals)
    np.testing.assert_allclose(dense.get(None, None), once, rtol=1e-6, atol=1e-3)


@settings(max_examples=40, deadline=None)
@given(
    st.integers(0, 20_000),
    st.sampled_from([1, 50, 2**11, 2**22, 2**31 - 1]),
    st.integers(0, 2**32 - 1),
)
def test_sort_by_key_orders_keys_stably_at_any_length(n: int, top: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    keys = rng.integers(0, top + 1, n).astype(np.int64)
    keys[: min(n, 2)] = [0, top][: min(n, 2)]  # both ends of the key range
    low = np.arange(n, dtype=np.int64)  # the value bits: where each entry came from
    packed = (keys << P.PACK_SHIFT) | low
    got = P.sort_by_key(packed.copy())
    np.testing.assert_array_equal(got >> P.PACK_SHIFT, np.sort(keys))
    if n >= 4096:  # the radix path keeps entries of one key in input order
        order = np.argsort(keys, kind="stable")
        np.testing.assert_array_equal(got & 0xFFFFFFFF, low[order])
    u, v = P.unpack_reduce(packed.copy(), np.dtype("int32"), offset=5)
    want_keys, want_counts = np.unique(keys, return_counts=True)
    np.testing.assert_array_equal(u, want_keys + 5)
    # int32 value bits of entry i are i itself: each key sums the positions it had
    sums = np.zeros(want_keys.size, np.int64)
    np.add.at(sums, np.searchsorted(want_keys, keys), low)
    np.testing.assert_array_equal(v, sums.astype(np.int32))
    assert want_counts.sum() == n


@pytest.mark.parametrize("split", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_all_finite_finds_every_non_finite_entry(dtype: str, bad: float, split: bool) -> None:
    a = np.linspace(-1e3, 1e3, 10_001).astype(dtype)
    a[0], a[1] = np.finfo(dtype).max, np.finfo(dtype).tiny
    assert K.all_finite(a, split) and K.all_finite(a[::3], split)
    for pos in (0, 4095, 4096, 5000, 10_000):
        b = a.copy()
        b[pos] = bad
        assert not K.all_finite(b, split)
        assert K.all_finite(b[::3], split) == (pos % 3 != 0)


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(["float32", "float64", "int32", "int64", "uint8", "bool"]),
    st.lists(st.integers(0, 6), max_size=3),
    st.integers(0, 64),
)
def test_wrapped_arrays_come_back_equal_and_writeable(
    dtype: str, shape: list[int], inline: int
) -> None:
    a = (np.arange(int(np.prod(shape))) % 5).astype(dtype).reshape(shape)
    msg = {"parts": [{"values": a, "rows": None}], "n": np.int64(3), "t": (a,)}
    wrapped = wrap_arrays(msg, inline)
    inlined = a.nbytes <= inline
    assert isinstance(wrapped["parts"][0]["values"], dict) == inlined
    back = unwrap_arrays(wrapped)
    if inlined:
        got = back["parts"][0]["values"]
        assert got.dtype == a.dtype and got.shape == a.shape and got.flags.writeable
        np.testing.assert_array_equal(got, a)
        np.testing.assert_array_equal(back["t"][0], a)
    assert back["n"] == 3 and back["parts"][0]["rows"] is None


def test_match_frames_pairs_parts_with_frames_of_their_exact_size() -> None:
    # frames: [header, sub-header, data0, sub-header, data1]
    t0, t1 = np.empty(100, "u1"), np.empty(300, "u1")
    lengths = (60, 40, 100, 40, 300)
    assert match_frames(lengths, [100, 300], [t0, t1]) == {2: t0, 4: t1}
    assert match_frames(lengths, [100, 300], [None, t1]) == {4: t1}
    assert match_frames(lengths, [0, 300], [None, t1]) == {4: t1}
    assert match_frames(lengths, [100, 200], [t0, None]) == {}  # a part found no frame


# -- over real comms ---------------------------------------------------------------


def test_send_recv_into_lands_frames_in_place_and_copes_with_surprises(
    client: Client,
) -> None:
    def setup(dask_worker: Any) -> None:
        def arrays(sizes: list[int] = ()) -> Any:  # type: ignore[assignment]
            return [to_serialize(np.full(n, i + 1, "float32")) for i, n in enumerate(sizes)]

        dask_worker.handlers["test_arrays"] = arrays

    client.run(setup)
    addr = next(iter(workers_info(client)))

    async def call(sizes: list[int], expect: list[int], targets: list[Any]) -> Any:
        pool = client.rpc  # a ConnectionPool
        return await send_recv_into(
            pool, addr, "test_arrays", {"sizes": sizes}, [4 * n for n in expect], targets
        )

    out = np.zeros(50_000, "float32")
    a, b = out[:20_000], out[20_000:]
    res = client.sync(call, [20_000, 30_000], [20_000, 30_000], [a, b])
    assert landed(res[0], a) and landed(res[1], b)
    np.testing.assert_array_equal(out[:20_000], 1)
    np.testing.assert_array_equal(out[20_000:], 2)
    # the reply is not what was expected: nothing lands, values are still right
    out[:] = 0
    res = client.sync(call, [30_000, 20_000], [20_000, 30_000], [a, b])
    assert not landed(res[0], a) and not landed(res[1], b)
    assert res[0].shape == (30_000,) and (res[0] == 1).all() and (res[1] == 2).all()
    # the comm went back to the pool in a usable state
    res = client.sync(call, [20_000], [20_000], [a])
    assert landed(res[0], a)


@pytest.fixture(scope="module", params=TRANSPORTS)
def ctx(request: Any, client: Client) -> Any:
    with angel.PSContext(client, transport=request.param) as ps:
        yield ps


@pytest.mark.parametrize("limit", ["1B", "64KiB"])
def test_large_gets_read_in_place_equal_the_model(ctx: angel.PSContext, limit: str) -> None:
    rng = np.random.default_rng(0)
    cases = [
        ((1, 300_000), None),  # a long vector in column blocks
        ((3_000, 40), angel.RangePartitioner(700)),  # whole-row blocks
        ((300, 500), angel.BlockPartitioner((128, 200))),  # not contiguous: copied
    ]
    with dask.config.set({"daskangel.client.direct-read-bytes": limit}):
        for k, (shape, part) in enumerate(cases):
            model = rng.standard_normal(shape).astype("float32")
            arr = ctx.from_array(f"big{k}", model, partitioner=part)
            try:
                np.testing.assert_array_equal(arr.get(), model)
                np.testing.assert_array_equal(arr.get_async().result(), model)
                np.testing.assert_array_equal(arr.get(rows=slice(1, shape[0])), model[1:])
                if shape[0] > 1:
                    np.testing.assert_array_equal(arr.get(rows=2), model[2])
                cols = rng.integers(0, shape[1], 5)
                np.testing.assert_array_equal(arr.get(cols=cols), model[:, cols])
                arr.increment(np.ones(shape, "float32"))
                np.testing.assert_array_equal(arr.get(), model + 1)
            finally:
                ctx.drop(f"big{k}")


def test_a_large_gets_output_is_freed_as_soon_as_the_caller_drops_it(
    ctx: angel.PSContext,
) -> None:
    """No reference cycle may hold a get's output (or an increment's values) until
    the next garbage collection: every large get would then page-fault fresh
    memory, which cost 5x the transfer itself on the benchmark VM."""
    arr = ctx.zeros("freed", (1, 300_000), dtype="float32")
    try:
        arr.get()  # warm: metadata, connections
        gc.collect()
        gc.disable()
        try:
            got = arr.get()
            assert got.base is not None and len(arr.blocks) > 1
            out = weakref.ref(got.base)
            del got
            assert out() is None, "a get's output outlived the call"
            got = arr.get_async().result()
            out = weakref.ref(got.base)
            del got
            assert out() is None, "a get_async's output outlived the call"
            vals = np.ones((1, 300_000), "float32")
            held = weakref.ref(vals)
            arr.increment(vals)
            del vals
            assert held() is None, "an increment's values outlived the call"
        finally:
            gc.enable()
        np.testing.assert_array_equal(arr.get(), 1)
    finally:
        ctx.drop("freed")


@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_packed_sparse_increments_equal_the_model(ctx: angel.PSContext, dtype: str) -> None:
    rng = np.random.default_rng(1)
    n = 10**7
    s = ctx.zeros(f"sv{dtype}", (n,), dtype=dtype, sparse=True)
    m = ctx.zeros(f"sm{dtype}", (4, 1000), dtype=dtype, sparse=True)
    try:
        keys = rng.integers(0, n, 20_000)
        vals = rng.integers(-3, 4, keys.size).astype(dtype)
        s.increment(vals, cols=keys)
        s.increment(vals, cols=keys)
        s.increment(np.array(2, dtype), cols=keys[:10])  # broadcast scalar
        model: dict[int, float] = {}
        for kk, v in zip(
            keys.tolist() * 2 + keys[:10].tolist(), [*vals, *vals, *[2] * 10], strict=True
        ):
            model[kk] = model.get(kk, 0) + v
        probe = np.array(sorted(model), dtype=np.int64)
        np.testing.assert_allclose(s.get(cols=probe), [model[k] for k in probe.tolist()])
        # one row of a matrix, by int and by a one-element list
        dense = np.zeros((4, 1000), dtype)
        c = rng.integers(0, 1000, 500)
        v = rng.integers(-3, 4, 500).astype(dtype)
        m.increment(v, rows=2, cols=c)
        m.increment(v[None, :], rows=[3], cols=c)
        np.add.at(dense[2], c, v)
        np.add.at(dense[3], c, v)
        np.testing.assert_allclose(m.get(), dense)
        with pytest.raises(ShapeMismatchError):
            m.increment(v[:, None], rows=[3], cols=c)
    finally:
        ctx.drop(f"sv{dtype}")
        ctx.drop(f"sm{dtype}")


def test_packed_and_general_paths_agree_with_lazy_init(ctx: angel.PSContext) -> None:
    rng = np.random.default_rng(2)
    a = ctx.random("lazy_a", (10**8,), sparse=True, seed=5)  # keys drawn on first touch
    b = ctx.random("lazy_b", (10**8,), sparse=True, seed=5)
    try:
        keys = rng.integers(0, 10**8, 5_000)
        vals = rng.standard_normal(keys.size).astype("float32")
        a.increment(vals, cols=keys)  # packed
        b.increment(sp.coo_matrix((vals, (np.zeros_like(keys), keys)), shape=(1, 10**8)))
        probe = np.concatenate([keys, rng.integers(0, 10**8, 100)])
        np.testing.assert_allclose(a.get(cols=probe), b.get(cols=probe), rtol=1e-5)
    finally:
        ctx.drop("lazy_a")
        ctx.drop("lazy_b")


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.integers(0, 199), max_size=120),
    st.lists(st.integers(1, 199), max_size=6),
    st.booleans(),
)
def test_plan_axis_cuts_sorted_indices_like_it_groups_any(
    idx: list[int], cuts: list[int], sort: bool
) -> None:
    """Sorted indices are cut into slices by block bounds; the plan puts every index in
    its block, at its position, exactly as the general grouping does."""
    from daskangel.psarray._layout import Layout
    from daskangel.psarray._routing import plan_axis

    a = np.sort(np.asarray(idx, np.int64)) if sort else np.asarray(idx, np.int64)
    bounds = (0, *sorted(set(cuts)), 200)
    lay = Layout((1, 200), (0, 1), "range", bounds, len(bounds) - 1)
    plan = plan_axis(lay, "cols", a, 200)
    got = np.full(a.shape[0], -1, np.int64)
    for g, loc, out in zip(plan.blocks, plan.local, plan.out, strict=True):
        assert loc is not None
        assert ((loc >= 0) & (loc < bounds[g + 1] - bounds[g])).all()
        got[out] = loc + bounds[g]
    np.testing.assert_array_equal(got, a)
    assert plan.blocks == sorted(plan.blocks)
    if sort:
        assert all(isinstance(o, slice) for o in plan.out)


def test_packed_increments_check_int64_columns_in_their_scan(ps: angel.PSContext) -> None:
    """An int64 index of a sparse vector is range-checked in the pass that counts
    it by block: out of range it names the index and its position, as the general
    check does, and nothing is added."""
    v = ps.zeros("scan", (10**6,), dtype="float32", sparse=True)
    for bad, at in ((10**6, 1), (-1, 2)):
        cols = np.array([3, 7, 9, 11], np.int64)
        cols[at] = bad
        with pytest.raises(
            angel.errors.PSIndexError, match=rf"cols: index {bad} \(at position {at}\)"
        ):
            v.increment(np.ones(4, "float32"), cols=cols)
    cols = np.arange(0, 10**6, 7, dtype=np.int64)[::-1]
    v.increment(np.ones(cols.size, "float32"), cols=cols)
    np.testing.assert_array_equal(v.get(cols=[0, 7, 999_998, 3]), [1, 1, 0, 0])
    assert v.get(cols=cols).sum() == cols.size
