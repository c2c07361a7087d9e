"""A synthetic kdd2010-shaped CTR set: power-law feature frequencies, a planted sparse model.

Every value is a pure function of ``(seed, global row, draw)`` through a
counter-based hash (splitmix64), so any chunk can be generated anywhere (on
the worker that will hold it) and the set does not depend on the chunking.

* Row ``g`` has ``nnz`` distinct binary features (value 1.0).  A draw picks the
  feature of *rank* ``r`` with probability ``~ (r + k0) ** -s`` (inverse CDF of
  the continuous power law, truncated to ``n_features``); ranks map to feature
  ids by a fixed affine bijection, so frequent features are spread over the id
  range as after feature hashing.
* Ground truth: feature ``j`` has a nonzero weight with probability
  ``density``, drawn from ``N(0, scale^2)`` (a function of ``seed, j``); the
  label is 1 with probability ``sigmoid(bias + sum of the row's weights)``.

Arrays are int32 indices, float32 values (the benchmark's memory budget), an
int64 ``indptr``.

Example
-------
>>> X, y, m = make_chunk(0, 3, 8, 1000, seed=0)
>>> X.shape, X.nnz, sorted(set(y.tolist())) <= [0.0, 1.0]
((3, 1000), 24, True)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from numba import njit

__all__ = ["GenSpec", "bayes_logloss", "make_chunk", "true_weights"]

_GOLD = np.uint64(0x9E3779B97F4A7C15)


@dataclass(frozen=True)
class GenSpec:
    n_features: int
    nnz: int
    seed: int = 0
    exponent: float = 1.05
    k0: float = 20.0
    density: float = 0.1
    scale: float = 1.0
    bias: float = -1.0


@njit(nogil=True, cache=True)
def _mix(z):  # type: ignore[no-untyped-def]  # pragma: no cover
    z = z + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@njit(nogil=True, cache=True)
def _unif(seed, a, b):  # type: ignore[no-untyped-def]  # pragma: no cover
    h = _mix(_mix(_mix(np.uint64(seed)) ^ np.uint64(a)) ^ np.uint64(b))
    return (h >> np.uint64(11)) * (1.0 / 9007199254740992.0)


@njit(nogil=True, cache=True)
def _weight(seed, j, density, scale):  # type: ignore[no-untyped-def]  # pragma: no cover
    if _unif(seed + 1, j, 0) >= density:
        return 0.0
    u1 = max(_unif(seed + 1, j, 1), 1e-300)
    u2 = _unif(seed + 1, j, 2)
    return scale * math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)


@njit(nogil=True, cache=True)
def _weights(seed, D, density, scale):  # type: ignore[no-untyped-def]  # pragma: no cover
    w = np.empty(D, np.float32)
    for j in range(D):
        w[j] = _weight(seed, j, density, scale)
    return w


_W: dict[tuple[int, int, float, float], np.ndarray] = {}


def true_weights(g: GenSpec) -> np.ndarray:
    """The planted weights (float32, cached per process)."""
    key = (g.seed, g.n_features, g.density, g.scale)
    if key not in _W:
        _W.clear()
        _W[key] = _weights(g.seed, g.n_features, g.density, g.scale)
    return _W[key]


@njit(nogil=True, cache=True)
def _gen(row0, n_rows, nnz, D, seed, s, k0, wtrue, bias, mult, add, indices, labels, margin):  # type: ignore[no-untyped-def]  # pragma: no cover
    lo = k0 ** (1.0 - s)
    hi = (D + k0) ** (1.0 - s)
    inv = 1.0 / (1.0 - s)
    for r in range(n_rows):
        g = row0 + r
        base = r * nnz
        cnt = 0
        draw = 0
        m = bias
        while cnt < nnz:
            u = _unif(seed, g, draw)
            draw += 1
            x = ((1.0 - u) * lo + u * hi) ** inv - k0
            rank = min(max(int(x), 0), D - 1)
            f = (rank * mult + add) % D
            dup = False
            for q in range(base, base + cnt):
                if indices[q] == f:
                    dup = True
                    break
            if dup:
                continue
            # insertion keeps the row's indices sorted
            q = base + cnt
            while q > base and indices[q - 1] > f:
                indices[q] = indices[q - 1]
                q -= 1
            indices[q] = f
            cnt += 1
            m += wtrue[f]
        margin[r] = m
        p = 1.0 / (1.0 + math.exp(-m))
        labels[r] = 1.0 if _unif(seed, g, 1 << 40) < p else 0.0


def _affine(D: int, seed: int) -> tuple[int, int]:
    """A multiplier coprime with ``D`` and an offset: rank -> feature id bijection."""
    rng = np.random.default_rng([seed, 17])
    while True:
        a = int(rng.integers(D // 3, D)) | 1
        if math.gcd(a, D) == 1:
            return a, int(rng.integers(0, D))


def make_chunk(
    row0: int,
    n_rows: int,
    nnz: int,
    n_features: int,
    *,
    seed: int = 0,
    spec: GenSpec | None = None,
    dtype: type = np.float32,
) -> tuple[sp.csr_matrix, np.ndarray, np.ndarray]:
    """Rows ``row0 .. row0 + n_rows - 1``: ``(X, y, true margins)``."""
    g = spec or GenSpec(n_features, nnz, seed)
    mult, add = _affine(g.n_features, g.seed)
    indices = np.empty(n_rows * g.nnz, np.int32)
    labels = np.empty(n_rows, np.float32)
    margin = np.empty(n_rows, np.float64)
    _gen(
        row0, n_rows, g.nnz, g.n_features, g.seed, g.exponent, g.k0, true_weights(g),
        g.bias, mult % g.n_features, add, indices, labels, margin,
    )  # fmt: skip
    indptr = np.arange(0, n_rows * g.nnz + 1, g.nnz, dtype=np.int64)
    X = sp.csr_matrix((np.ones(indices.shape[0], dtype), indices, indptr), (n_rows, g.n_features))
    return X, labels, margin


def bayes_logloss(y: np.ndarray, margin: np.ndarray) -> float:
    """Log-loss of the planted model itself (the best any model can do in expectation)."""
    z = np.where(y > 0, margin, -margin)
    return float(np.mean(np.logaddexp(0.0, -z)))
