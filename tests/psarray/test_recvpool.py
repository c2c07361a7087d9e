"""Updates whose values follow their request into reused server buffers.

* :class:`ReceivePool` on its own: alignment, reuse only once released, the cap;
* over real comms (2 worker processes): follow-path increments and sets equal a
  NumPy model, a worker's pool stops growing once warm, and a request the server
  rejects still consumes its values message (the comm stays usable).
"""

from __future__ import annotations

from typing import Any

import dask
import numpy as np
import pytest
import scipy.sparse as sp
from distributed import Client
from distributed.comm.core import CommClosedError
from hypothesis import given, settings
from hypothesis import strategies as st

import daskangel as angel
from daskangel._recv import send_recv_into
from daskangel._shm import ShmBuffers, ShmMaps, place, span
from daskangel._shm import supported as shm_supported
from daskangel._wire import call_server, split_follow
from daskangel.errors import InvalidArgumentError, NonFiniteError, StaleLayoutError
from daskangel.psarray._recvpool import ReceivePool, cut_fields, shm_frames

pytestmark = pytest.mark.timeout(300)


# -- the pool alone ----------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.integers(0, 5000), min_size=1, max_size=4), min_size=1, max_size=12))
def test_pool_hands_out_aligned_disjoint_views_and_reuses_only_released_buffers(
    requests: list[list[int]],
) -> None:
    pool = ReceivePool(limit=40_000)
    held: list[list[np.ndarray]] = []
    for k, sizes in enumerate(requests):
        views = pool.take(sizes)
        assert [v.nbytes for v in views] == sizes
        assert all(v.ctypes.data % 64 == 0 for v in views if v.nbytes)
        for v in views:
            v[:] = k % 251  # mark: no view handed out while held may see this
        held.append(views)
        if k % 3 == 2:
            held.pop(0)  # release the oldest request
        for j, vs in enumerate(held):
            tag = (k - len(held) + 1 + j) % 251
            for v in vs:
                assert (v == tag).all(), "a buffer still in use was handed out again"
        assert pool.nbytes <= pool.limit


def test_pool_reuses_a_released_buffer_and_keeps_to_its_limit() -> None:
    pool = ReceivePool(limit=10_000)
    a = pool.take([4000])
    size = pool.nbytes
    del a
    b = pool.take([4000])
    assert pool.nbytes == size  # reused, not grown
    c = pool.take([4000])  # b still held: a second buffer
    assert pool.nbytes == 2 * size
    d = pool.take([4000])  # over the limit while both are held: unpooled
    assert pool.nbytes == 2 * size and d[0].nbytes == 4000
    big = pool.take([20_000])  # larger than the limit: never pooled
    assert pool.nbytes == 2 * size and big[0].nbytes == 20_000
    del b, c, d, big


def test_split_follow_moves_only_the_bulk_arrays_of_large_updates() -> None:
    v = np.ones((1, 100_000), "float32")
    packed = np.arange(50_000, dtype=np.int64)
    parts = [
        {"block": 0, "rows": None, "cols": np.arange(8), "values": v},
        {"block": 1, "rows": np.array([0]), "packed": packed},
    ]
    with dask.config.set({"daskangel.client.follow-bytes": "256KiB"}):
        kw, frames = split_follow("update", {"array": "a", "parts": parts})
        # both under follow-pack-bytes: copied into one frame, 64-byte aligned
        assert kw["follow"]["frames"] == [frames[0].nbytes] and len(frames) == 1
        assert kw["follow"]["fields"] == [
            [0, "values", 0, 0, "<f4", [1, 100_000]],
            [1, "packed", 0, 400_000, "<i8", [50_000]],
        ]
        got = {(i, k): a for i, k, a in cut_fields(frames, kw["follow"]["fields"])}
        np.testing.assert_array_equal(got[0, "values"], v)
        np.testing.assert_array_equal(got[1, "packed"], packed)
        assert "values" not in kw["parts"][0] and "packed" not in kw["parts"][1]
        assert kw["parts"][0]["cols"] is parts[0]["cols"]  # index arrays stay in the request
        assert "values" in parts[0]  # the caller's dicts are left alone
        small = [{**parts[0], "values": v[:, :10]}]
        assert split_follow("update", {"parts": small})[1] == []
        assert split_follow("get", {"parts": parts})[1] == []
    with dask.config.set(
        {"daskangel.client.follow-bytes": "256KiB", "daskangel.client.follow-pack-bytes": "100KB"}
    ):
        kw, frames = split_follow("update", {"array": "a", "parts": parts})
        # each over the pack limit: frames of their own, never copied
        assert frames[0] is v and frames[1] is packed
        assert [f[2:4] for f in kw["follow"]["fields"]] == [[0, 0], [1, 0]]
    with dask.config.set({"daskangel.client.follow-bytes": 0}):
        assert split_follow("update", {"parts": small})[1] != []  # everything follows
        assert split_follow("update", {"parts": [{"block": 0}]})[1] == []  # nothing to move


