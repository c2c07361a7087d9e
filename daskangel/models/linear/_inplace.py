"""ma-sgd on a partition's rows in place: global column indices, a dense local model.

The general path (:func:`._task.prepare`) copies a partition's rows once, with
their column indices rewritten as local slots, so a task's weights are a dense
array over the keys it uses.  For the common MA-SGD case (one output, one row
per step, L2 only) and a model small enough to hold densely on every task
(``n_features + 1`` weights and their running sums, 16 bytes a feature, at most
``daskangel.models.in-place-workspace``), a task skips that copy and reads the
partition's stored rows where they are:

* the keys it pulls and pushes (Angel's pruned key list) come from one
  bitmap pass over the stored indices (:func:`.._core._prep.used_keys`);
* its local model is a ``(n_features + 1, 2)`` float64 workspace: a weight
  and its running sum for the tail average side by side, so an update touches
  one cache line (1.3x faster than two arrays on a 10 M-feature model), with
  the intercept in the last row; with ``adaptive`` the same 16 bytes hold a
  weight's squared-gradient sum, and its float32 weight and last step
  (:mod:`._adagrad16`);
* an epoch visits the training rows as blocks of ``daskangel.models.in-place-block``
  adjacent stored rows in a seeded random order, ``daskangel.models.in-place-streams``
  blocks at a time with their rows interleaved, so consecutive rows come from
  that many random places of the partition while every block is still read
  sequentially (as fast as one block at a time); the validation rows are
  evaluated where they are.

On the kdd2010-shaped benchmark this takes a 5 M-row task from ~6 s of
preparation to ~0.8 s, at the same SGD speed.

.. warning:: Rows are mixed by blocks of adjacent stored rows, not shuffled one
   by one: rows of one block stay together (interleaved with the other
   streams' blocks) in every epoch.  Data stored in a strong order (sorted by
   label or by time) mixes less than after a full shuffle; set
   ``daskangel.models.in-place-block`` to 1 for a full permutation (slower reads
   on large partitions), or shuffle when loading.

Example
-------
>>> import numpy as np
>>> from daskangel.data._batch import CSRBatch
>>> rows = CSRBatch.from_arrays([0, 1, 3], [7, 2, 7], [1.0, 1.0, 1.0], [1, 0], 10)
>>> d = in_place_rows(rows, index=0, fraction=0.0, seed=0, n_features=10, has_bias=True)
>>> d.keys.tolist(), d.train_ids.tolist()
([2, 7, 10], [0, 1])
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from numba import njit

from ... import config
from ...data._batch import CSRBatch
from ...errors import InvalidArgumentError
from .._core._cache import PREPARED
from .._core._order import epoch_order, split_ids
from .._core._prep import used_keys
from ._adagrad16 import adagrad_delta, adagrad_ws
from ._kernels import SOFTMAX, eval_rows, max_row_sq
from ._sgd_pairs import sgd_pairs
from ._task import Plan, labels_for, split_args, split_key

__all__ = ["InPlaceData", "in_place_order", "in_place_rows", "prepare_in_place"]


@dataclass
class InPlaceData:
    """A task's rows as stored (global column indices), its split and its pruned keys."""

    keys: np.ndarray  # sorted global keys (int64), then the intercept's key n_features
    rows: CSRBatch  # the partition's stored rows: not a copy
    train_ids: np.ndarray  # training rows (row numbers in rows), in storage order
    val_ids: np.ndarray  # validation rows, in storage order
    y: np.ndarray  # labels of every row (mapped for the loss once prepared)
    block: int  # rows an epoch visits together
    streams: int  # blocks interleaved (see _task.epoch_order)
    has_bias: bool
    pos: None = None  # slots are keys (see TaskData.pos)
    work: np.ndarray | None = None  # (n_features + 1, 2): weight, running sum
    work16: np.ndarray | None = None  # adaptive: (n_features + 1, 2), see _adagrad16
    # the labels mapped for the last plan's loss, by (task, classes, outputs): shared by
    # every fit on the cached entry (a fit's own copy of the entry shares this dict)
    mapped: dict[tuple[Any, ...], np.ndarray] = field(default_factory=dict)

    @property
    def n_train(self) -> int:
        return int(self.train_ids.shape[0])

    @property
    def nbytes(self) -> int:
        """Bytes this object holds beyond the partition's own rows (for the cache), with
        one mapped copy of the labels (:attr:`mapped` keeps the last plan's only)."""
        ids = self.keys.nbytes + self.train_ids.nbytes + self.val_ids.nbytes
        return int(ids + 8 * self.rows.n_rows)

    def epoch_order(self, seed: list[int]) -> np.ndarray:
        """The training rows by blocks of ``block`` adjacent stored rows, blocks shuffled
        and ``streams`` of them interleaved."""
        order = epoch_order(self.n_train, seed, self.block, self.streams)
        return self.train_ids[order]

    def _load(self, W: np.ndarray) -> np.ndarray:
        if self.work is None:
            self.work = np.zeros((self.rows.n_features + 1, 2))
        vp = self.work
        vp[self.keys, 0] = W[:, 0]
        vp[self.keys, 1] = 0.0
        return vp

    def max_sq_norm(self) -> float:
        """The largest squared norm of a training row (the local step bound's ``L``)."""
        return float(max_row_sq(self.rows.indptr, self.rows.data, self.train_ids))

    def local_sgd(self, rows: np.ndarray, W: np.ndarray, plan: Plan, eta: float) -> float:
        """One local pass over ``rows`` (from :meth:`epoch_order`) from and into ``W``
        (``(n_keys, 1)``, the pulled weights of :attr:`keys`); returns the loss sum."""
        vp = self._load(W)
        r = self.rows
        nk = self.keys.shape[0] - (1 if self.has_bias else 0)
        loss = sgd_pairs(
            r.indptr, r.indices, r.data, self.y, rows, vp, self.keys[:nk], plan.kind,
            plan.eps, self.has_bias, eta, plan.alpha, plan.average,
        )  # fmt: skip
        W[:, 0] = vp[self.keys, 0]
        return float(loss)

    def _work16(self) -> np.ndarray:
        if self.work16 is None:
            self.work16 = np.empty((self.rows.n_features + 1, 2))
        return self.work16

    def local_adagrad(
        self, rows: np.ndarray, W: np.ndarray, G: np.ndarray, plan: Plan, eta: float
    ) -> float:
        """:meth:`local_sgd` with per-feature adaptive steps (``adaptive=True``), from and
        into ``W`` and its squared-gradient sums ``G``; returns the loss sum."""
        r = self.rows
        return adagrad_ws(  # type: ignore[no-any-return]
            r.indptr, r.indices, r.data, self.y, rows, self._work16(), self.keys, W, G,
            plan.kind, plan.eps, self.has_bias, eta, plan.alpha, plan.l1,
        )  # fmt: skip

    def adagrad_delta(
        self, rows: np.ndarray, W0: np.ndarray, G0: np.ndarray, plan: Plan, eta: float, share: float
    ) -> tuple[float, np.ndarray, np.ndarray]:
        """:meth:`local_adagrad` from ``W0`` and ``G0`` (unchanged) returning what the task
        pushes: ``(loss sum, dW, dG)``, their changes times ``share``
        (:func:`._adagrad16.adagrad_delta`)."""
        r = self.rows
        return adagrad_delta(  # type: ignore[no-any-return]
            r.indptr, r.indices, r.data, self.y, rows, self._work16(), self.keys, W0, G0,
            plan.kind, plan.eps, self.has_bias, eta, plan.alpha, plan.l1, share,
        )  # fmt: skip

    def evaluate(self, W: np.ndarray, plan: Plan) -> tuple[np.ndarray, np.ndarray] | None:
        """Validation sums of the model ``W`` (weights of :attr:`keys`); None if no rows."""
        if self.val_ids.shape[0] == 0:
            return None
        if plan.adaptive:  # the float64 weights into the AdaGrad workspace's column 0 (its
            vp = self._work16()  # sums', free until the pass): one workspace a task, not two
            _put(vp, self.keys, W)
        else:
            vp = self._load(W)
        r = self.rows
        return eval_rows(  # type: ignore[no-any-return]
            r.indptr, r.indices, r.data, self.y, self.val_ids, vp[:, :1], plan.kind,
            plan.eps, self.has_bias, plan.nbins,
        )  # fmt: skip


