"""mypsfs.py - two psfs of your own (the worked example of docs/psf.md)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from daskangel import ops


@dataclass(frozen=True)
class RangeStats(ops.GetFunc):
    """Count and mean of the entries in [lo, hi] (dense arrays)."""

    lo: float = 0.0
    hi: float = 1.0

    def partition_get(self, part):  # on the server, once per block
        block = part.array  # read-only view of the block, no copy
        inside = block[(block >= self.lo) & (block <= self.hi)]
        return {"n": int(inside.size), "sum": float(inside.sum(dtype=np.float64))}

    def merge(self, partials, metas):  # on the caller, once
        n = sum(p["n"] for p in partials.values())
        total = sum(p["sum"] for p in partials.values())
        return n, (total / n if n else float("nan"))


@dataclass(frozen=True)
class ScaleRows(ops.UpdateFunc):
    """Multiply some rows by ``factor`` (dense or sparse arrays)."""

    rows: tuple[int, ...] = ()
    factor: float = 1.0

    def params(self):  # what travels to every server: only the factor ...
        return {"factor": self.factor}

    def split(self, metas):  # ... each block gets just its own rows, as local indices
        lay = metas[0].layout
        rows = np.unique(np.asarray(self.rows, dtype=np.int64))
        out = {}
        for b in range(lay.n_blocks):
            r0, r1 = lay.block_rows(b)
            mine = rows[(rows >= r0) & (rows < r1)] - r0
            if mine.size:
                out[b] = {"local_rows": mine}
        return out

    def partition_update(self, part, local_rows):
        if part.sparse:  # stored entries only; unstored ones keep reading the default
            r, _, _ = part.entries()
            hit = np.isin(r, local_rows)
            part.values[hit] *= self.factor
        else:
            part.data[local_rows] *= self.factor  # a staged copy, committed if all succeed