_DTYPES = ["int32", "float32", "int64", "float64", "uint8", "int16"]


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["values", "packed", "csr_rows", "csr_len", "csr_cols", "coo_rows"]),
            st.sampled_from(_DTYPES),
            st.integers(0, 3000),
        ),
        min_size=1,
        max_size=10,
    ),
    st.sampled_from(["1B", "4KiB", "1MiB"]),
)
def test_split_follow_and_cut_fields_give_back_every_array(
    arrays: list[tuple[str, str, int]], pack: str
) -> None:
    """Whatever the mix of dtypes and sizes (packed or framed alone), the server's
    cut of the follow frames gives every part back its arrays, bit for bit, and
    each packed field starts on a 64-byte boundary of its frame."""
    rng = np.random.default_rng(len(arrays))
    parts: list[dict[str, Any]] = []
    for k, (field, dtype, n) in enumerate(arrays):
        a = (rng.standard_normal(n) * 1000).astype(dtype)
        if k % 3 == 0 or field in parts[-1]:
            parts.append({"block": k})
        parts[-1][field] = a
    alloc_calls: list[int] = []

    def alloc(nbytes: int) -> np.ndarray:
        alloc_calls.append(nbytes)
        return np.full(nbytes, 255, np.uint8)

    with dask.config.set(
        {"daskangel.client.follow-bytes": 1, "daskangel.client.follow-pack-bytes": pack}
    ):
        kw, frames = split_follow("update", {"parts": parts}, alloc)
    if sum(n * np.dtype(d).itemsize for _, d, n in arrays) == 0:
        assert frames == [] and "follow" not in kw  # under follow-bytes: one message
        return
    assert kw["follow"]["frames"] == [f.nbytes for f in frames]
    got = cut_fields(frames, kw["follow"]["fields"])
    assert len(got) == len(arrays)
    for i, field, a in got:
        want = parts[i][field]
        assert a.dtype == want.dtype and a.shape == want.shape
        np.testing.assert_array_equal(a, want)
        assert field not in kw["parts"][i]
    for _, _, _, offset, _, _ in kw["follow"]["fields"]:
        assert offset % 64 == 0
    assert len(alloc_calls) <= 1


@pytest.mark.parametrize(
    "fields",
    [
        [[0, "values", 0, 0, "O", [2]]],  # object pointers from bytes: never
        [[0, "values", 0, 0, "<f4", [100]]],  # past the frame's end
        [[0, "values", 0, -4, "<f4", [1]]],  # before its start
        [[0, "values", 1, 0, "<f4", [1]]],  # no such frame
        [[-1, "values", 0, 0, "<f4", [1]]],  # no such part
        [[0, "values", 0, 0, "<f4", [-1]]],  # a negative extent
        [[0, "values", 0, 0, "nonsense", [1]]],
        [[0, "values", 0]],
        "not a list",
    ],
)
def test_cut_fields_refuses_what_does_not_fit_its_frames(fields: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="follow: expected fields"):
        cut_fields([np.zeros(64, np.uint8)], fields)