@njit(nogil=True, cache=True)
def _put(ws, keys, W):  # type: ignore[no-untyped-def]  # pragma: no cover
    """``ws[keys[i], 0] = W[i, 0]`` (one compiled pass: numpy's fancy indexing cost ~5 %
    of a worker's CPU in a fit)."""
    for i in range(keys.shape[0]):
        ws[keys[i], 0] = W[i, 0]


def in_place_rows(
    rows: CSRBatch,
    *,
    index: int,
    fraction: float,
    seed: int,
    n_features: int,
    has_bias: bool,
    block: int = 16,
    streams: int = 32,
) -> InPlaceData:
    """The split and pruned keys of ``rows`` (the same split as :func:`.._core._rows.split_rows`)."""
    _train, val = split_ids(rows.n_rows, index=index, fraction=fraction, seed=seed)
    keep = np.ones(rows.n_rows, bool)
    keep[val] = False
    train = np.flatnonzero(keep)  # the same rows in storage order (no sort)
    ix = rows.indices[rows.indptr[0] : rows.indptr[-1]]
    used, _hot, _bits = used_keys([ix], n_features, 0)
    keys = np.append(used, n_features) if has_bias else used
    return InPlaceData(keys, rows, train, val, rows.labels, block, streams, has_bias)


def prepare_in_place(part: Any, plan: Plan) -> InPlaceData | None:
    """:class:`InPlaceData` of a partition when the in-place path applies, else None.

    It applies to ma-sgd with one output, one row per step and no L1 (L1 only
    with ``adaptive``), on a
    partition held in memory as one CSR (the ``memory`` level), when the plan
    allows it (:func:`in_place_order`).  The split and keys are cached on
    the worker like prepared rows (``daskangel.models.prepared-cache``).
    """
    if not _applies(part, plan):
        return None
    key = ("in-place", id(part), *split_key(plan))
    d: InPlaceData = PREPARED.get_or_make(
        part, key, lambda: in_place_rows(part.pieces()[0], **split_args(part, plan))
    )
    mk = (plan.task, plan.classes, plan.n_outputs)
    y = d.mapped.get(mk)
    if y is None:  # (~10 ms a fit on 500,000 rows; a bad label is refused here, once)
        y = labels_for(d.rows.labels, plan)
        d.mapped.clear()
        d.mapped[mk] = y
    return replace(
        d, y=y, block=plan.in_place_block, streams=plan.in_place_streams, work=None, work16=None
    )


