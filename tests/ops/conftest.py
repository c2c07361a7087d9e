"""Fixtures and builders for psf tests: arrays of known values on chosen layouts."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pytest
import scipy.sparse
from distributed import Client
from hypothesis import strategies as st

import daskangel as angel
from daskangel import BlockPartitioner, HashPartitioner


@pytest.fixture(scope="module")
def mps(client: Client) -> Iterator[angel.PSContext]:
    """One PSContext for a whole module (Hypothesis examples reuse it)."""
    with angel.PSContext(client) as ctx:
        yield ctx


@dataclass(frozen=True)
class Layout:
    """How a test array is stored: dense / sparse range blocks / sparse hash blocks."""

    rows: int
    cols: int
    ndim: int
    kind: str  # "dense" | "sparse" | "hash"
    block: tuple[int, int]
    n_hash: int
    dtype: str

    @property
    def shape(self) -> tuple[int, ...]:
        return (self.cols,) if self.ndim == 1 else (self.rows, self.cols)

    def partitioner(self):
        if self.kind == "hash":
            return HashPartitioner(n_blocks=self.n_hash, block_rows=self.block[0])
        return BlockPartitioner(self.block)


@st.composite
def layouts(draw, kinds=("dense", "sparse", "hash"), dtypes=("float64",), max_rows=5, max_cols=30):
    ndim = draw(st.sampled_from([1, 2]))
    rows = 1 if ndim == 1 else draw(st.integers(1, max_rows))
    cols = draw(st.integers(1, max_cols))
    kind = draw(st.sampled_from(kinds))
    block = (draw(st.integers(1, rows)), draw(st.integers(1, cols)))
    n_hash = draw(st.integers(1, 4))
    return Layout(rows, cols, ndim, kind, block, n_hash, draw(st.sampled_from(dtypes)))


@dataclass
class Built:
    arr: angel.PSArray
    ref: np.ndarray  # what the array holds, shaped like the array (1-D or 2-D)


def values_for(lay: Layout, seed: int, low: float = -3.0, high: float = 3.0) -> tuple:
    """Random values, a mask of stored entries (for sparse) and a default."""
    rng = np.random.default_rng(seed)
    vals = rng.uniform(low, high, size=(lay.rows, lay.cols))
    if low <= 0:
        vals[rng.random(vals.shape) < 0.15] = 0.0
    if np.dtype(lay.dtype).kind in "iu":
        vals = np.round(vals * 3)
    mask = rng.random(vals.shape) < 0.4
    default = float(rng.choice([0.0, 0.0, 1.5 if np.dtype(lay.dtype).kind == "f" else 2.0]))
    if low > 0:
        default = low + abs(default)
    return vals.astype(lay.dtype), mask, default


def build(
    ps: angel.PSContext,
    lay: Layout,
    seed: int,
    like: angel.PSArray | None = None,
    low: float = -3.0,
    high: float = 3.0,
) -> Built:
    """An array with random values on ``lay`` (co-partitioned with ``like`` if given)."""
    vals, mask, default = values_for(lay, seed, low, high)
    name = f"t-{uuid.uuid4().hex[:10]}"
    if lay.kind == "dense":
        arr = (
            ps.zeros_like(like, name, dtype=lay.dtype)
            if like is not None
            else ps.zeros(name, lay.shape, lay.dtype, partitioner=lay.partitioner())
        )
        arr.set(vals if lay.ndim == 2 else vals[0], casting="same_kind")
        ref = vals.copy()
    else:
        if like is not None:
            arr = ps.full_like(like, default, name, dtype=lay.dtype)
        else:
            arr = ps.full(
                name, lay.shape, default, lay.dtype, partitioner=lay.partitioner(), sparse=True
            )
        rr, cc = np.nonzero(mask)
        if rr.size:
            coo = scipy.sparse.coo_matrix((vals[rr, cc], (rr, cc)), shape=vals.shape)
            arr.set(coo, casting="same_kind")
        ref = np.full(vals.shape, default, dtype=lay.dtype)
        ref[rr, cc] = vals[rr, cc]
    return Built(arr, ref if lay.ndim == 2 else ref[0])


def drop(ps: angel.PSContext, *built: Built) -> None:
    for b in built:
        ps.drop(b.arr.name)
