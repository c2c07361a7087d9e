"""Optimiser rules: SGD (L1/L2), momentum, AdaGrad, Adam, FTRL-proximal, AdaRevision.

Each rule is the per-entry formula applied on the servers by
:class:`~daskangel.ops._optim.OptimizerStep`; ``g`` is the pushed gradient of the
touched entries (duplicates already summed).  An ``l2`` term adds ``l2 * w`` to
the gradient.  Untouched entries and their state never change (lazy updates).

Example
-------
>>> import numpy as np
>>> w, st = Adam(lr=0.1).update(np.zeros(1), {"m": np.zeros(1), "v": np.zeros(1),
...     "t": np.zeros(1, np.int64)}, np.array([2.0]))
>>> round(float(w[0]), 6), int(st["t"][0])
(-0.1, 1)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ..errors import InvalidArgumentError
from ._optim import Optimizer

__all__ = ["SGD", "AdaGrad", "AdaRevision", "Adam", "FTRL", "Momentum"]

Arr = np.ndarray


def _l2(g: Arr, w: Arr, l2: float) -> Arr:
    return g + l2 * w if l2 else g


@dataclass(frozen=True)
class SGD(Optimizer):
    """``w -= lr * (g + l2 w)``, then the L1 proximal step ``soft_threshold(w, lr * l1)``.

    Angel ``SGDUpdateFunc`` (with Angel's L1 proximal ``PGDUpdateFunc``).
    """

    lr: float = 0.01
    l1: float = 0.0
    l2: float = 0.0

    def update(
        self, w: Arr, state: dict[str, Arr], g: Arr, versions: Arr | None = None
    ) -> tuple[Arr, dict[str, Arr]]:
        w = w - self.lr * _l2(g, w, self.l2)
        if self.l1:
            w = np.sign(w) * np.maximum(np.abs(w) - self.lr * self.l1, 0)
        return w, {}


@dataclass(frozen=True)
class Momentum(Optimizer):
    """``v = momentum * v + (g + l2 w)``; ``w -= lr * v`` (Angel ``MomentumUpdateFunc``)."""

    lr: float = 0.01
    momentum: float = 0.9
    l2: float = 0.0

    def state_slots(self) -> list[tuple[str, str | None, float]]:
        return [("v", None, 0.0)]

    def update(
        self, w: Arr, state: dict[str, Arr], g: Arr, versions: Arr | None = None
    ) -> tuple[Arr, dict[str, Arr]]:
        v = self.momentum * state["v"] + _l2(g, w, self.l2)
        return w - self.lr * v, {"v": v}


@dataclass(frozen=True)
class AdaGrad(Optimizer):
    """``h += g^2``; ``w -= lr * g / (sqrt(h) + eps)`` (Angel ``AdaGradUpdateFunc``).

    ``h`` starts at ``initial_accumulator``.
    """

    lr: float = 0.1
    eps: float = 1e-8
    l2: float = 0.0
    initial_accumulator: float = 0.0

    def state_slots(self) -> list[tuple[str, str | None, float]]:
        return [("h", None, self.initial_accumulator)]

    def update(
        self, w: Arr, state: dict[str, Arr], g: Arr, versions: Arr | None = None
    ) -> tuple[Arr, dict[str, Arr]]:
        g = _l2(g, w, self.l2)
        h = state["h"] + g * g
        return w - self.lr * g / (np.sqrt(h) + self.eps), {"h": h}


@dataclass(frozen=True)
class Adam(Optimizer):
    """Adam with per-entry step counts (Angel ``AdamUpdateFunc``).

    ``t += 1; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
    w -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)``.  Each entry counts
    its own steps ``t``, so bias correction is exact for sparse gradients (and
    equals textbook Adam when every step touches every entry).
    """

    lr: float = 0.001
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    l2: float = 0.0

    def state_slots(self) -> list[tuple[str, str | None, float]]:
        return [("m", None, 0.0), ("v", None, 0.0), ("t", "int64", 0.0)]

    def update(
        self, w: Arr, state: dict[str, Arr], g: Arr, versions: Arr | None = None
    ) -> tuple[Arr, dict[str, Arr]]:
        g = _l2(g, w, self.l2)
        t = state["t"] + 1
        m = self.beta1 * state["m"] + (1 - self.beta1) * g
        v = self.beta2 * state["v"] + (1 - self.beta2) * g * g
        mhat = m / (1 - self.beta1**t)
        vhat = v / (1 - self.beta2**t)
        return w - self.lr * mhat / (np.sqrt(vhat) + self.eps), {"m": m, "v": v, "t": t}


@dataclass(frozen=True)
class FTRL(Optimizer):
    """FTRL-proximal (McMahan et al. 2013; Angel ``FTRLUpdateFunc``).

    ``sigma = (sqrt(n + g^2) - sqrt(n)) / alpha; z += g - sigma w; n += g^2;
    w = 0 if |z| <= l1 else -(z - sign(z) l1) / ((beta + sqrt(n)) / alpha + l2)``.

    An entry never stepped (``n == 0``) starts from the ``z`` that gives back its
    current weight, ``z = -w (beta / alpha + l2) - sign(w) l1``, so weights that
    do not start at zero (a factorization machine's random factors) are kept
    rather than reset by the first step; from zero it is the usual ``z = 0``.
    """

    alpha: float = 0.1
    beta: float = 1.0
    l1: float = 0.0
    l2: float = 0.0

    def state_slots(self) -> list[tuple[str, str | None, float]]:
        return [("z", None, 0.0), ("n", None, 0.0)]

    def update(
        self, w: Arr, state: dict[str, Arr], g: Arr, versions: Arr | None = None
    ) -> tuple[Arr, dict[str, Arr]]:
        n0 = state["n"]
        n = n0 + g * g
        sigma = (np.sqrt(n) - np.sqrt(n0)) / self.alpha
        z0 = np.where(
            n0 == 0, -w * (self.beta / self.alpha + self.l2) - np.sign(w) * self.l1, state["z"]
        )
        z = z0 + g - sigma * w
        denom = (self.beta + np.sqrt(n)) / self.alpha + self.l2
        w = np.where(np.abs(z) <= self.l1, 0.0, -(z - np.sign(z) * self.l1) / denom)
        return w, {"z": z, "n": n}


@dataclass(frozen=True)
class AdaRevision(Optimizer):
    """Bösen's AdaRevision (McMahan & Streeter 2014) with per-entry parameter versions.

    The server keeps, per entry, ``gbar`` (the sum of all gradients applied), the
    accumulators ``z`` and ``zmax`` (both start at ``initial_accumulator``), the
    entry's version (incremented by every update) and the last ``max_versions``
    values of ``gbar`` by version (``hist0`` ...).  A worker pulls weights with
    their versions (``opt.pull``) and pushes its gradient with them; the server
    looks up ``gbar_old`` for that version and applies::

        gbck = gbar - gbar_old;  eta_old = lr / sqrt(zmax)
        z += g^2 + 2 g gbck;     zmax = max(zmax, z);  eta = lr / sqrt(zmax)
        w += -eta g + (eta_old - eta) gbck;  gbar += g;  version += 1

    .. warning:: A gradient more than ``max_versions - 1`` versions stale is
       applied as if computed against the oldest version kept.  Choose
       ``max_versions`` above the number of updates an entry can receive between
       a pull and the push that follows (workers x (staleness + 1) under SSP).
    """

    needs_versions: ClassVar[bool] = True
    lr: float = 0.1
    initial_accumulator: float = 1.0
    max_versions: int = 8

    def state_slots(self) -> list[tuple[str, str | None, float]]:
        fixed: list[tuple[str, str | None, float]] = [
            ("gbar", None, 0.0),
            ("z", None, self.initial_accumulator),
            ("zmax", None, self.initial_accumulator),
            ("ver", "int64", 0.0),
        ]
        return fixed + [(f"hist{k}", None, 0.0) for k in range(int(self.max_versions))]

    def update(
        self, w: Arr, state: dict[str, Arr], g: Arr, versions: Arr | None = None
    ) -> tuple[Arr, dict[str, Arr]]:
        assert versions is not None
        k = int(self.max_versions)
        cur = state["ver"]
        versions = np.asarray(versions).reshape(cur.shape)
        if np.any(versions > cur):
            raise InvalidArgumentError(
                "versions: a gradient claims a version newer than the server's"
            )
        v_eff = np.maximum(versions, cur - (k - 1))
        hist = np.stack([state[f"hist{i}"] for i in range(k)])
        gold = np.take_along_axis(hist, (v_eff % k)[None], axis=0)[0]
        gbar = state["gbar"]
        gbck = gbar - gold
        eta_old = self.lr / np.sqrt(state["zmax"])
        z = state["z"] + g * g + 2 * g * gbck
        zmax = np.maximum(state["zmax"], z)
        eta = self.lr / np.sqrt(zmax)
        w = w - eta * g + (eta_old - eta) * gbck
        gbar = gbar + g
        ver = cur + 1
        slot = ver % k
        out: dict[str, Any] = {"gbar": gbar, "z": z, "zmax": zmax, "ver": ver}
        for i in range(k):
            out[f"hist{i}"] = np.where(slot == i, gbar, hist[i])
        return w, out
