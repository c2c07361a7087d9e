"""What a factorization machine's training task knows and holds: its plan and its rows.

:class:`Plan` is the frozen description of a fit that travels to the tasks;
:func:`prepare` turns a data-layer partition into a :class:`TaskData`: the
shared split and pruned keys of :mod:`.._core._rows` (training and validation
rows with local slots, the partition's sorted feature keys plus the bias's),
the labels mapped for the loss (±1 or values) and, for a field-aware model,
the field of every local slot.

Example
-------
>>> import numpy as np
>>> from daskangel.data._batch import CSRBatch
>>> rows = CSRBatch.from_arrays([0, 1, 3], [7, 2, 7], [1.0, 1.0, 1.0], [1, 0], 10)
>>> d = TaskData.of(rows, index=0, fraction=0.0, seed=0, n_features=10, fields=None)
>>> d.keys.tolist(), d.train.indices.tolist(), d.y_train.tolist()
([2, 7, 10], [1, 0, 1], [1.0, 0.0])
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...data._batch import CSRBatch
from ...errors import InvalidArgumentError
from .._core._cache import PREPARED
from .._core._order import epoch_order
from .._core._rounds import Rounds
from .._core._rows import split_rows
from ._kernels import LOGISTIC, SQUARED, eval_rows, local_sgd

__all__ = ["Plan", "TaskData", "labels_for", "prepare"]


@dataclass(frozen=True)
class Plan:
    """Everything a training task needs to know about the fit (plain values)."""

    weights: str  # PS array (n_features + 1, 1 + n_fields * k): linear, factors; bias last
    metrics: str  # PS array: one float64 row of sums per epoch (see _core._epochs)
    n_features: int
    n_factors: int
    n_fields: int  # 0: FM
    fields: np.ndarray | None  # field of every feature (FFM)
    fields_tag: str  # digest of fields (cache key of prepared rows)
    kind: int  # LOGISTIC or SQUARED
    task: str  # "classifier" | "regressor"
    classes: tuple[float, ...] | None  # a Dataset's two labels (None: rows carry 0 / 1)
    solver: str
    eta0: float
    power_t: float  # ma-sgd's step of epoch t: eta0 / (1 + t) ** power_t
    reg_linear: float
    reg_factors: float
    batch: int
    local_steps: int | None
    epochs: int
    epoch0: int
    val_fraction: float
    seed: int
    train_rows: tuple[int, ...]
    rounds: int
    tol: float | None
    patience: int
    monitor: str
    nbins: int
    hot: int = 0
    optimizer: Any = None  # BoundOptimizer (server-side solvers)
    read_barrier: bool = False  # BSP: two clocks a round (see _core._rounds)
    acc: str = ""  # PS array of the summed gradients (server-side solvers under BSP)

    @property
    def clock_rounds(self) -> Rounds:
        """The fit's rounds and clocks a round (two with the read barrier)."""
        return Rounds(self.rounds, 2 if self.read_barrier else 1)

    @property
    def binary(self) -> bool:
        return self.task == "classifier"

    @property
    def logloss(self) -> bool:
        return self.kind == LOGISTIC

    def eta(self, epoch: int) -> float:
        """MA-SGD's step in (this fit's) epoch ``epoch``: ``eta0 / (1 + t) ** power_t``."""
        return float(self.eta0 / (1.0 + self.epoch0 + epoch) ** self.power_t)

    @property
    def width(self) -> int:
        """Columns of a key's row: the linear weight and the factors."""
        return 1 + max(self.n_fields, 1) * self.n_factors


