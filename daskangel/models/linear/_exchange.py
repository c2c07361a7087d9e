"""A ma-sgd task's pushes as whole dense vectors, when its keys cover most of one.

A task pushes the change of the weights (and AdaGrad's sums) of its keys at the
end of every round.  By default those are ``(key, value)`` pairs merged in the
worker's update buffer, which switches to a dense accumulator of the whole
array once the pairs would be larger, and sends that.  When the task's keys
are at least ``daskangel.models.dense-push`` of the vector (73 % of a
1 M-feature Zipf set's on each of two tasks), the task writes its changes into
a whole-vector buffer of its own, kept from round to round, and sends it at
once past the update buffer (:meth:`~daskangel.train.TaskArray.increment_now`):
no key lists, no merge, and the servers add whole blocks.  On the Zipf set
(733,000 of 1,000,001 keys, 2 tasks on 2 cores, the weights' and the sums'
pushes of a round) 11-13 ms of a worker's CPU against 39-42 ms through the
update buffer.  The servers add the same values: zeros outside the task's
keys.  Such a task also pulls the weights whole (:func:`pull_dense`: the servers
copy blocks out, the task gathers its keys; 6-12 ms against 13-20 ms by key set
alone), while AdaGrad's sums, pulled beside them on the task's second thread, stay
pruned by key set (both whole were no cheaper, and sometimes 2x slower).

Example
-------
>>> import numpy as np
>>> dense_on(0.5, np.arange(6), 10, sparse=False), dense_on(0.5, np.arange(4), 10, sparse=False)
(True, False)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ... import config
from ...errors import InvalidArgumentError
from ...psarray import PSFuture

__all__ = ["DensePush", "dense_fraction", "dense_on", "pull_dense"]


def dense_fraction() -> float:
    """``daskangel.models.dense-push`` (0: never; 1: only a task using every key)."""
    key = "daskangel.models.dense-push"
    v = config.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 <= float(v) <= 1.0:
        raise InvalidArgumentError(f"{key}: expected a fraction in [0, 1], got {v!r}")
    return float(v)


def dense_on(fraction: float, keys: np.ndarray, n: int, *, sparse: bool) -> bool:
    """Whether a task with ``keys`` of an ``n``-long vector pushes it whole."""
    return fraction > 0.0 and not sparse and n > 0 and keys.shape[0] >= fraction * n


def pull_dense(arr: Any, keys: np.ndarray, pos: np.ndarray | None) -> np.ndarray:
    """The vector ``arr`` (a task's array) pulled whole past the pull cache, at ``keys``
    (in slot order with ``pos``), as the float64 ``(n_keys, 1)`` of
    :func:`.._core._rows.pull`."""
    v = arr.get(cache=False)
    at = keys if pos is None else keys[pos]
    return np.take(np.asarray(v, np.float64), at).reshape(-1, 1)


class DensePush:
    """Pushes of a task's ``(n_keys, 1)`` changes as the whole ``n``-long vector.

    One float64 buffer a fit, zeros outside the task's ``keys`` (in slot order
    with ``pos``, as :func:`.._core._rows.push`); :meth:`send` writes the keys'
    changes into it and sends it now, so its future must be waited for before the
    buffer is written again (and before the task's clock).
    """

    def __init__(self, arr: Any, keys: np.ndarray, pos: np.ndarray | None, n: int) -> None:
        self.arr = arr
        self.at = keys if pos is None else keys[pos]
        self.buf = np.zeros(n)

    def send(self, delta: np.ndarray) -> PSFuture:
        self.buf[self.at] = delta[:, 0]
        return self.arr.increment_now(self.buf, casting="same_kind")  # type: ignore[no-any-return]