@pytest.mark.skipif(not shm_supported(), reason="no memfd / /proc here")
def test_shm_frames_are_views_of_the_callers_buffer_inside_it() -> None:
    bufs = ShmBuffers(limit=4 << 20)
    frames = [np.arange(100, dtype=np.uint8), np.arange(7, dtype=np.uint8)]
    seg = bufs.take(span(frames))
    assert seg is not None
    follow = {
        "frames": [100, 7],
        "fields": [],
        "at": place(seg, frames),
        "shm": seg.desc(span(frames)),
    }
    got = shm_frames(ShmMaps(2), follow)
    assert got is not None
    for g, f in zip(got, frames, strict=True):
        np.testing.assert_array_equal(g, f)
    for at in ([0, 1 << 20], [-64, 0], [0]):
        with pytest.raises(InvalidArgumentError, match="do not lie in the shared buffer"):
            shm_frames(ShmMaps(2), {**follow, "at": at})
    wrong = [*seg.desc(span(frames))[:2], "ab" * 16, seg.desc(span(frames))[3]]
    assert shm_frames(ShmMaps(2), {**follow, "shm": wrong}) is None  # not this buffer


# -- over real comms ------------------------------------------------------------------


@pytest.fixture(scope="module")
def ctx(client: Client) -> Any:
    with angel.PSContext(client) as ps:
        yield ps


def _pool_bytes(dask_worker: Any) -> int:
    return int(dask_worker.plugins["daskangel-ps"].receive_pool.nbytes)


@pytest.mark.parametrize("follow", ["1B", "256KiB"])
def test_follow_path_updates_equal_the_model(ctx: angel.PSContext, follow: str) -> None:
    rng = np.random.default_rng(0)
    shape = (40, 30_000)  # 4.8 MB in float32: several blocks on both servers
    model = rng.standard_normal(shape).astype("float32")
    arr = ctx.from_array("follow", model)
    sv = ctx.zeros("follow_sparse", (10**9,), sparse=True)
    try:
        with dask.config.set({"daskangel.client.follow-bytes": follow}):
            for _ in range(3):
                v = rng.standard_normal(shape).astype("float32")
                arr.increment(v)
                model += v
            rows = rng.choice(shape[0], 7, replace=False)
            v = rng.standard_normal((7, shape[1])).astype("float32")
            arr.increment(v, rows=rows)
            model[rows] += v
            arr.set(np.full((2, shape[1]), 5, "float32"), rows=[0, 1])
            model[[0, 1]] = 5
            with pytest.raises(NonFiniteError):
                bad = np.ones(shape, "float32")
                bad[-1, -1] = np.nan
                arr.increment(bad)
            np.testing.assert_allclose(arr.get(), model, rtol=1e-5, atol=1e-5)
            # packed sparse pairs and coordinate parts follow too
            keys = rng.integers(0, 10**9, 200_000)
            vals = rng.standard_normal(keys.size).astype("float32")
            sv.increment(vals, cols=keys)
            sv.increment(vals, cols=keys)
            probe = np.unique(keys)
            want = np.zeros(probe.size, "float64")
            np.add.at(want, np.searchsorted(probe, keys), 2 * vals.astype("float64"))
            np.testing.assert_allclose(sv.get(cols=probe), want, rtol=1e-4, atol=1e-4)
            r = rng.integers(0, shape[0], 100_000)
            c = rng.integers(0, shape[1], 100_000)
            d = rng.standard_normal(r.size).astype("float32")
            arr.increment(sp.coo_matrix((d, (r, c)), shape=shape))
            np.add.at(model, (r, c), d)
            np.testing.assert_allclose(arr.get(), model, rtol=1e-4, atol=1e-4)
    finally:
        ctx.drop("follow")
        ctx.drop("follow_sparse")


