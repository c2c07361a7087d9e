"""The rounds of ``'sgd'`` / ``'ftrl'``: minibatches whose pulls and pushes overlap compute.

Angel's PS-SGD pulls a minibatch's keys, computes its gradient and pushes it to
the server-side optimiser.  Done one after the other, with a clock per
minibatch, a step is three round trips with the CPUs idle (13,000 rows/s on 2
workers).  Here a *round* (one clock) is ``plan.group`` minibatches
(``daskangel.models.sgd-group``) and within it:

* the pulls of the next ``daskangel.models.sgd-prefetch`` minibatches are in
  flight while this one computes (each reads the servers' newest weights, so a
  minibatch misses at most the pushes of the few before it: asynchronous SGD
  with a delay bounded by the prefetch depth, as a PS worker thread pool has);
  ``daskangel.models.sgd-pull-group`` minibatches share one pull of their keys'
  union (default 1: on 30-nnz rows a union pull was no faster, and its later
  minibatches read staler weights, see ``benchmarks/RESULTS.md``);
* every push (an optimiser step, ``BoundOptimizer.step_async``) is asynchronous
  and all of them are applied before the round's clock, so the clock rule
  (BSP / SSP / ASP) holds between rounds as it does for every other solver:
  a round reads everything pushed before the round's staleness floor.

The first pull of a task goes through the task's clock-aware array (it waits
for the read floor); later pulls follow a ``ctx.clock()``, which returns only
once the floor of the next clock holds, so they read the servers directly
(no clock cache: they want the newest weights).

**Step-pulls.** Where the weights allow it (range blocks, a rule without
versions: ``ops._steppull.fusable``) the steps of every
``daskangel.models.sgd-fuse`` minibatches travel in one message per server with
the pulls of the minibatches up to ``ahead = max(prefetch + 1, fuse)`` past the
last of them (``ops.step_pull_async``: the server applies the steps in order,
then reads the pulled keys): one message where a pull and a push each took two,
and the pulls read those steps.  A round opens with its first ``ahead`` pulls in
one message, so no pull of a round is sent before the clock that opens it.  A
minibatch thus reads the weights after the task's steps up to ``ahead`` before
it (it misses at most ``ahead - 1`` of them, as a prefetched pull did) and
whatever the other tasks pushed by then, up to the staleness bound between
rounds.  ``'ftrl'`` sends one step a message (its ``l1`` / ``l2`` change every step).

.. warning:: Within a round the model is read asynchronously: two fits with
   one ``random_state`` differ by the arrival order of the pushes (as they did
   with a clock per minibatch: a faster task's step could land before a
   slower one's pull).  ``'ma-sgd'`` is the deterministic solver.

Example
-------
>>> rounds = MinibatchRounds(ctx, plan, data, ctx.array(plan.weights))  # doctest: +SKIP
>>> loss = rounds.run(rows, epoch=0, rnd=0, eta=0.1, tm=timings)  # doctest: +SKIP
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

import numpy as np

from ... import config
from ...errors import InvalidArgumentError
from ...ops._steppull import fusable, step_pull_async
from .._core._rounds import check_finite_step
from ._kernels import batch_keys, grad_batch, put_rows
from ._task import Plan, TaskData

__all__ = ["MinibatchRounds", "sgd_fuse", "sgd_group", "sgd_prefetch", "sgd_pull_group"]


def _positive(key: str, least: int) -> int:
    value = config.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise InvalidArgumentError(f"{key}: expected an int >= {least}, got {value!r}")
    return value


def sgd_group() -> int:
    """``daskangel.models.sgd-group``: minibatches of ``'sgd'`` / ``'ftrl'`` a clock."""
    return _positive("daskangel.models.sgd-group", 1)


def sgd_pull_group() -> int:
    """``daskangel.models.sgd-pull-group``: minibatches a pull (the union of their keys)."""
    return _positive("daskangel.models.sgd-pull-group", 1)


def sgd_fuse() -> int:
    """``daskangel.models.sgd-fuse``: minibatches' steps a step-pull message carries."""
    return _positive("daskangel.models.sgd-fuse", 1)


def sgd_prefetch() -> int:
    """``daskangel.models.sgd-prefetch``: minibatch pulls in flight (0: none ahead)."""
    return _positive("daskangel.models.sgd-prefetch", 0)


