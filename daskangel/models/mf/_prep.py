"""What a factorisation task derives from its ratings before training, once per partition.

:func:`prepare` turns a :class:`~._parts.RatingsPart` into a :class:`TaskData`:

* the task's *keys*: the sorted distinct item rows its ratings use (training,
  validation and evaluation), the only item rows it ever pulls or pushes
  (Angel's pruned pulls); every rating refers to its item by *slot*, its
  position in the keys;
* a seeded split into training and validation ratings (``validation_fraction``),
  the training ratings laid out once in a random order, so that an epoch's
  order of blocks (:func:`~daskangel.models._core.epoch_order`) reads them
  sequentially yet mixes users and items; with ``runs=True`` (SGD,
  ``daskangel.models.mf.user-runs``) each user's ratings are laid out together
  (:func:`user_runs`: users in a seeded random order, a user's ratings in a
  random order), so a block of the epoch's order updates one or two user rows
  that stay in the cache instead of one row from memory per rating;
* with ``bounds`` (SGD, ``daskangel.models.mf.item-bands``), the item rows cut
  into *bands* (item rows ``bounds[b] .. bounds[b+1]-1``, about the same ratings
  each): the training ratings regrouped band by band (stably: user by user inside
  a band), ``band_starts`` where each band's ratings start in that layout and
  ``band_slots`` where its slots start; a clock that trains one band touches one
  contiguous range of slots, whose item rows (a quarter of the task's at four
  bands) stay in the core's L2 cache while it trains (:func:`band_blocks`);
* a random *group* per key, about ``pull_rows`` keys each: a clock pulls the
  item rows it needs group by group, pipelined (``get_iter``), and trains on the
  ratings of a group as soon as its rows are in.

The result is cached with the partition (:data:`~daskangel.models._core.PREPARED`).

Example
-------
>>> from daskangel.models.mf._parts import make_part
>>> p = make_part(0, 0, 2, np.array([0, 1, 1]), np.array([5, 5, 9]), np.ones(3, np.float32), 10)
>>> d = prepare(p, seed=0, val_fraction=0.0, pull_rows=1)
>>> d.keys.tolist(), d.n_groups
([5, 9], 2)
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .._core import PREPARED, SHUFFLE_BLOCK, split_ids
from ._kernels import group_by_slot
from ._parts import RatingsPart

__all__ = ["TaskData", "band_blocks", "by_band", "prepare", "user_runs"]


@dataclass(frozen=True, slots=True, eq=False)
class TaskData:
    """One task's ratings with item slots (see the module docstring)."""

    keys: np.ndarray  # int64 sorted item rows the task uses
    u: np.ndarray  # int32 local user per training rating (random order)
    slot: np.ndarray  # int32 item slot per training rating
    r: np.ndarray  # float32
    vu: np.ndarray  # validation ratings (split off the training ones)
    vslot: np.ndarray
    vr: np.ndarray
    eu: np.ndarray  # evaluation ratings (eval_set): -1 = unknown user / item
    eslot: np.ndarray
    er: np.ndarray
    group: np.ndarray  # int32 pull group per slot
    n_groups: int
    # item bands (empty without): where each band's training ratings start in the
    # layout, and where its slots start (both n_bands + 1)
    band_starts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    band_slots: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))

    @property
    def n_bands(self) -> int:
        return max(0, int(self.band_starts.shape[0]) - 1)

    @property
    def n_train(self) -> int:
        return int(self.r.shape[0])

    @property
    def nbytes(self) -> int:
        arrays = (self.keys, self.u, self.slot, self.r, self.vu, self.vslot, self.vr)
        return int(sum(a.nbytes for a in arrays) + self.eslot.nbytes * 3 + self.group.nbytes)

    def slots_of(self, rows: np.ndarray) -> np.ndarray:
        """Slots of item rows the task knows."""
        return np.searchsorted(self.keys, rows)


def _slots(keys: np.ndarray, items: np.ndarray) -> np.ndarray:
    return np.searchsorted(keys, items).astype(np.int32)


def user_runs(order: np.ndarray, u: np.ndarray, n_users: int, seed: list[int]) -> np.ndarray:
    """``order`` (rating indices) stably regrouped user by user, the users in a seeded
    random order: each user's ratings stay in their order in ``order``, together.

    Example
    -------
    >>> user_runs(np.array([0, 1, 2, 3]), np.array([0, 1, 0, 1], np.int32), 2, [0]).tolist()
    [0, 2, 1, 3]
    """
    rank = np.random.default_rng(seed).permutation(max(int(n_users), 1)).astype(np.int32)
    out, _ = group_by_slot(np.asarray(order, np.int64), u, rank, max(int(n_users), 1))
    return np.asarray(out)


