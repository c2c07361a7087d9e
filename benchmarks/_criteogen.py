"""A synthetic Criteo-shaped CTR set: 39 categorical fields, power-law values, planted pairs.

Every value is a pure function of ``(seed, global row, field)`` through a
counter-based hash (splitmix64), so any chunk can be generated anywhere (on the
worker that will hold it) and the set does not depend on the chunking.

* Row ``g`` has one feature per field (value 1.0), ``n_fields`` non-zeros.
  Field ``f`` has ``card[f]`` values (cardinalities grow geometrically from 4
  to ``max_card``, so a few fields are small and dense and a few are huge, as
  after hashing Criteo's categorical columns); a field's value is drawn with
  ``P(rank r) ~ (r + k0) ** -s`` (inverse CDF of the continuous power law).
  Feature id = the field's offset + the value: ``fields()`` gives every
  feature's field.
* Ground truth: every feature has a linear weight ``N(0, 0.3^2)`` and a latent
  vector ``N(0, 0.6^2)`` of ``rank`` entries (functions of ``seed, j``); the
  margin adds ``<u_a, u_b>`` over ``n_pairs`` planted field pairs (FFM-shaped:
  a few field pairs interact, the others not), or with ``interacting = m > 0``
  over every pair of ``m`` seeded fields (FM-shaped: a feature's one latent
  vector serves all its pairs), so a linear model misses that part.  The label
  is 1 with probability ``sigmoid(margin)``.

Example
-------
>>> g = Spec(n_rows_hint=0, max_card=1000)
>>> X, y = make_chunk(0, 3, g)
>>> X.shape[0], X.nnz, int(X.shape[1]) == int(g.cards().sum())
(3, 117, True)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from numba import njit

__all__ = ["Spec", "make_chunk"]

_GOLD = np.uint64(0x9E3779B97F4A7C15)


@dataclass(frozen=True)
class Spec:
    n_rows_hint: int = 0
    n_fields: int = 39
    max_card: int = 2**18
    seed: int = 0
    exponent: float = 1.1
    k0: float = 5.0
    rank: int = 4
    n_pairs: int = 8
    bias: float = -1.2
    interacting: int = 0  # > 0: every pair of this many seeded fields (FM-shaped)

    def cards(self) -> np.ndarray:
        f = np.arange(self.n_fields)
        return np.maximum(4, np.round(4 * (self.max_card / 4) ** (f / (self.n_fields - 1)))).astype(
            np.int64
        )

    def offsets(self) -> np.ndarray:
        return np.concatenate([[0], np.cumsum(self.cards())]).astype(np.int64)

    @property
    def n_features(self) -> int:
        return int(self.cards().sum())

    def fields(self) -> np.ndarray:
        """The field of every feature."""
        return np.repeat(np.arange(self.n_fields), self.cards()).astype(np.int32)

    def pairs(self) -> np.ndarray:
        rng = np.random.default_rng(self.seed + 17)
        if self.interacting > 0:
            f = np.sort(rng.choice(self.n_fields, self.interacting, replace=False))
            return np.array([(a, b) for i, a in enumerate(f) for b in f[i + 1 :]], np.int64)
        out: set[tuple[int, int]] = set()
        while len(out) < self.n_pairs:
            a, b = sorted(rng.choice(self.n_fields, 2, replace=False).tolist())
            out.add((a, b))
        return np.array(sorted(out), np.int64)


@njit(nogil=True, cache=True)
def _mix(x):  # type: ignore[no-untyped-def]  # pragma: no cover
    z = x + _GOLD
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@njit(nogil=True, cache=True)
def _unit(x):  # type: ignore[no-untyped-def]  # pragma: no cover
    return np.float64(_mix(x) >> np.uint64(11)) * (1.0 / 9007199254740992.0)


@njit(nogil=True, cache=True)
def _normal(x):  # type: ignore[no-untyped-def]  # pragma: no cover
    u1 = max(_unit(x), 1e-300)
    u2 = _unit(x ^ np.uint64(0x5555555555555555))
    return math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)


@njit(nogil=True, cache=True)
def _tables(seed, n, rank):  # type: ignore[no-untyped-def]  # pragma: no cover
    base = np.uint64(seed) * np.uint64(0x100000001B3)
    w = np.empty(n)
    U = np.empty((n, rank))
    for j in range(n):
        w[j] = 0.3 * _normal(base ^ (np.uint64(j) * np.uint64(7919) + np.uint64(1)))
        for q in range(rank):
            U[j, q] = 0.6 * _normal(base ^ (np.uint64(j) * np.uint64(104729) + np.uint64(q + 3)))
    return w, U


@njit(nogil=True, cache=True)
def _gen(row0, n, seed, cards, offsets, s, k0, w, U, pairs, bias, indices, y):  # type: ignore[no-untyped-def]  # pragma: no cover
    nf = cards.shape[0]
    base = np.uint64(seed) * np.uint64(0x100000001B3)
    feat = np.empty(nf, np.int64)
    for i in range(n):
        g = np.uint64(row0 + i)
        m = bias
        for f in range(nf):
            u = _unit(base ^ (g * np.uint64(64) + np.uint64(f)) * np.uint64(2654435761))
            c = cards[f]
            # inverse CDF of (r + k0)^-s on [0, c)
            a = k0 ** (1.0 - s)
            b = (c + k0) ** (1.0 - s)
            r = int((a + u * (b - a)) ** (1.0 / (1.0 - s)) - k0)
            r = min(max(r, 0), c - 1)
            j = offsets[f] + r
            feat[f] = j
            indices[i * nf + f] = j
            m += w[j]
        for p in range(pairs.shape[0]):
            ja = feat[pairs[p, 0]]
            jb = feat[pairs[p, 1]]
            for q in range(U.shape[1]):
                m += U[ja, q] * U[jb, q]
        pr = 1.0 / (1.0 + math.exp(-m))
        y[i] = (
            1.0
            if _unit(base ^ (g * np.uint64(64) + np.uint64(63)) * np.uint64(40503)) < pr
            else 0.0
        )


_TABLES: dict[Spec, tuple[np.ndarray, np.ndarray]] = {}


def make_chunk(row0: int, n: int, g: Spec) -> tuple[sp.csr_matrix, np.ndarray]:
    """Rows ``row0 .. row0 + n - 1``: CSR (int32 indices, float32 ones) and 0/1 labels."""
    nf = g.n_fields
    indices = np.empty(n * nf, np.int64)
    y = np.empty(n, np.float32)
    if g not in _TABLES:
        _TABLES[g] = _tables(g.seed, g.n_features, g.rank)
    w, U = _TABLES[g]
    _gen(row0, n, g.seed, g.cards(), g.offsets(), g.exponent, g.k0, w, U, g.pairs(), g.bias,
         indices, y)  # fmt: skip
    indptr = np.arange(0, n * nf + 1, nf, dtype=np.int64)
    X = sp.csr_matrix(
        (np.ones(n * nf, np.float32), indices.astype(np.int32), indptr), shape=(n, g.n_features)
    )
    return X, y