class MinibatchRounds:
    """One task's ``'sgd'`` / ``'ftrl'`` rounds (see the module docstring)."""

    def __init__(self, plan: Plan, data: TaskData, w: Any, prefetch: int) -> None:
        self.p, self.d = plan, data
        self.w = w  # the task's array: its first pull waits for the read floor
        self.plain = w.plain
        nk, K = data.keys.shape[0], plan.n_outputs
        self.W = np.zeros((nk, K))
        self.G = np.zeros((nk, K))
        self.bits = np.zeros((nk + 63) // 64, np.uint64)  # batch_keys' scratch bitmap
        self.prefetch = prefetch
        self.first = True
        self.axis = "cols" if K == 1 else "rows"
        keys = data.keys
        self.fused = (
            plan.pull_group <= 1
            and plan.optimizer is not None
            and bool(keys.shape[0] < 2 or (keys[1:] > keys[:-1]).all())
            and fusable(plan.optimizer, self.axis)
        )

    def _keys(self, rows: np.ndarray) -> np.ndarray:
        t = self.d.train
        bk = batch_keys(t.indptr, t.indices, rows, self.bits)
        if self.p.has_bias:
            bk = np.append(bk, self.d.keys.shape[0] - 1)
        return bk  # type: ignore[no-any-return]

    def _pull(self, bk: np.ndarray) -> Any:
        """A pull of the local slots ``bk``: a future (``result()`` -> values)."""
        keys = self.d.keys[bk]
        if self.first:  # through the clock rule once; after a clock() the floor holds
            self.first = False
            v = self.w.get(cols=keys) if self.p.n_outputs == 1 else self.w.get(rows=keys)
            return _Done(v)
        if self.p.n_outputs == 1:
            return self.plain.get_async(cols=keys)
        return self.plain.get_async(rows=keys)

    def _grad(
        self, r: np.ndarray, bk: np.ndarray, epoch: int, eta: float
    ) -> tuple[float, np.ndarray]:
        """The loss sum and gradient of minibatch rows ``r`` on its local keys ``bk``."""
        p, d = self.p, self.d
        t = d.train
        scale = 1.0 / r.size
        if p.decay_grad:
            scale *= eta / p.eta0
        loss, g = grad_batch(
            t.indptr, t.indices, t.data, d.y_train, r, self.W, p.kind, p.eps,
            p.has_bias, self.G, bk, scale,
        )  # fmt: skip
        check_finite_step(loss, g, epoch, eta)
        return float(loss), g

    def _step(self, opt: Any, g: np.ndarray, gk: np.ndarray) -> Any:
        if self.p.n_outputs == 1:
            return opt.step_async(g[:, 0], cols=gk, casting="same_kind", atomic=False)
        return opt.step_async(g, rows=gk, casting="same_kind", atomic=False)

    def run(
        self, rows: np.ndarray, epoch: int, rnd: int, eta: float, tm: dict[str, float]
    ) -> float:
        """Train on a round's ``rows`` (minibatches of ``plan.batch``); the loss sum.

        With step-pulls (see the module docstring) see :meth:`_run_fused`.
        Otherwise the round's minibatches are pulled ``plan.pull_group`` at a time
        (one pull of their keys' union), ``plan.prefetch`` such pulls in flight
        ahead of the group computing.  Every step of the round has been applied on
        the servers when this returns.
        """
        if self.fused:
            return self._run_fused(rows, epoch, rnd, eta, tm)
        p, d, W = self.p, self.d, self.W
        K, b, pg = p.n_outputs, p.batch, max(1, p.pull_group)
        batches = [rows[i : i + b] for i in range(0, rows.size, b)]
        keys = [self._keys(r) for r in batches]
        groups = [range(i, min(i + pg, len(batches))) for i in range(0, len(batches), pg)]
        gkeys = [
            keys[g[0]] if len(g) == 1 else np.unique(np.concatenate([keys[i] for i in g]))
            for g in groups
        ]
        pulls: deque[Any] = deque()
        pushes = []
        loss_sum = 0.0
        nxt = 0
        for gi, grp in enumerate(groups):
            t_0 = time.perf_counter()
            while nxt < len(groups) and nxt <= gi + self.prefetch:
                pulls.append(self._pull(gkeys[nxt]))
                nxt += 1
            uk = gkeys[gi]
            put_rows(W, uk, np.asarray(pulls.popleft().result()).reshape(uk.shape[0], K))
            tm["pull"] += time.perf_counter() - t_0
            for i in grp:
                t_1 = time.perf_counter()
                loss, g = self._grad(batches[i], keys[i], epoch, eta)
                opt = p.step_optimizer(epoch, rnd * p.group + i)
                t_2 = time.perf_counter()
                pushes.append(self._step(opt, g, d.keys[keys[i]]))
                tm["sgd"] += t_2 - t_1
                tm["push"] += time.perf_counter() - t_2
                loss_sum += loss
        t_0 = time.perf_counter()
        for f in pushes:  # applied before the clock: the next round's reads see them
            f.result()
        tm["push"] += time.perf_counter() - t_0
        return loss_sum

    def _run_fused(
        self, rows: np.ndarray, epoch: int, rnd: int, eta: float, tm: dict[str, float]
    ) -> float:
        """:meth:`run` with step-pulls: every ``plan.fuse`` minibatches, one message per
        server carries their steps and the pulls of the minibatches up to
        ``ahead = max(prefetch + 1, fuse)`` past the last of them; the round's first
        ``ahead`` pulls travel together before any step."""
        p, d, W = self.p, self.d, self.W
        K, b, m = p.n_outputs, p.batch, max(1, p.fuse)
        ahead = max(self.prefetch + 1, m)  # a pull is sent before its minibatch computes
        batches = [rows[i : i + b] for i in range(0, rows.size, b)]
        keys = [self._keys(r) for r in batches]
        n = len(batches)
        t_0 = time.perf_counter()
        todo: dict[int, tuple[Any, int]] = {}  # minibatch -> (its pull's future, index)
        sent: list[Any] = []
        nxt = 0
        if self.first:  # through the clock rule, once
            todo[0] = (_Done([self._pull(keys[0]).result()]), 0)
            nxt = 1
        nxt = self._send(p.optimizer, [], [], keys, nxt, min(ahead, n), todo, sent)
        tm["pull"] += time.perf_counter() - t_0
        grads: list[np.ndarray] = []
        gkeys: list[np.ndarray] = []
        loss_sum = 0.0
        for i in range(n):
            t_0 = time.perf_counter()
            bk = keys[i]
            f, at = todo.pop(i)
            got = f.result()
            v = self._pull(bk).result() if got is None else got[at]  # None: pull again
            put_rows(W, bk, np.asarray(v).reshape(bk.shape[0], K))
            t_1 = time.perf_counter()
            loss, g = self._grad(batches[i], bk, epoch, eta)
            grads.append(g[:, 0] if K == 1 else g)
            gkeys.append(d.keys[bk])
            t_2 = time.perf_counter()
            if len(grads) == m or i == n - 1:
                opt = p.step_optimizer(epoch, rnd * p.group + i)
                nxt = self._send(opt, grads, gkeys, keys, nxt, min(i + ahead + 1, n), todo, sent)
                grads, gkeys = [], []
            tm["pull"] += t_1 - t_0
            tm["sgd"] += t_2 - t_1
            tm["push"] += time.perf_counter() - t_2
            loss_sum += loss
        t_0 = time.perf_counter()
        for f in sent:  # every step applied before the clock
            f.result()
        tm["push"] += time.perf_counter() - t_0
        return loss_sum

    def _send(
        self,
        opt: Any,
        grads: list[np.ndarray],
        gkeys: list[np.ndarray],
        keys: list[np.ndarray],
        lo: int,
        hi: int,
        todo: dict[int, tuple[Any, int]],
        sent: list[Any],
    ) -> int:
        """One step-pull of ``grads`` at ``gkeys`` and the pulls of minibatches
        ``lo .. hi - 1`` (recorded in ``todo``); the next minibatch to pull."""
        js = range(lo, max(lo, hi))
        if not grads and not js:
            return lo
        pulls = [self.d.keys[keys[j]] for j in js]
        f = step_pull_async(opt, grads, gkeys, pulls, axis=self.axis, casting="same_kind")
        for at, j in enumerate(js):
            todo[j] = (f, at)
        sent.append(f)
        return js.stop


class _Done:
    """A finished pull, shaped as a future."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def result(self) -> Any:
        return self.value
