"""Bin edges of every feature, and a partition's rows turned into bin codes once.

:class:`BinSpec` is what the PS's merge of the sketches yields (feature ``f``
has ``n_bins[f]`` bins of present values, cut at ``cuts[cut_ptr[f]:cut_ptr[f
+ 1]]``) plus the layout of the histograms: feature ``f``'s bins are rows
``offsets[f] .. offsets[f + 1] - 1`` of the histogram array, so a range of rows
is a range of whole features.

A task bins its partition once (:func:`bin_rows`) into one of two layouts:

* :class:`DenseBins`: a ``(n_rows, n_features)`` ``uint8`` (``uint16`` when a
  feature has more than 255 bins) matrix of bin codes, :data:`missing code
  <MISSING8>` for a missing value, kept twice: by rows (a histogram reads a
  row's codes side by side) and by features (a row partition reads one
  feature's codes: 4-5x faster than striding over the rows);
* :class:`SparseBins`: CSR whose entries are global histogram rows
  (``offsets[f] + bin``, int32), missing entries left out.

Missing values are never counted in a histogram: the servers derive them from
a node's totals (``_psfs``).  A dense input (numpy, pandas, dask arrays) treats
an unstored entry as the value 0 and only NaN as missing; a sparse one
(scipy.sparse, libsvm Datasets) treats every unstored entry as missing, as
XGBoost does.

Example
-------
>>> import numpy as np
>>> spec = BinSpec.build(np.array([2, 3]), np.array([0, 1, 3]), np.array([0.5, 1.5, 2.5]))
>>> spec.offsets.tolist(), spec.n_total
([0, 2, 5], 5)
>>> spec.bin_of(1, np.array([1.0, 2.0, 9.0])).tolist()
[0, 1, 2]
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from ...psarray._kernels import lower_bound

__all__ = ["MISSING8", "MISSING16", "BinSpec", "DenseBins", "SparseBins", "bin_rows"]

MISSING8 = 255  # the missing code of a uint8 bin matrix
MISSING16 = 65535  # ... of a uint16 one


@dataclass(frozen=True, slots=True)
class BinSpec:
    """Bins of every feature and their rows in the histogram array (see module doc)."""

    n_bins: np.ndarray  # (F,) int64; 0: the feature never had a present value
    cut_ptr: np.ndarray  # (F + 1,) int64
    cuts: np.ndarray  # float64, ascending per feature
    offsets: np.ndarray  # (F + 1,) int64: histogram rows of feature f

    @classmethod
    def build(cls, n_bins: np.ndarray, cut_ptr: np.ndarray, cuts: np.ndarray) -> BinSpec:
        nb = np.asarray(n_bins, np.int64)
        off = np.zeros(nb.shape[0] + 1, np.int64)
        np.cumsum(nb, out=off[1:])
        return cls(nb, np.asarray(cut_ptr, np.int64), np.asarray(cuts, np.float64), off)

    @property
    def n_features(self) -> int:
        return int(self.n_bins.shape[0])

    @property
    def n_total(self) -> int:
        """Histogram rows: the bins of every feature."""
        return int(self.offsets[-1])

    @property
    def max_bins(self) -> int:
        return int(self.n_bins.max()) if self.n_bins.size else 0

    def feature_cuts(self, f: int) -> np.ndarray:
        return self.cuts[self.cut_ptr[f] : self.cut_ptr[f + 1]]

    def bin_of(self, f: int, values: np.ndarray) -> np.ndarray:
        """Bins of present values of feature ``f``: ``#{cuts < v}``."""
        return np.searchsorted(self.feature_cuts(f), values, side="left")

    def threshold(self, f: int, b: int) -> float:
        """The raw-value test of "bin <= b": ``v <= threshold`` (for the last bin the
        largest float64, so every finite value: the PS stores no infinities)."""
        c = self.feature_cuts(f)
        return float(c[b]) if b < c.shape[0] else float(np.finfo(np.float64).max)

    def feature_bounds(self, lo: int, hi: int) -> tuple[int, int]:
        """Features whose histogram rows lie in ``[lo, hi)`` (bounds on feature edges)."""
        a = int(np.searchsorted(self.offsets, lo, side="left"))
        b = int(np.searchsorted(self.offsets, hi, side="left"))
        return a, b

    @property
    def nbytes(self) -> int:
        return int(
            self.n_bins.nbytes + self.cut_ptr.nbytes + self.cuts.nbytes + self.offsets.nbytes
        )


