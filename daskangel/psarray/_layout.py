"""How a PSArray is cut into blocks: layouts and partitioners.

A :class:`Layout` is a grid.  Rows are always cut into ranges (``row_bounds``);
columns are cut into ranges (``col_bounds``) or spread by a hash of the column
index over ``n_col_blocks`` blocks (Angel's hash partitioning, for sparse key spaces
whose popular keys cluster).  Block ``(i, j)`` has id ``i * n_col_blocks + j``.

Partitioners turn ``(shape, itemsize, n_servers)`` into a Layout.  Angel's
RangePartitioner / ColumnRangePartitioner / HashPartitioner are here under the same
names; :class:`BlockPartitioner` takes an explicit block shape and
:class:`AutoPartitioner` is the default.

Example
-------
>>> lay = BlockPartitioner((2, 3)).layout((4, 7), itemsize=4, n_servers=2, sparse=False)
>>> lay.n_blocks, lay.block_shape(0), lay.block_shape(lay.n_blocks - 1)
(6, (2, 3), (2, 1))
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from .. import config
from ..errors import InvalidArgumentError, ShapeMismatchError

__all__ = [
    "AutoPartitioner",
    "BlockPartitioner",
    "ColumnRangePartitioner",
    "HashPartitioner",
    "Layout",
    "Partitioner",
    "RangePartitioner",
    "RowBoundsPartitioner",
    "hash_columns",
]

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def hash_columns(cols: np.ndarray, n: int) -> np.ndarray:
    """Block of each column under hash partitioning into ``n`` blocks (vectorised)."""
    h = cols.astype(np.uint64) * _GOLDEN  # wraps modulo 2**64 by design
    return ((h >> np.uint64(29)) % np.uint64(n)).astype(np.int64)


@dataclass(frozen=True, slots=True)
class Layout:
    """The block grid of one array.

    ``col_mode`` is ``"range"`` (``col_bounds`` has ``n_col_blocks + 1`` entries) or
    ``"hash"`` (column ``c`` lives in block column ``hash_columns(c)``; a block's
    local column key is the global column).
    """

    shape: tuple[int, int]
    row_bounds: tuple[int, ...]
    col_mode: str
    col_bounds: tuple[int, ...]
    n_col_blocks: int

    @property
    def n_row_blocks(self) -> int:
        return len(self.row_bounds) - 1

    @property
    def n_blocks(self) -> int:
        return self.n_row_blocks * self.n_col_blocks

    def block_rows(self, block: int) -> tuple[int, int]:
        """Global ``(start, stop)`` rows of a block."""
        i = block // self.n_col_blocks
        return self.row_bounds[i], self.row_bounds[i + 1]

    def block_cols(self, block: int) -> tuple[int, int]:
        """Global ``(start, stop)`` columns of a range block; ``(0, n_cols)`` for hash."""
        if self.col_mode == "hash":
            return 0, self.shape[1]
        j = block % self.n_col_blocks
        return self.col_bounds[j], self.col_bounds[j + 1]

    def block_shape(self, block: int) -> tuple[int, int]:
        """Shape of the block's local index space (hash blocks span every column)."""
        r0, r1 = self.block_rows(block)
        c0, c1 = self.block_cols(block)
        return r1 - r0, c1 - c0

    def row_block_of(self, rows: np.ndarray) -> np.ndarray:
        return np.searchsorted(np.asarray(self.row_bounds), rows, side="right") - 1

    def col_block_of(self, cols: np.ndarray) -> np.ndarray:
        if self.col_mode == "hash":
            return hash_columns(cols, self.n_col_blocks)
        return np.searchsorted(np.asarray(self.col_bounds), cols, side="right") - 1

    def to_dict(self) -> dict[str, Any]:
        return {
            "shape": list(self.shape),
            "row_bounds": list(self.row_bounds),
            "col_mode": self.col_mode,
            "col_bounds": list(self.col_bounds),
            "n_col_blocks": self.n_col_blocks,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Layout:
        return cls(
            shape=(int(d["shape"][0]), int(d["shape"][1])),
            row_bounds=tuple(int(x) for x in d["row_bounds"]),
            col_mode=str(d["col_mode"]),
            col_bounds=tuple(int(x) for x in d["col_bounds"]),
            n_col_blocks=int(d["n_col_blocks"]),
        )

    def describe(self) -> str:
        """One line naming the grid, used in error messages."""
        if self.col_mode == "hash":
            cols = f"{self.n_col_blocks} hash column blocks"
        else:
            cols = f"column bounds {_short(self.col_bounds)}"
        return f"row bounds {_short(self.row_bounds)}, {cols}"


def _short(bounds: tuple[int, ...]) -> str:
    if len(bounds) <= 8:
        return str(list(bounds))
    return f"[{bounds[0]}, {bounds[1]}, {bounds[2]}, ..., {bounds[-1]}] ({len(bounds) - 1} blocks)"


def _even_bounds(n: int, step: int) -> tuple[int, ...]:
    step = max(1, min(step, max(n, 1)))
    return tuple(list(range(0, n, step)) + [n]) if n > 0 else (0, 0)


class Partitioner(Protocol):
    """Anything with a ``layout`` method may be passed as ``partitioner=``."""

    def layout(
        self, shape: tuple[int, int], itemsize: int, n_servers: int, sparse: bool
    ) -> Layout: ...


def _check_shape(shape: tuple[int, int]) -> None:
    if shape[0] < 1 or shape[1] < 1:
        raise ShapeMismatchError(f"shape: expected positive extents, got {shape}")


@dataclass(frozen=True, slots=True)
class BlockPartitioner:
    """A regular grid of ``block_shape`` blocks (the last ones may be smaller)."""

    block_shape: tuple[int, int]

    def layout(self, shape: tuple[int, int], itemsize: int, n_servers: int, sparse: bool) -> Layout:
        _check_shape(shape)
        br, bc = int(self.block_shape[0]), int(self.block_shape[1])
        if br < 1 or bc < 1:
            raise ShapeMismatchError(
                f"block_shape: expected two positive integers, got {self.block_shape}"
            )
        cb = _even_bounds(shape[1], bc)
        return Layout(shape, _even_bounds(shape[0], br), "range", cb, len(cb) - 1)


@dataclass(frozen=True, slots=True)
class RangePartitioner:
    """Angel's row-range partitioning: blocks of ``block_rows`` full-width rows.

    With ``block_rows=None`` the rows are split into ``blocks_per_server * n_servers``
    ranges.
    """

    block_rows: int | None = None

    def layout(self, shape: tuple[int, int], itemsize: int, n_servers: int, sparse: bool) -> Layout:
        _check_shape(shape)
        br = self.block_rows
        if br is None:
            n = max(1, n_servers * int(config.get("daskangel.partition.blocks-per-server")))
            br = math.ceil(shape[0] / n)
        return BlockPartitioner((br, shape[1])).layout(shape, itemsize, n_servers, sparse)


@dataclass(frozen=True, slots=True)
class RowBoundsPartitioner:
    """Row ranges at given bounds (full-width blocks), e.g. cut on a model's own edges.

    ``row_bounds`` starts at 0, ends at the number of rows and increases
    strictly.  A GBDT's histogram array cuts its rows (bins) where features
    begin, so every block holds whole features.

    Example
    -------
    >>> RowBoundsPartitioner((0, 3, 10)).layout((10, 4), 8, 2, False).row_bounds
    (0, 3, 10)
    """

    row_bounds: tuple[int, ...]

    def layout(self, shape: tuple[int, int], itemsize: int, n_servers: int, sparse: bool) -> Layout:
        _check_shape(shape)
        rb = tuple(int(b) for b in self.row_bounds)
        if (
            len(rb) < 2
            or rb[0] != 0
            or rb[-1] != shape[0]
            or any(a >= b for a, b in itertools.pairwise(rb))
        ):
            raise InvalidArgumentError(
                f"row_bounds: expected increasing bounds from 0 to {shape[0]}, got {list(rb)}"
            )
        return Layout(shape, rb, "range", (0, shape[1]), 1)


@dataclass(frozen=True, slots=True)
class ColumnRangePartitioner:
    """Angel's column-range partitioning: blocks of ``block_cols`` columns, all rows."""

    block_cols: int | None = None

    def layout(self, shape: tuple[int, int], itemsize: int, n_servers: int, sparse: bool) -> Layout:
        _check_shape(shape)
        bc = self.block_cols
        if bc is None:
            n = max(1, n_servers * int(config.get("daskangel.partition.blocks-per-server")))
            bc = math.ceil(shape[1] / n)
        return BlockPartitioner((shape[0], bc)).layout(shape, itemsize, n_servers, sparse)


@dataclass(frozen=True, slots=True)
class HashPartitioner:
    """Angel's hash partitioning of the column space into ``n_blocks`` blocks.

    Only for sparse storage: a block holds whichever columns hash to it, keyed by
    their global index.  ``block_rows`` optionally cuts rows into ranges too.
    """

    n_blocks: int | None = None
    block_rows: int | None = None

    def layout(self, shape: tuple[int, int], itemsize: int, n_servers: int, sparse: bool) -> Layout:
        _check_shape(shape)
        if not sparse:
            raise InvalidArgumentError(
                "partitioner: HashPartitioner spreads columns by hash and needs "
                "sparse=True storage; use ColumnRangePartitioner for dense arrays"
            )
        n = self.n_blocks or max(
            1, n_servers * int(config.get("daskangel.partition.blocks-per-server"))
        )
        if n < 1:
            raise InvalidArgumentError(f"n_blocks: expected a positive integer, got {n}")
        rb = _even_bounds(shape[0], self.block_rows or shape[0])
        return Layout(shape, rb, "hash", (), int(n))


@dataclass(frozen=True, slots=True)
class AutoPartitioner:
    """The default: blocks of about 1-16 MiB, more blocks than servers.

    The target block size is the array's bytes over ``blocks-per-server`` times the
    number of servers, clamped to ``[min-block-bytes, max-block-bytes]``.  Rows are
    kept whole while a row fits in the target; wider rows are cut into column
    ranges, so a long vector's column blocks spread over every server.  Sparse
    arrays, whose stored size is unknown up front, get ``blocks-per-server`` blocks
    per server (like Angel's partitions-per-server setting), cut along columns for
    vectors.
    """

    def layout(self, shape: tuple[int, int], itemsize: int, n_servers: int, sparse: bool) -> Layout:
        _check_shape(shape)
        rows, cols = shape
        per = int(config.get("daskangel.partition.blocks-per-server"))
        if sparse:
            n = max(1, per * n_servers)
            if rows < n:
                n_col = min(cols, -(-n // rows))
                n_row = min(rows, max(1, -(-n // n_col)))
            else:
                n_row, n_col = n, 1
            return BlockPartitioner((math.ceil(rows / n_row), math.ceil(cols / n_col))).layout(
                shape, itemsize, n_servers, sparse
            )
        row_bytes = cols * itemsize
        total = rows * row_bytes
        lo = config.get_bytes("daskangel.partition.min-block-bytes")
        hi = config.get_bytes("daskangel.partition.max-block-bytes")
        target = min(max(total / max(1, per * n_servers), lo), hi)
        n_blocks = max(1, math.ceil(total / target))
        n_blocks = max(n_blocks, min(n_servers, rows * cols))
        if rows == 1:
            n_row, n_col = 1, min(cols, n_blocks)
        elif row_bytes <= target:
            n_row, n_col = min(rows, n_blocks), 1
        else:
            n_row, n_col = rows, min(cols, math.ceil(row_bytes / target))
        return BlockPartitioner((math.ceil(rows / n_row), math.ceil(cols / n_col))).layout(
            shape, itemsize, n_servers, sparse
        )
