"""A partition's rows for boosting: the split, the sketch pushed to the PS, the bin codes.

Both steps see the same seeded split of the partition (``_core.split_ids``):
training rows first (sorted, for sequential reads), validation rows after.

* :func:`sketch_partition` (one Dask task per partition, before training)
  summarises the training rows' features (``_sketch.local_summaries``), adds
  the summary to the PS sketch array as one sparse increment, and returns what
  the driver needs to know of the labels (rows, NaNs, classes, sums, a
  summary for medians).
* :func:`prepare` (in the training task) bins the rows once with the merged
  edges, in the layout the partition's density asks for, and keeps the result
  on the worker while the partition lives (``_core.PREPARED``), so a refit with
  the same edges skips it.

Example
-------
>>> from daskangel.data._batch import CSRBatch
>>> b = CSRBatch.from_arrays([0, 1, 2, 3], [0, 0, 0], [1.0, 2.0, 3.0], [0, 1, 0], 1)
>>> train, val = split(b.n_rows, 0, 0.0, 0)
>>> train.tolist(), val.tolist()
([0, 1, 2], [])
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from ... import config
from .._core._cache import PREPARED
from .._core._order import split_ids
from ._binning import BinSpec, DenseBins, SparseBins, bin_rows
from ._sketch import local_summaries, prune

__all__ = ["Rows", "prepare", "sketch_partition", "split"]


def split(n: int, index: int, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Sorted training and validation rows of a partition of ``n`` rows."""
    if fraction <= 0:
        return np.arange(n, dtype=np.int64), np.zeros(0, np.int64)
    train, val = split_ids(n, index=index, fraction=fraction, seed=seed)
    return np.sort(train).astype(np.int64), val.astype(np.int64)


def sketch_partition(
    part: Any,
    name: str,
    points: int,
    fraction: float,
    seed: int,
    zero_is_value: bool,
    classifier: bool,
) -> dict[str, Any]:
    """Push this partition's feature summaries to the sketch array; return label facts."""
    import scipy.sparse as sp

    from ...psarray import PSArray

    b = part.csr()
    train, _ = split(b.n_rows, part.index, fraction, seed)
    F = int(part.n_features)
    ptr, v, w = local_summaries(
        b.indptr, b.indices, b.data, train, F, zero_is_value, points,
        int(config.get("daskangel.gbdt.sketch-sample")),
    )  # fmt: skip
    if v.size:
        arr = PSArray(name)
        n_per = np.diff(ptr)
        feat = np.repeat(np.arange(F, dtype=np.int64), n_per)
        i = np.arange(v.size, dtype=np.int64) - np.repeat(ptr[:-1], n_per)
        col = 2 * (part.index * points + i)
        m = sp.coo_matrix(
            (
                np.concatenate([v, w]),
                (np.concatenate([feat, feat]), np.concatenate([col, col + 1])),
            ),
            shape=arr.shape,
        )
        arr.increment(m)
    y = np.asarray(b.labels, np.float64)
    nan = int(np.isnan(y).sum())
    yt = y[train]
    out: dict[str, Any] = {"rows": int(b.n_rows), "train": int(train.size), "nan": nan}
    if nan:
        return out
    if classifier:
        out["classes"] = np.unique(yt, return_counts=True)
    else:
        out["sum"] = float(yt.sum())
        s = np.sort(yt)
        uv, cnt = np.unique(s, return_counts=True)
        out["summary"] = prune(uv, cnt.astype(np.float64), points)
    return out


@dataclass(frozen=True, slots=True)
class Rows:
    """A partition's rows as bin codes: ``n_train`` training rows, then validation rows."""

    bins: DenseBins | SparseBins
    y: np.ndarray  # float64 labels (class indices for classifiers)
    n_train: int

    @property
    def n(self) -> int:
        return int(self.y.shape[0])

    @property
    def nbytes(self) -> int:
        return int(self.bins.nbytes + self.y.nbytes)


def _spec_key(spec: BinSpec) -> str:
    h = hashlib.blake2b(digest_size=12)
    for a in (spec.n_bins, spec.cut_ptr, spec.cuts):
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def prepare(part: Any, spec: BinSpec, fraction: float, seed: int, zero_is_value: bool,
            dense_fraction: float, classes: tuple[float, ...] | None) -> Rows:  # fmt: skip
    """The partition's bin codes (cached on the worker while the partition lives).

    ``classes``: the label values of a classifier whose rows carry labels, not
    class indices (a daskangel Dataset); they are mapped to indices here.
    """
    key = ("gbdt-bins", id(part), _spec_key(spec), fraction, seed, zero_is_value, dense_fraction,
           classes)  # fmt: skip

    def make() -> Rows:
        b = part.csr()
        train, val = split(b.n_rows, part.index, fraction, seed)
        rows = np.concatenate([train, val])
        F = max(int(part.n_features), 1)
        dense = zero_is_value or b.nnz >= dense_fraction * max(b.n_rows, 1) * F
        bins = bin_rows(b.indptr, b.indices, b.data, rows, spec, zero_is_value, dense)
        y = np.asarray(b.labels, np.float64)[rows]
        if classes is not None:
            y = np.searchsorted(np.asarray(classes, np.float64), y).astype(np.float64)
        return Rows(bins, y, int(train.size))

    return PREPARED.get_or_make(part, key, make)