def by_band(
    order: np.ndarray, slot: np.ndarray, band_of_slot: np.ndarray, n_bands: int
) -> tuple[np.ndarray, np.ndarray]:
    """``order`` (rating indices) stably regrouped band by band (``band_of_slot``: the
    band of each slot, ``slot``: each rating's); the bands' starts (``n_bands + 1``).

    Example
    -------
    >>> o, s = by_band(np.arange(4), np.array([1, 0, 1, 0], np.int32), np.array([0, 1]), 2)
    >>> o.tolist(), s.tolist()
    ([1, 3, 0, 2], [0, 2, 4])
    """
    g = np.asarray(band_of_slot, np.int32)
    out, starts = group_by_slot(np.asarray(order, np.int64), slot, g, max(1, int(n_bands)))
    return np.asarray(out), np.asarray(starts, np.int64)


def band_blocks(
    starts: np.ndarray, bands: np.ndarray, seed: list[int], block: int = SHUFFLE_BLOCK
) -> list[np.ndarray]:
    """An epoch's visit of a banded layout: band ``bands[0]``'s ratings, then
    ``bands[1]``'s ..., each band's in blocks of ``block`` adjacent ratings in a
    seeded random order; per band visited, the first rating of each of its blocks
    in that order (int64).  The blocks of band ``b`` spell out
    ``epoch_order(n_b, [*seed, b]) + starts[b]``
    (:func:`~daskangel.models._core.epoch_order`); :func:`~._kernels.sgd_blocks`
    trains on them directly and :func:`~._kernels.fill_blocks` writes the order.

    Example
    -------
    >>> [b.tolist() for b in band_blocks(np.array([0, 2, 5]), np.array([1, 0]), [0], 2)]
    [[2, 4], [0]]
    """
    out = []
    for b in np.asarray(bands, np.int64):
        s0, s1 = int(starts[b]), int(starts[b + 1])
        nb = -(-(s1 - s0) // int(block))
        perm = np.random.default_rng([*seed, int(b)]).permutation(nb)
        out.append(s0 + perm.astype(np.int64) * int(block))
    return out


def _make(
    part: RatingsPart,
    seed: int,
    val_fraction: float,
    pull_rows: int,
    runs: bool,
    bounds: tuple[int, ...] = (),
) -> TaskData:
    known = part.eval_i >= 0
    keys = np.unique(np.concatenate([part.i, part.eval_i[known]]).astype(np.int64))
    train, val = split_ids(part.n_ratings, index=part.task, fraction=val_fraction, seed=seed)
    if runs:
        train = user_runs(train, part.u, part.n_users, [int(seed) & 0xFFFFFFFF, 7907, part.task])
    eslot = np.full(part.eval_i.shape[0], -1, np.int32)
    eslot[known] = _slots(keys, part.eval_i[known])
    nk = keys.shape[0]
    rows = max(1, int(pull_rows))
    n_groups = max(1, -(-nk // rows))
    rng = np.random.default_rng([int(seed) & 0xFFFFFFFF, 104729, int(part.task)])
    group = (rng.permutation(nk) // rows).astype(np.int32)
    slot = _slots(keys, part.i[train])
    band_starts = band_slots = np.zeros(0, np.int64)
    if len(bounds) > 2:
        nb = len(bounds) - 1
        edges = np.asarray(bounds, np.int64)
        band_of_slot = np.searchsorted(edges, keys, side="right") - 1
        perm, band_starts = by_band(np.arange(slot.shape[0]), slot, band_of_slot, nb)
        train, slot = train[perm], slot[perm]
        band_slots = np.searchsorted(keys, edges).astype(np.int64)
    return TaskData(
        keys,
        part.u[train],
        slot,
        part.r[train],
        part.u[val],
        _slots(keys, part.i[val]),
        part.r[val],
        part.eval_u,
        eslot,
        part.eval_r,
        group,
        n_groups,
        band_starts,
        band_slots,
    )


def prepare(
    part: RatingsPart,
    *,
    seed: int,
    val_fraction: float,
    pull_rows: int,
    runs: bool = False,
    bounds: tuple[int, ...] = (),
) -> TaskData:
    """The task data of ``part`` (made once per partition and split, then cached);
    ``runs``: the training ratings in :func:`user_runs` (SGD); ``bounds``: the item
    rows where the bands start, and the end (SGD; fewer than 3: no bands)."""
    b = tuple(int(x) for x in bounds)
    key = ("mf", id(part), int(seed), float(val_fraction), int(pull_rows), bool(runs), b)
    return PREPARED.get_or_make(
        part, key, lambda: _make(part, seed, val_fraction, pull_rows, bool(runs), b)
    )
