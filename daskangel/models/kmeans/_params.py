"""Checks of a KMeans estimator's parameters, before anything on the PS changes.

Example
-------
>>> class E:
...     n_clusters, init, algorithm, max_iter, tol, n_init = 3, "random", "lloyd", 10, 1e-4, 1
...     batch_size, n_tasks = 1024, None
...     def _algorithm(self): return self.algorithm
>>> check_params(E())
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import InvalidArgumentError

__all__ = ["ALGORITHMS", "INITS", "check_params"]

INITS = ("lloyd-sample", "k-means||", "k-means++", "random")
ALGORITHMS = ("lloyd", "minibatch")


def _int(name: str, v: Any, lo: int) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
        raise InvalidArgumentError(f"{name}: expected an int >= {lo}, got {v!r}")
    return int(v)


def check_params(est: Any) -> None:
    """Raise :class:`InvalidArgumentError` naming the first bad parameter."""
    _int("n_clusters", est.n_clusters, 1)
    _int("max_iter", est.max_iter, 1)
    _int("n_init", est.n_init, 1)
    _int("batch_size", est.batch_size, 1)
    if est.n_tasks is not None:
        _int("n_tasks", est.n_tasks, 1)
    if getattr(est, "snapshot_every", None) is not None:
        _int("snapshot_every", est.snapshot_every, 1)
    tol = getattr(est, "tol", 0.0)
    if isinstance(tol, bool) or not isinstance(tol, (int, float, np.floating)) or not tol >= 0:
        raise InvalidArgumentError(f"tol: expected a number >= 0, got {tol!r}")
    init = est.init
    if isinstance(init, str):
        if init not in INITS:
            raise InvalidArgumentError(
                f"init: expected one of {list(INITS)} or an array of shape "
                f"(n_clusters, n_features), got {init!r}"
            )
    elif not hasattr(init, "shape") and not isinstance(init, (list, tuple)):
        raise InvalidArgumentError(
            f"init: expected one of {list(INITS)} or an array of shape "
            f"(n_clusters, n_features), got {type(init).__name__}"
        )
    algorithm = est._algorithm()
    if algorithm not in ALGORITHMS:
        raise InvalidArgumentError(
            f"algorithm: expected one of {list(ALGORITHMS)}, got {algorithm!r}"
        )
    sync = getattr(est, "sync", "bsp")
    if algorithm == "lloyd" and sync not in ("bsp", None):
        raise InvalidArgumentError(
            f"sync: expected 'bsp' (Lloyd's algorithm runs under BSP only), got {sync!r}"
        )