def test_worker_pools_reuse_their_buffers(ctx: angel.PSContext, client: Client) -> None:
    n = 2_000_000
    arr = ctx.zeros("warm", (1, n), dtype="float32")
    try:
        per_call: dict[str, int] = {}
        for blk in arr.blocks:
            a = blk.server.address
            per_call[a] = per_call.get(a, 0) + blk.shape[1] * 4
        v = np.ones((1, n), "float32")
        for _ in range(20):
            arr.increment(v)
        arr.version_token()  # every queued add applied: buffers released
        pooled = client.run(_pool_bytes)
        for a, b in pooled.items():
            # 20 calls, each kept apart, would need 20x; write-behind overlaps a
            # receive with at most the apply or two before it
            assert 0 < b <= 4 * (per_call[a] + 64 * len(arr.blocks)), (a, b, per_call[a])
        np.testing.assert_array_equal(arr.get(), 20)
    finally:
        ctx.drop("warm")


def test_a_rejected_follow_request_leaves_the_comm_in_step(ctx: angel.PSContext) -> None:
    arr = ctx.zeros("step", (1, 1_000_000), dtype="float32")
    try:
        b = arr._binding
        blk = arr.blocks[0]
        v = np.ones(blk.shape, "float32")

        async def bogus_then_real() -> Any:
            pool = await b.pool()
            part = {"block": 10_000, "rows": None, "cols": None, "values": v}
            kw = {"array": "step", "parts": [part], "add": True}
            with pytest.raises(StaleLayoutError):  # no such block: rejected after reading
                await call_server(
                    pool, blk.server.address, blk.server.index, "update", "handlers", 0, kw
                )
            part = {**part, "block": blk.id}
            kw = {"array": "step", "parts": [part], "add": True}
            return await call_server(
                pool, blk.server.address, blk.server.index, "update", "handlers", 0, kw
            )

        with dask.config.set({"daskangel.client.follow-bytes": "1B"}):
            assert b.run(bogus_then_real) is True
        got = arr.get()[0]
        lo, hi = blk.cols
        np.testing.assert_array_equal(got[lo:hi], 1)
        np.testing.assert_array_equal(np.delete(got, np.s_[lo:hi]), 0)
    finally:
        ctx.drop("step")


def test_a_malformed_follow_closes_only_its_comm(ctx: angel.PSContext) -> None:
    arr = ctx.zeros("malformed", (1, 1_000), dtype="float32")
    try:
        b = arr._binding
        blk = arr.blocks[0]

        async def bogus() -> Any:
            pool = await b.pool()
            msg = {"ps_op": "update", "server": blk.server.index, "cost": 0, "array": "malformed"}
            msg |= {"parts": [{"block": blk.id}], "add": True, "follow": "not a dict"}
            return await send_recv_into(pool, blk.server.address, "daskangel_ps", msg, [], [])

        with pytest.raises((OSError, CommClosedError)):
            b.run(bogus)
        arr.increment(np.ones((1, 1_000), "float32"))  # the server still serves
        np.testing.assert_array_equal(arr.get(), 1)
    finally:
        ctx.drop("malformed")


def test_bad_follow_and_pool_sizes_name_their_key_and_change_nothing(
    ctx: angel.PSContext,
) -> None:
    arr = ctx.zeros("badkeys", (1, 2_000_000), dtype="float32")  # blocks on both servers
    try:
        assert len({blk.server for blk in arr.blocks}) == 2
        for key in ("follow-bytes", "inline-array-bytes", "align-bytes"):
            with (
                dask.config.set({f"daskangel.client.{key}": "lots"}),
                pytest.raises(InvalidArgumentError, match=f"{key}: expected a byte size"),
            ):
                arr.increment(np.ones((1, 2_000_000), "float32"))
            np.testing.assert_array_equal(arr.get(), 0)  # no server applied its part
        with (
            dask.config.set({"daskangel.server.receive-pool-bytes": "lots"}),
            pytest.raises(InvalidArgumentError, match="receive-pool-bytes: expected a byte size"),
        ):
            ReceivePool()
    finally:
        ctx.drop("badkeys")
