"""Synthetic CTR-like data: power-law sparse binary features and a planted sparse model.

Click logs have a few features in almost every row and a long tail seen a
handful of times; :func:`make_ctr` reproduces that shape so demos and
benchmarks can run at any size without a download.  Feature ranks are drawn
from a bounded power law (``P(rank r) ~ r ** -power``) and scattered over the
id space by a fixed bijection, so the hot features are not all in the first
block of a range-partitioned model.  A planted sparse model ``(coef, intercept)``
gives every row a click probability ``sigmoid(x @ coef + intercept)`` and the
label is drawn from it.

Everything is a pure function of ``(spec, chunk index)``: the same seed gives
the same rows on any cluster, chunk by chunk, generated on the workers (the
driver never holds the data).

Example
-------
>>> import daskangel as angel
>>> X, y = angel.data.make_ctr(10_000, 2**16, nnz_per_row=8, seed=0, chunk_rows=5_000)
>>> X.shape, X.npartitions
((10000, 65536), 2)
>>> coef, intercept = angel.data.ctr_coef(X.shape[1], seed=0)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import InvalidArgumentError

__all__ = ["CTRSpec", "ctr_chunk", "ctr_coef", "make_ctr"]

_MIX = (0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB)


def _splitmix(x: np.ndarray) -> np.ndarray:
    """Counter-based 64-bit hash (splitmix64 finaliser), vectorised over ``x``."""
    with np.errstate(over="ignore"):
        z = x.astype(np.uint64) + np.uint64(_MIX[0])
        z = (z ^ (z >> np.uint64(30))) * np.uint64(_MIX[1])
        z = (z ^ (z >> np.uint64(27))) * np.uint64(_MIX[2])
        return z ^ (z >> np.uint64(31))


def _unit(x: np.ndarray) -> np.ndarray:
    """Uniform floats in [0, 1) from hashed counters."""
    return (_splitmix(x) >> np.uint64(11)).astype(np.float64) * (1.0 / 2**53)


def ctr_coef(
    n_features: int, *, seed: int = 0, informative: float = 0.2, scale: float = 1.0
) -> tuple[np.ndarray, float]:
    """The planted model of :func:`make_ctr`: ``(coef[n_features], intercept)``.

    A fraction ``informative`` of the features (chosen by hash) carry a weight
    drawn from ``Normal(0, scale)``; the others are exactly zero.
    """
    j = np.arange(n_features, dtype=np.uint64) + np.uint64(seed) * np.uint64(1 << 40)
    keep = _unit(j) < informative
    u1 = np.maximum(_unit(j ^ np.uint64(0x5555)), 1e-300)
    u2 = _unit(j ^ np.uint64(0xAAAA))
    normal = np.sqrt(-2.0 * np.log(u1)) * np.cos(2 * np.pi * u2)
    return np.where(keep, normal * scale, 0.0), -1.5


@dataclass(frozen=True, slots=True)
class CTRSpec:
    """Shape of a synthetic CTR set (see :func:`make_ctr`)."""

    n_rows: int
    n_features: int
    nnz_per_row: int = 24
    power: float = 1.1
    informative: float = 0.2
    scale: float = 1.0
    seed: int = 0
    chunk_rows: int = 250_000

    @property
    def n_chunks(self) -> int:
        return max(1, -(-self.n_rows // self.chunk_rows))

    def rows_of(self, chunk: int) -> int:
        return min(self.chunk_rows, self.n_rows - chunk * self.chunk_rows)

    def multiplier(self) -> int:
        """An odd multiplier coprime to ``n_features``: ``rank * m mod n`` is a bijection."""
        m = 2654435761 % self.n_features or 1
        while np.gcd(m, self.n_features) != 1:
            m += 1
        return m


def ctr_chunk(spec: CTRSpec, chunk: int) -> tuple[Any, np.ndarray]:
    """Rows of chunk ``chunk``: a ``scipy.sparse.csr_matrix`` of 0/1 features and 0/1 labels."""
    import scipy.sparse as sp

    n = spec.rows_of(chunk)
    rng = np.random.default_rng([spec.seed, chunk])
    # row lengths vary around nnz_per_row (at least 1 feature per row)
    lengths = np.maximum(1, rng.poisson(spec.nnz_per_row, n))
    total = int(lengths.sum())
    a, N = spec.power, float(spec.n_features)
    u = rng.random(total)
    if abs(a - 1.0) < 1e-9:
        rank = np.exp(u * np.log(N))
    else:  # inverse CDF of a power law on [1, N]
        rank = ((N ** (1 - a) - 1.0) * u + 1.0) ** (1.0 / (1 - a))
    r = np.minimum(rank.astype(np.int64) - 1, spec.n_features - 1)
    cols = (r * spec.multiplier()) % spec.n_features
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(lengths, out=indptr[1:])
    m = sp.csr_matrix(
        (np.ones(total, np.float32), cols.astype(np.int32), indptr),
        shape=(n, spec.n_features),
    )
    m.sum_duplicates()
    m.data[:] = 1.0
    coef, intercept = ctr_coef(
        spec.n_features, seed=spec.seed, informative=spec.informative, scale=spec.scale
    )
    margin = m @ coef + intercept
    p = 1.0 / (1.0 + np.exp(-margin))
    y = (rng.random(n) < p).astype(np.float64)
    return m, y


def make_ctr(
    n_rows: int = 1_000_000,
    n_features: int = 1_000_000,
    *,
    nnz_per_row: int = 24,
    power: float = 1.1,
    informative: float = 0.2,
    scale: float = 1.0,
    seed: int = 0,
    chunk_rows: int = 250_000,
) -> tuple[Any, Any]:
    """A synthetic CTR set as dask arrays ``(X, y)`` generated chunk by chunk on the workers.

    Parameters
    ----------
    n_rows, n_features
        Shape of ``X`` (rows are impressions, features are hashed ids).
    nnz_per_row
        Mean active features per row (Poisson, at least 1).
    power
        Exponent of the power law of feature frequencies (``> 0``; ~1.1 looks like
        kdd2010 / Criteo hashed ids).
    informative, scale
        Fraction of features with a non-zero planted weight, and its standard
        deviation (see :func:`ctr_coef`).
    seed
        Everything is determined by it.
    chunk_rows
        Rows per dask chunk.

    Returns
    -------
    X : dask.array.Array of ``scipy.sparse.csr_matrix`` chunks, float32 0/1
    y : dask.array.Array of float64 0/1 labels
    """
    for name, v in (("n_rows", n_rows), ("n_features", n_features), ("nnz_per_row", nnz_per_row)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise InvalidArgumentError(f"{name}: expected an int >= 1, got {v!r}")
    if not power > 0:
        raise InvalidArgumentError(f"power: expected a number > 0, got {power!r}")
    if not 0 <= informative <= 1:
        raise InvalidArgumentError(
            f"informative: expected a fraction in [0, 1], got {informative!r}"
        )
    if (
        isinstance(chunk_rows, bool)
        or not isinstance(chunk_rows, (int, np.integer))
        or chunk_rows < 1
    ):
        raise InvalidArgumentError(f"chunk_rows: expected an int >= 1, got {chunk_rows!r}")
    import dask
    import dask.array as da
    import scipy.sparse as sp

    spec = CTRSpec(
        int(n_rows), int(n_features), int(nnz_per_row), float(power), float(informative),
        float(scale), int(seed), int(chunk_rows),
    )  # fmt: skip
    token = dask.base.tokenize(spec)
    chunks = [dask.delayed(ctr_chunk, pure=True)(spec, i, dask_key_name=f"ctr-{token}-{i}")
              for i in range(spec.n_chunks)]  # fmt: skip
    meta = sp.csr_matrix((0, spec.n_features), dtype=np.float32)
    xs = [
        da.from_delayed(c[0], shape=(spec.rows_of(i), spec.n_features), dtype=np.float32, meta=meta)
        for i, c in enumerate(chunks)
    ]
    ys = [
        da.from_delayed(c[1], shape=(spec.rows_of(i),), dtype=np.float64)
        for i, c in enumerate(chunks)
    ]
    return da.concatenate(xs, axis=0), da.concatenate(ys)
