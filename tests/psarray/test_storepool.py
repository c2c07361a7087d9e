"""Pooled sparse-store memory (``psarray/_storepool.py``): a freed store's chunk is
reused only once no array refers to it, the pool keeps its byte limit, and a sparse
block that grows, is refilled, copied and dropped while its memory cycles through
the pool keeps exactly the sums a dict model keeps (a Hypothesis state machine)."""

from __future__ import annotations

import gc

import dask
import numpy as np
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from daskangel.psarray import _packed as P
from daskangel.psarray._blocks import SparseBlock
from daskangel.psarray._storepool import pool_stats, store_arrays

pytestmark = pytest.mark.timeout(120)

F32 = np.dtype("float32")


def test_a_chunk_is_reused_only_when_no_array_refers_to_it() -> None:
    keys, vals = store_arrays(50_000, F32, min_bytes=0)
    assert keys.shape == vals.shape and keys.shape[0] >= 50_000
    assert not np.shares_memory(keys, vals)
    keys[:] = 7
    held = keys[10:20]  # a view outlives the store's arrays
    addr = keys.ctypes.data
    del keys, vals
    k2, _ = store_arrays(50_000, F32, min_bytes=0)
    assert k2.ctypes.data != addr  # still referred to: not handed out again
    k2[:] = -1
    assert (held == 7).all()
    del held
    gc.collect()
    k3, v3 = store_arrays(45_000, F32, min_bytes=0)  # fits the freed chunk (not 2x larger)
    assert k3.ctypes.data == addr
    assert v3.shape[0] >= 45_000 and k3.shape[0] == v3.shape[0]


def test_the_pool_keeps_its_limits() -> None:
    with dask.config.set({"daskangel.server.store-pool-bytes": "1MiB"}):
        a = store_arrays(40_000, F32, min_bytes=0)  # 480 kB: kept, older chunks let go
        del a
        assert 0 < pool_stats()["free_bytes"] <= 1 << 20
        kept = pool_stats()["free_bytes"]
        b = store_arrays(100_000, F32, min_bytes=0)  # 1.2 MB: over the limit, not kept
        del b
        assert pool_stats()["free_bytes"] == kept
    small_k, small_v = store_arrays(10, F32)  # under store-pool-min-bytes: plain arrays
    assert small_k.base is None and small_v.base is None
    big, _ = store_arrays(1_000_000, F32, min_bytes=0)
    del big
    tiny, _ = store_arrays(1_000, F32, min_bytes=0)  # a chunk over 2x the need is not used
    assert tiny.nbytes < 1_000_000 * 8


def _packed(cols: list[int], vals: list[int], dtype: np.dtype, width: int) -> np.ndarray:
    c = np.array(cols, np.int64)
    v = np.array(vals, dtype)
    return P.pack_by_bounds(c, v.view(np.uint32), np.array([0, width], np.int64))[1]


class SparseStoreMachine(RuleBasedStateMachine):
    """Two sparse blocks against dicts, every store in pooled chunks (no minimum size),
    so grown, refilled and dropped stores hand their memory to the next ones."""

    WIDTH = 2**20

    def __init__(self) -> None:
        super().__init__()
        self._cfg = dask.config.set({"daskangel.server.store-pool-min-bytes": 0})
        self._cfg.__enter__()
        self.blocks = [SparseBlock((1, self.WIDTH), F32) for _ in range(2)]
        self.models: list[dict[int, float]] = [{}, {}]
        self.defaults = [0.0, 0.0]  # what a key not stored yet reads (after a fill)
        self.copies: list[tuple[SparseBlock, dict[int, float]]] = []

    def teardown(self) -> None:
        self._cfg.__exit__(None, None, None)

    @rule(
        b=st.integers(0, 1),
        n=st.integers(1, 6_000),
        hot=st.integers(1, 2**20 - 1),
        seed=st.integers(0, 2**31 - 1),
    )
    def increment(self, b: int, n: int, hot: int, seed: int) -> None:
        """New and existing keys, duplicates inside the request (small integers:
        float32 sums exact in any order)."""
        rng = np.random.default_rng(seed)
        cols = rng.integers(0, hot + 1, n).tolist()
        vals = rng.integers(-3, 4, n).tolist()
        self.blocks[b].update_packed(0, _packed(cols, vals, F32, self.WIDTH))
        for c, v in zip(cols, vals, strict=True):
            self.models[b][c] = self.models[b].get(c, self.defaults[b]) + v

    @rule(b=st.integers(0, 1), cols=st.lists(st.integers(0, 2**20 - 1), max_size=300))
    def set_values(self, b: int, cols: list[int]) -> None:
        c = np.array(cols, np.int64)
        v = np.arange(c.shape[0], dtype=F32)
        self.blocks[b].update(None, c, v.reshape(1, -1), add=False)
        for col, val in zip(cols, v.tolist(), strict=True):
            self.models[b][col] = val

    @rule(b=st.integers(0, 1), n=st.integers(1, 5_000), seed=st.integers(0, 2**31 - 1))
    def increment_few_keys(self, b: int, n: int, seed: int) -> None:
        """Many entries, few keys (a new store is cut down to the keys' size)."""
        rng = np.random.default_rng(seed)
        cols = rng.integers(0, 40, n).tolist()
        vals = rng.integers(-3, 4, n).tolist()
        fresh = self.blocks[b].n == 0
        self.blocks[b].update_packed(0, _packed(cols, vals, F32, self.WIDTH))
        for c, v in zip(cols, vals, strict=True):
            self.models[b][c] = self.models[b].get(c, self.defaults[b]) + v
        k = len(set(cols))
        if fresh and 2 * k < n:  # at most a chunk twice what 1.25x growth asks for
            assert self.blocks[b].keys.shape[0] <= 2 * max(int(k * 1.25), k + 16)

    @rule(b=st.integers(0, 1))
    def copy(self, b: int) -> None:
        if len(self.copies) > 3:
            self.copies.pop(0)
        self.copies.append((self.blocks[b].copy(), dict(self.models[b])))

    @rule(b=st.integers(0, 1), value=st.sampled_from([0.0, 2.0]))
    def fill(self, b: int, value: float) -> None:
        self.blocks[b].fill(value)  # every key reads `value`; an add starts from it
        self.models[b] = {}
        self.defaults[b] = value

    @rule(b=st.integers(0, 1))
    def drop_and_recreate(self, b: int) -> None:
        self.blocks[b] = SparseBlock((1, self.WIDTH), F32)
        self.models[b] = {}
        self.defaults[b] = 0.0

    @invariant()
    def stores_match_the_models(self) -> None:
        pairs = [*zip(self.blocks, self.models, strict=True), *self.copies]
        for block, model in pairs:
            keys = np.array(sorted(model), np.int64)
            assert block.n == keys.shape[0]
            np.testing.assert_array_equal(block.keys[: block.n], keys)
            want = np.array([model[k] for k in keys.tolist()], F32)
            np.testing.assert_array_equal(block.vals[: block.n], want)


SparseStoreMachine.TestCase.settings = settings(
    max_examples=30, stateful_step_count=25, deadline=None
)
test_sparse_store_machine = SparseStoreMachine.TestCase
