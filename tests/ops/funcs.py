"""Functions and psfs registered from an importable test module (servers import it by name)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from daskangel import ops


@ops.register_function("tests.ops.funcs:plus_index")
def plus_index(x: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    return x + rows * 1000 + cols


@dataclass(frozen=True)
class CountAbove(ops.GetFunc):
    """Entries above a threshold: one count per block, summed on the caller."""

    threshold: float = 0.0

    def partition_get(self, part):
        return int((part.dense() > self.threshold).sum())

    def merge(self, partials, metas):
        return sum(partials.values())


@dataclass(frozen=True)
class AddOneFailOn(ops.UpdateFunc):
    """Adds 1 to every entry, but raises on one block (to test all-or-nothing)."""

    block: int = 0

    def partition_update(self, part):
        if part.sparse:
            part.values[:] += 1
            part.default = part.default + 1
        else:
            part.data[...] += 1
        if part.block == self.block:
            raise RuntimeError(f"boom on purpose in block {part.block}")


@dataclass(frozen=True)
class WriteReadOnly(ops.UpdateFunc):
    """Tries to write its second array, which is read-only (only the first is written)."""

    arity = (2, 2)

    def partition_update(self, x, y):
        x.data[...] = 1.0
        y.data[...] = 0.0


@dataclass(frozen=True)
class WrongShape(ops.GetFunc):
    """Declares a (3,) result but returns a scalar."""

    def partition_get(self, part):
        return 1.0

    def merge(self, partials, metas):
        return float(sum(partials.values()))

    def output(self, metas):
        return (3,), np.float64


@dataclass(frozen=True)
class L1RowNormalize(ops.RowMap):
    """Each row divided by its L1 norm (a RowMap helper example)."""

    def apply_rows(self, block, rows):
        return block / np.abs(block).sum(axis=1, keepdims=True)


@dataclass(frozen=True)
class SumSqDiff(ops.Reduce):
    """sum((x - y)^2) per row or in whole (a two-array Reduce helper example)."""

    n_inputs = 2
    axis: int | None = None

    def transform(self, x, y):
        d = x.astype(np.float64) - y
        return d * d


@dataclass(frozen=True)
class AddRowIndex(ops.ElementMapWithIndex):
    """x = x + global row index (an ElementMapWithIndex helper example)."""

    def apply(self, x, rows, cols):
        return x + rows


@dataclass(frozen=True)
class Lerp(ops.ZipMap):
    """a = (1 - t) a + t b (a two-array ZipMap helper example)."""

    t: float = 0.5

    def apply(self, a, b):
        return (1 - self.t) * a + self.t * b


def allow_pickled(flag: bool) -> None:
    import dask

    dask.config.set({"daskangel.ops.allow-pickled-psf": flag})


@dataclass(frozen=True)
class Snapshot(ops.GetFunc):
    """Every operand as a dense numpy array, read together in one call."""

    arity = (1, 16)

    def partition_get(self, *parts):
        return {"r0": parts[0].row0, "c0": parts[0].col0, "blocks": [p.dense() for p in parts]}

    def merge(self, partials, metas):
        out = [np.zeros(m.shape, m.dtype) for m in metas]
        for part in partials.values():
            r0, c0 = int(part["r0"]), int(part["c0"])
            for o, blk in zip(out, part["blocks"], strict=True):
                blk = np.asarray(blk)
                o[r0 : r0 + blk.shape[0], c0 : c0 + blk.shape[1]] = blk
        return out


@ops.register_function("tests.ops.funcs:zip_plus_index")
def zip_plus_index(a, b, rows, cols, scale=1.0):
    return a - b + scale * (rows * 100 + cols)


@ops.register_function("tests.ops.funcs:zip3_plus_index")
def zip3_plus_index(a, b, c, rows, cols):
    return a * b + c + rows - cols