def _applies(part: Any, plan: Plan) -> bool:
    if plan.in_place_block <= 0 or plan.solver != "ma-sgd":
        return False
    if plan.n_outputs != 1 or plan.kind == SOFTMAX or plan.batch != 1:
        return False
    if plan.l1 != 0.0 and not plan.adaptive:  # (the adaptive kernel is lazy: L1 is fine)
        return False
    return getattr(part, "level", None) == "memory" and len(getattr(part, "chunks", ())) == 1


def in_place_order(n_features: int, per_feature: int = 16) -> tuple[int, int]:
    """``(block, streams)`` for :class:`Plan` from the driver's config: how an epoch
    visits stored rows (:func:`.._core._order.epoch_order`); block 0 when the in-place path
    is off or its workspace (``per_feature`` bytes a feature, adaptive or not) too big."""
    out = []
    for name in ("in-place-block", "in-place-streams"):
        key = f"daskangel.models.{name}"
        v = config.get(key)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise InvalidArgumentError(f"{key}: expected an int >= 1, got {v!r}")
        out.append(v)
    on = config.get("daskangel.models.in-place")
    if not isinstance(on, bool):
        raise InvalidArgumentError(f"daskangel.models.in-place: expected true or false, got {on!r}")
    if not on:
        return 0, 1
    workspace = (int(n_features) + 1) * per_feature
    if workspace > config.get_bytes("daskangel.models.in-place-workspace"):
        return 0, 1
    return out[0], out[1]