@dataclass(frozen=True, slots=True)
class DenseBins:
    """Bin codes as an ``(n_rows, n_features)`` matrix (``missing`` = no value) and
    its column-major copy ``cols`` (``(n_features, n_rows)``)."""

    codes: np.ndarray
    missing: int
    cols: np.ndarray

    @property
    def n_rows(self) -> int:
        return int(self.codes.shape[0])

    @property
    def nbytes(self) -> int:
        return int(self.codes.nbytes + self.cols.nbytes)


@dataclass(frozen=True, slots=True)
class SparseBins:
    """Present values as CSR rows of global histogram rows (``offsets[f] + bin``)."""

    indptr: np.ndarray  # int64
    hrows: np.ndarray  # int32

    @property
    def n_rows(self) -> int:
        return int(self.indptr.shape[0] - 1)

    @property
    def nbytes(self) -> int:
        return int(self.indptr.nbytes + self.hrows.nbytes)


@njit(nogil=True, cache=True)
def _bin_of(cuts, a, b, x):  # type: ignore[no-untyped-def]
    """``#{cuts[a:b] < x}`` (``np.searchsorted(cuts[a:b], x)``, a binary search)."""
    return lower_bound(cuts, a, b, x) - a


@njit(nogil=True, cache=True)
def _bin_dense(indptr, indices, data, rows, cut_ptr, cuts, n_bins, zero_is_value, missing, out):  # type: ignore[no-untyped-def]
    F = n_bins.shape[0]
    zero_bin = np.empty(F, np.int64)
    for f in range(F):
        if zero_is_value and n_bins[f] > 0:
            zero_bin[f] = _bin_of(cuts, cut_ptr[f], cut_ptr[f + 1], 0.0)
        else:
            zero_bin[f] = missing
    for k in range(rows.shape[0]):
        r = rows[k]
        for f in range(F):
            out[k, f] = zero_bin[f]
        for e in range(indptr[r], indptr[r + 1]):
            f = indices[e]
            x = data[e]
            if np.isnan(x) or n_bins[f] == 0:
                out[k, f] = missing
            else:
                out[k, f] = _bin_of(cuts, cut_ptr[f], cut_ptr[f + 1], np.float64(x))


@njit(nogil=True, cache=True)
def _bin_sparse(indptr, indices, data, rows, cut_ptr, cuts, n_bins, offsets):  # type: ignore[no-untyped-def]
    n = rows.shape[0]
    ptr = np.zeros(n + 1, np.int64)
    for k in range(n):
        r = rows[k]
        c = 0
        for e in range(indptr[r], indptr[r + 1]):
            if not np.isnan(data[e]) and n_bins[indices[e]] > 0:
                c += 1
        ptr[k + 1] = ptr[k] + c
    out = np.empty(ptr[n], np.int32)
    for k in range(n):
        r = rows[k]
        o = ptr[k]
        for e in range(indptr[r], indptr[r + 1]):
            f = indices[e]
            x = data[e]
            if not np.isnan(x) and n_bins[f] > 0:
                out[o] = offsets[f] + _bin_of(cuts, cut_ptr[f], cut_ptr[f + 1], np.float64(x))
                o += 1
    return ptr, out


def bin_rows(
    indptr: np.ndarray,
    indices: np.ndarray,
    data: np.ndarray,
    rows: np.ndarray,
    spec: BinSpec,
    zero_is_value: bool,
    dense: bool,
) -> DenseBins | SparseBins:
    """Bin codes of ``rows`` of a CSR (in that order) in the chosen layout.

    ``zero_is_value`` needs ``dense``: an unstored entry has a bin then.
    Column indices must be sorted within each row for the sparse layout
    (every data-layer partition's are).
    """
    rows = np.asarray(rows, np.int64)
    if dense:
        wide = spec.max_bins > MISSING8
        missing = MISSING16 if wide else MISSING8
        codes = np.empty((rows.shape[0], spec.n_features), np.uint16 if wide else np.uint8)
        _bin_dense(
            indptr, indices, data, rows, spec.cut_ptr, spec.cuts, spec.n_bins,
            zero_is_value, missing, codes,
        )  # fmt: skip
        return DenseBins(codes, missing, np.ascontiguousarray(codes.T))
    ptr, hrows = _bin_sparse(
        indptr, indices, data, rows, spec.cut_ptr, spec.cuts, spec.n_bins, spec.offsets
    )
    return SparseBins(ptr, hrows)