@dataclass
class TaskData:
    """One task's rows with local slots, its pruned keys and the fields of its slots."""

    keys: np.ndarray  # sorted global keys (int64), the bias's (n_features) last
    train: CSRBatch
    val: CSRBatch
    y_train: np.ndarray  # float64, mapped for the loss
    y_val: np.ndarray
    fields: np.ndarray  # int32 field of every slot (empty for FM)
    pos: np.ndarray | None = None  # slot -> position in keys (hot slots first)

    @classmethod
    def of(
        cls,
        rows: CSRBatch | Sequence[CSRBatch],
        *,
        fields: np.ndarray | None,
        shuffle: bool = False,
        hot: int = 0,
        **kw: Any,
    ) -> TaskData:
        """Split and localise ``rows`` (labels as they came)."""
        d = split_rows(rows, has_bias=True, shuffle=shuffle, hot=hot, **kw)
        slot_fields = np.zeros(0, np.int32)
        if fields is not None:
            keys = d.keys if d.pos is None else d.keys[d.pos]
            slot_fields = np.append(np.asarray(fields, np.int32)[keys[:-1]], 0).astype(np.int32)
        return cls(d.keys, d.train, d.val, d.train.labels, d.val.labels, slot_fields, d.pos)

    @property
    def nbytes(self) -> int:
        """Bytes held (for the cache of prepared rows)."""
        arrays = [self.keys, self.y_train, self.y_val, self.fields]
        for b in (self.train, self.val):
            arrays += [b.indptr, b.indices, b.data, b.labels]
        return sum(a.nbytes for a in arrays)

    def epoch_order(self, seed: list[int]) -> np.ndarray:
        return epoch_order(self.train.n_rows, seed)

    def local_sgd(self, rows: np.ndarray, W: np.ndarray, plan: Plan, eta: float) -> float:
        """MA-SGD's local steps over ``rows`` in place on ``W``; returns the loss sum."""
        t, p = self.train, plan
        loss = local_sgd(
            t.indptr, t.indices, t.data, self.y_train, rows, W, self.fields, p.n_fields,
            p.kind, eta, p.reg_linear, p.reg_factors, p.batch,
        )  # fmt: skip
        return float(loss)

    def evaluate(self, W: np.ndarray, plan: Plan) -> tuple[np.ndarray, np.ndarray] | None:
        """Validation sums of the model ``W`` (slot order); None without validation rows."""
        v = self.val
        if v.n_rows == 0:
            return None
        return eval_rows(  # type: ignore[no-any-return]
            v.indptr, v.indices, v.data, self.y_val, W, self.fields, plan.n_fields,
            plan.kind, plan.nbins,
        )  # fmt: skip


def labels_for(labels: np.ndarray, plan: Plan) -> np.ndarray:
    """Labels as the kernels want them: ±1 (class index 0 / 1), or values."""
    y = np.asarray(labels, np.float64)
    if plan.kind == SQUARED:
        return y
    classes = np.asarray(plan.classes or (0.0, 1.0), np.float64)
    idx = np.clip(np.searchsorted(classes, y), 0, 1)
    bad = classes[idx] != y
    if bad.any():
        raise InvalidArgumentError(
            f"y: label {y[bad][0]!r} is not one of the classes {classes.tolist()}"
        )
    return 2.0 * idx - 1.0


def prepare(part: Any, plan: Plan, shuffle: bool = True) -> TaskData:
    """A partition as :class:`TaskData`, kept on its worker while it lives (see the
    linear family's ``prepare``: same cache, ``daskangel.models.prepared-cache``)."""
    key = (
        "fm-prepared", id(part), plan.seed, plan.val_fraction, plan.n_features, shuffle,
        plan.hot, plan.fields_tag,
    )  # fmt: skip

    def make() -> TaskData:
        return TaskData.of(
            part.pieces(), fields=plan.fields, shuffle=shuffle, hot=plan.hot,
            index=part.index, fraction=plan.val_fraction, seed=plan.seed,
            n_features=plan.n_features,
        )  # fmt: skip

    d = PREPARED.get_or_make(part, key, make)
    return TaskData(
        d.keys, d.train, d.val, labels_for(d.y_train, plan), labels_for(d.y_val, plan),
        d.fields, d.pos,
    )  # fmt: skip
