"""What every training task of a linear model does first and often: its data and its keys.

:class:`Plan` is the frozen description of a fit that travels to the tasks;
:func:`prepare` turns a data-layer partition into a :class:`TaskData`: the
shared split and pruned keys of :mod:`.._core._rows` (training and validation
rows with local slots, the sorted global keys the partition uses plus the
intercept's) with the labels mapped for the loss, so the task pulls and
pushes only those keys and works on a dense ``(n_keys, K)`` local copy.

Example
-------
>>> import numpy as np
>>> from daskangel.data._batch import CSRBatch
>>> rows = CSRBatch.from_arrays([0, 1, 3], [7, 2, 7], [1.0, 1.0, 1.0], [1, 0], 10)
>>> d = split_rows(rows, index=0, fraction=0.0, seed=0, n_features=10, has_bias=True)
>>> d.keys.tolist(), d.train.indices.tolist()
([2, 7, 10], [1, 0, 1])
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from ...data._batch import CSRBatch
from ...errors import InvalidArgumentError
from .._core._cache import PREPARED
from .._core._order import epoch_order
from .._core._rows import pull, push
from .._core._rows import split_rows as _split_rows
from ._adaptive import adagrad_sgd
from ._kernels import eval_stats, max_row_sq
from ._local_sgd import local_sgd

__all__ = [
    "Plan",
    "TaskData",
    "labels_for",
    "prepare",
    "pull",
    "push",
    "split_args",
    "split_key",
    "split_rows",
]

T = TypeVar("T")


@dataclass(frozen=True)
class Plan:
    """Everything a training task needs to know about the fit (plain values)."""

    weights: str  # PS array: vector (n_features + 1,) or matrix (n_features + 1, K)
    metrics: str  # PS array: one float64 row of sums per epoch (see _metrics)
    n_features: int
    n_outputs: int  # K: 1, or classes for softmax / one-vs-rest
    kind: int  # loss id (see _kernels.KINDS)
    eps: float  # Huber threshold
    has_bias: bool
    task: str  # "classifier" | "regressor"
    classes: tuple[float, ...] | None
    logloss: bool
    solver: str
    eta0: float
    power_t: float
    alpha: float  # L2, per-sample objective
    l1: float
    batch: int
    local_steps: int | None
    epochs: int  # epochs of this fit
    epoch0: int  # epochs done before (incremental training): the schedule continues
    val_fraction: float
    seed: int
    train_rows: tuple[int, ...]  # training rows of each task
    rounds: int  # clocks per epoch
    tol: float | None
    patience: int
    monitor: str
    prune: bool
    nbins: int
    optimizer: Any = None  # BoundOptimizer (solvers 'sgd', 'ftrl')
    decay_grad: bool = False  # scale gradients by the lr schedule (plain server SGD)
    memory: int = 10  # L-BFGS pairs
    average: bool = False  # 'ma-sgd': push the mean of the local iterates (L2 only)
    hot: int = 0  # most frequent features given the first local slots (see _core._prep)
    in_place_block: int = 0  # ma-sgd on the stored rows, this many a block (see _inplace)
    in_place_streams: int = 1  # ... blocks interleaved (see epoch_order)
    read_barrier: bool = False  # 'ma-sgd' under BSP: two clocks a round (see _solvers)
    adaptive: bool = False  # 'ma-sgd': per-feature AdaGrad steps (see _adaptive)
    accum: str = ""  # ... the PS array of their squared-gradient sums (shaped as weights)
    group: int = 1  # 'sgd' / 'ftrl': minibatches a round (clock), see _minibatch
    pull_group: int = 1  # ... minibatches a pull (their keys' union)
    prefetch: int = 0  # ... pulls in flight ahead of the group computing
    fuse: int = 1  # ... minibatches' steps (and the pulls ahead) a step-pull message
    relative_tol: bool = True  # early stopping: an improvement by tol * |best| (see should_stop)
    zero_start: bool = False  # the weights (and sums) were made as zeros for this fit
    dense_keys: float = 0.0  # 'ma-sgd': whole-vector pushes from this share of the keys (_exchange)

    @property
    def clocks_per_round(self) -> int:
        return 2 if self.read_barrier else 1

    @property
    def binary(self) -> bool:
        return self.task == "classifier" and self.n_outputs == 1

    def step_optimizer(self, epoch: int, rnd: int) -> Any:
        """The server optimiser for minibatch ``rnd`` of ``epoch`` (solvers ``'sgd'``, ``'ftrl'``).

        FTRL's ``z`` sums every minibatch's mean gradient since the start, so its
        ``l1`` / ``l2`` weigh against that many losses: they are ``l1`` and ``alpha``
        times the number of steps summed, which makes the objective the documented
        *mean* loss + ``l1 |w|_1 + alpha/2 |w|^2`` at every step (OWL-QN's, and
        SGD's, whose proximal step is per mean gradient already).
        """
        opt = self.optimizer
        if self.solver != "ftrl" or opt is None:
            return opt
        per = [-(-r // self.batch) for r in self.train_rows]  # steps of each task an epoch
        steps = (self.epoch0 + epoch) * sum(per) + sum(min(rnd + 1, n) for n in per)
        rule = dataclasses.replace(opt.optimizer, l1=self.l1 * steps, l2=self.alpha * steps)
        return dataclasses.replace(opt, optimizer=rule)

    def eta(self, epoch: int) -> float:
        """Learning rate of (this fit's) epoch ``epoch``: ``eta0 / (1 + t) ** power_t``
        (adaptive steps: ``eta0``, AdaGrad's sums are the schedule)."""
        if self.adaptive:
            return float(self.eta0)
        return float(self.eta0 / (1.0 + self.epoch0 + epoch) ** self.power_t)


@dataclass
class TaskData:
    """One task's rows with local column indices (slots), and its pruned keys."""

    keys: np.ndarray  # sorted global keys (int64), the intercept's last
    train: CSRBatch  # indices are local slots (positions in keys, or see pos)
    val: CSRBatch
    y_train: np.ndarray  # float64, mapped for the loss
    y_val: np.ndarray
    pos: np.ndarray | None = None  # slot -> position in keys (hot slots first); None: same

    @property
    def n_train(self) -> int:
        return self.train.n_rows

    @property
    def nbytes(self) -> int:
        """Bytes held (for the cache of prepared rows)."""
        arrays = [self.keys, self.y_train, self.y_val]
        for b in (self.train, self.val):
            arrays += [b.indptr, b.indices, b.data, b.labels]
        return sum(a.nbytes for a in arrays)

    def epoch_order(self, seed: list[int]) -> np.ndarray:
        """The training rows in blocks of adjacent rows, blocks in a seeded order."""
        return epoch_order(self.n_train, seed)

    def max_sq_norm(self) -> float:
        """The largest squared norm of a training row (the local step bound's ``L``)."""
        t = self.train
        return float(max_row_sq(t.indptr, t.data, np.arange(t.n_rows)))

    def local_sgd(self, rows: np.ndarray, W: np.ndarray, plan: Plan, eta: float) -> float:
        """MA-SGD's local steps over ``rows`` in place on ``W``; returns the loss sum."""
        t, p = self.train, plan
        loss, _steps = local_sgd(
            t.indptr, t.indices, t.data, self.y_train, rows, W, p.kind, p.eps, p.has_bias,
            eta, p.alpha, p.l1, p.batch, p.average,
        )  # fmt: skip
        return float(loss)

    def local_adagrad(
        self, rows: np.ndarray, W: np.ndarray, G: np.ndarray, plan: Plan, eta: float
    ) -> float:
        """:meth:`local_sgd` with per-feature adaptive steps (``adaptive=True``), in place
        on ``W`` and its squared-gradient sums ``G``; returns the loss sum."""
        t, p = self.train, plan
        nk = self.keys.shape[0] - (1 if p.has_bias else 0)
        return adagrad_sgd(  # type: ignore[no-any-return]
            t.indptr, t.indices, t.data, self.y_train, rows, W, G, np.arange(nk), p.kind,
            p.eps, p.has_bias, eta, p.alpha, p.l1, p.batch,
        )  # fmt: skip

    def evaluate(self, W: np.ndarray, plan: Plan) -> tuple[np.ndarray, np.ndarray] | None:
        """Validation sums of the model ``W`` (slot order); None if no validation rows."""
        v, p = self.val, plan
        if v.n_rows == 0:
            return None
        return eval_stats(  # type: ignore[no-any-return]
            v.indptr, v.indices, v.data, self.y_val, W, p.kind, p.eps, p.has_bias, p.nbins
        )


def labels_for(labels: np.ndarray, plan: Plan) -> np.ndarray:
    """Labels as the kernels want them: ±1 (binary), class index (K > 1), or values."""
    y = np.asarray(labels, np.float64)
    if plan.task == "regressor" or plan.classes is None:
        return y
    classes = np.asarray(plan.classes, np.float64)
    idx = np.searchsorted(classes, y)
    idx = np.clip(idx, 0, classes.shape[0] - 1)
    bad = classes[idx] != y
    if bad.any():
        raise InvalidArgumentError(
            f"y: label {y[bad][0]!r} is not one of the classes seen when the model was "
            f"created {classes.tolist()}"
        )
    if plan.n_outputs == 1:
        return 2.0 * idx - 1.0
    return idx.astype(np.float64)


def split_rows(rows: CSRBatch | Sequence[CSRBatch], **kw: Any) -> TaskData:
    """:func:`.._core._rows.split_rows` as a :class:`TaskData` (labels as they came)."""
    d = _split_rows(rows, **kw)
    return TaskData(d.keys, d.train, d.val, d.train.labels, d.val.labels, d.pos)


def prepare(part: Any, plan: Plan, shuffle: bool = False) -> TaskData:
    """A partition (data layer :class:`~daskangel.data.Partition`) as :class:`TaskData`.

    The split and localised rows are kept on the worker while the partition
    lives (up to ``daskangel.models.prepared-cache`` bytes per process, least
    recently used dropped), so the next fit of the same rows with the same
    ``random_state`` and validation fraction (``partial_fit`` epoch after epoch,
    a parameter search) skips this step.

    .. warning:: The cache is memory Dask counts as *unmanaged*: a worker holds
       a partition's rows twice while it is cached.
    """
    key = ("prepared", id(part), *split_key(plan), shuffle, plan.hot)
    d = PREPARED.get_or_make(
        part,
        key,
        lambda: split_rows(part.pieces(), shuffle=shuffle, hot=plan.hot, **split_args(part, plan)),
    )
    y_train, y_val = labels_for(d.y_train, plan), labels_for(d.y_val, plan)
    return TaskData(d.keys, d.train, d.val, y_train, y_val, d.pos)


def split_key(plan: Plan) -> tuple[Any, ...]:
    """What a partition's split and keys depend on, beyond the partition."""
    return (plan.seed, plan.val_fraction, plan.n_features, plan.has_bias)


def split_args(part: Any, plan: Plan) -> dict[str, Any]:
    """The keyword arguments of :func:`split_rows` / ``in_place_rows`` for a partition."""
    return dict(
        index=part.index,
        fraction=plan.val_fraction,
        seed=plan.seed,
        n_features=plan.n_features,
        has_bias=plan.has_bias,
    )
