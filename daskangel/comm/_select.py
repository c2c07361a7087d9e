"""Which buffered units go out within a byte budget: Bösen's two rules.

A *unit* is what the update buffer merges: a whole row of a matrix, or one entry.
Each carries its accumulated update ``Δ`` (``(n, width)`` values) and costs a
known number of wire bytes.  :func:`priorities` ranks units by relative magnitude
``sum|Δ| / (sum|w| + ε)`` (``w``: the worker's cached parameter values, 0 where
none is cached, which ranks a unit never read first); :func:`select` picks, in
rank order or at random, the units whose bytes fit the budget.  Everything is a
few vectorised numpy calls per round, never a loop per unit.

Example
-------
>>> import numpy as np
>>> d = np.array([[0.1], [5.0], [1.0]])
>>> p = priorities(d, np.array([[1.0], [100.0], [1.0]]), eps=1e-6)
>>> select(p, np.array([8, 8, 8]), budget=16, policy="magnitude").tolist()
[0, 2]
"""

from __future__ import annotations

import numpy as np

__all__ = ["priorities", "select"]


def priorities(delta: np.ndarray, w: np.ndarray | None, eps: float) -> np.ndarray:
    """Relative magnitude of each unit's update: ``sum|Δ| / (sum|w| + eps)``.

    ``delta`` is ``(n, width)``; ``w`` the matching cached values or ``None``.
    """
    d = np.abs(delta, dtype=np.float64).sum(axis=1) if delta.ndim == 2 else np.abs(delta)
    if w is None:
        return d / eps  # type: ignore[no-any-return]
    ww = np.abs(w, dtype=np.float64).sum(axis=1) if w.ndim == 2 else np.abs(w)
    return d / (ww + eps)  # type: ignore[no-any-return]


def select(
    prio: np.ndarray,
    cost: np.ndarray,
    budget: float,
    policy: str,
    rng: np.random.Generator | None = None,
) -> np.ndarray:
    """Sorted positions of the units to send: in ``policy`` order while their
    ``cost`` (bytes each) adds up to at most ``budget``.

    ``"magnitude"`` takes the highest ``prio`` first, ``"random"`` a uniform random
    order (``rng``).  Units with no update (``prio == 0``) are never chosen.
    """
    n = prio.shape[0]
    if n == 0 or budget <= 0:
        return np.empty(0, np.int64)
    live = np.flatnonzero(prio > 0)
    if policy == "random":
        order = live[(rng or np.random.default_rng()).permutation(live.shape[0])]
    else:
        order = live[np.argsort(-prio[live], kind="stable")]
    fits = np.cumsum(cost[order]) <= budget
    k = int(np.argmin(fits)) if not fits.all() else fits.shape[0]
    return np.sort(order[:k])
