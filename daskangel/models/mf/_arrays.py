"""The model's arrays on the PS: factor matrices, optimiser state; created, grown, read.

A factorisation model owns (``_arrays``)::

    {"users": name,            # (n_users, K + 1) float32: factors, then the bias
     "items": name,            # (n_items, K + 1) float32
     "user_state": name|None,  # users' AdaGrad accumulators (adagrad, adarevision)
     "item_state": {slot: name},  # the items' server-side optimiser state
     "rule": "AdaGrad"|"AdaRevision"|None}

Factors start as ``N(0, init_std^2)`` (counter-based, so they do not depend on
the partitioning), biases at 0.  ``partial_fit`` with new users or items grows
the matrices: a larger array is created next to the old one, the old rows are
copied block by block through the driver (``daskangel.models.mf.copy-bytes``
at a time) and the old array is dropped; new rows start like a first fit's.

Example
-------
>>> names = {"users": "mf.u", "items": "mf.i", "user_state": None,
...          "item_state": {"h": "mf.i-h"}, "rule": "AdaGrad"}
>>> from daskangel.models._core import array_names
>>> array_names(names)
['mf.u', 'mf.i', 'mf.i-h']
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from ... import config, ops
from ...context import PSContext
from ...psarray import PSArray

__all__ = ["RULES", "bound_optimizer", "grow", "new_factors", "read_rows", "rule_of"]

# optimiser name -> (ops rule class, default learning rate)
RULES: dict[str, tuple[type, float]] = {
    "adagrad": (ops.AdaGrad, 0.05),
    "adarevision": (ops.AdaRevision, 0.05),
}


def rule_of(optimizer: str, lr: float, max_versions: int) -> Any:
    """The server-side rule of the items for ``optimizer`` (None for plain SGD)."""
    if optimizer == "adagrad":
        return ops.AdaGrad(lr=lr, initial_accumulator=1e-2)
    if optimizer == "adarevision":
        return ops.AdaRevision(lr=lr, initial_accumulator=1e-2, max_versions=max_versions)
    return None


def new_factors(
    ps: PSContext, name: str, n: int, K: int, std: float, seed: int, row0: int = 0
) -> PSArray:
    """``(n, K + 1)`` float32: ``N(0, std^2)`` factors, zero biases (rows from ``row0``)."""
    a = ps.random(name, (n, K + 1), dist="normal", loc=0.0, scale=float(std), seed=int(seed))
    if n > row0:
        a.set(np.zeros((n - row0, 1), np.float32), rows=slice(row0, n), cols=[K])
    return a


def _slab_rows(arr: PSArray) -> int:
    m = arr.meta
    per_row = max(1, m.shape[1] * m.itemsize)
    return max(1, config.get_bytes("daskangel.models.mf.copy-bytes") // per_row)


def copy_rows(src: PSArray, dst: PSArray, n: int) -> None:
    """Rows ``0 .. n-1`` of ``src`` into ``dst`` (through the driver, in slabs)."""
    step = _slab_rows(src)
    for s in range(0, n, step):
        sl = slice(s, min(n, s + step))
        dst.set(np.asarray(src.get(rows=sl)), rows=sl, casting="same_kind")


def read_rows(arr: PSArray, rows: np.ndarray | None = None) -> np.ndarray:
    """Rows of ``arr`` (all when ``rows`` is None) as float32, in slabs."""
    if rows is not None:
        return np.asarray(arr.get(rows=np.asarray(rows, np.int64)), np.float32)
    n = arr.meta.shape[0]
    out = np.empty(arr.meta.shape, np.float32)
    step = _slab_rows(arr)
    for s in range(0, n, step):
        out[s : s + step] = arr.get(rows=slice(s, min(n, s + step)))
    return out


def grow(
    ps: PSContext, arr: PSArray, n: int, K: int, std: float, seed: int, fill: float | None
) -> PSArray:
    """A copy of ``arr`` with ``n`` rows (new rows random, or ``fill``); ``arr`` dropped."""
    old = arr.meta.shape[0]
    base = re.sub(r"-g\d+$", "", arr.name)
    name = f"{base}-g{n}"
    if fill is None:
        new = new_factors(ps, name, n, K, std, seed, row0=old)
    else:
        new = ps.full(name, (n, K + 1), fill, dtype=arr.meta.dtype)
    copy_rows(arr, new, old)
    ps.drop(arr.name)
    return new


def bound_optimizer(ps: PSContext, rule: Any, items: PSArray, state: dict[str, str]) -> Any:
    """The items' optimiser bound to its state arrays."""
    return ops.BoundOptimizer(rule, items, {s: ps.get_array(n) for s, n in state.items()})


def grow_state(
    ps: PSContext, rule: Any, old_items: str, items: PSArray, state: dict[str, str], old_n: int
) -> dict[str, str]:
    """The optimiser state of grown ``items``: attached anew, old rows copied over."""
    base = f"{items.name}.opt"
    bound = rule.attach(ps, items, name=base)
    for slot, arr in bound.state.items():
        src = ps.get_array(state[slot])
        copy_rows(src, arr, old_n)
        ps.drop(src.name)
    return {s: a.name for s, a in bound.state.items()}
