"""The ratings one training task holds: whole users, their ratings, and held-out ones.

Ratings are partitioned *by user*: task ``t`` gets the users of rows
``bounds[t] .. bounds[t+1]-1`` of the user matrix (a contiguous range, chosen so
that every task has about the same number of ratings) and every rating of those
users, so a task owns its users' factors for the whole fit.  A
:class:`RatingsPart` is what a task receives; :func:`split_by_user` cuts encoded
ratings (user row, item row, value) into parts on one machine, and
:mod:`._distributed` does the same on the workers for dask and Dataset input.

Duplicate ``(user, item)`` pairs: **the last one wins** (the rating that comes
last in the input, in row order and, for dask / Dataset input, partition order);
:func:`last_wins` applies the rule before training.

Example
-------
>>> u = np.array([0, 1, 1, 2]); i = np.array([0, 0, 1, 0]); r = np.ones(4, np.float32)
>>> b = user_bounds(np.bincount(u, minlength=3), 2)
>>> b.tolist()
[0, 2, 3]
>>> [p.n_ratings for p in split_by_user(u, i, r, b)]
[3, 1]
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["RatingsPart", "last_wins", "make_part", "split_by_user", "user_bounds"]


@dataclass(frozen=True, slots=True, eq=False, weakref_slot=True)
class RatingsPart:
    """One task's ratings (see the module docstring); arrays are read-only by convention."""

    task: int
    user0: int  # first user row of the task
    n_users: int  # users rows user0 .. user0 + n_users - 1
    u: np.ndarray  # int32: user row - user0, per rating (sorted)
    i: np.ndarray  # int32: item row, per rating
    r: np.ndarray  # float32: the rating
    # held-out ratings given to fit (eval_set): user row - user0 (-1: unknown user),
    # item row (-1: unknown item), rating
    eval_u: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    eval_i: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    eval_r: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))

    @property
    def n_ratings(self) -> int:
        return int(self.r.shape[0])

    @property
    def users(self) -> np.ndarray:
        """The user rows of this task (int64)."""
        return np.arange(self.user0, self.user0 + self.n_users, dtype=np.int64)

    @property
    def nbytes(self) -> int:
        arrays = (self.u, self.i, self.r, self.eval_u, self.eval_i, self.eval_r)
        return int(sum(a.nbytes for a in arrays))

    def __repr__(self) -> str:
        return (
            f"RatingsPart<task {self.task}, users {self.user0}..{self.user0 + self.n_users - 1}, "
            f"{self.n_ratings} ratings, {self.eval_r.shape[0]} held out>"
        )


def user_bounds(counts: np.ndarray, n_tasks: int) -> np.ndarray:
    """``n_tasks + 1`` user-row boundaries giving each task about the same ratings."""
    n = int(counts.shape[0])
    cum = np.cumsum(counts, dtype=np.int64)
    total = int(cum[-1]) if n else 0
    targets = (total * np.arange(1, n_tasks, dtype=np.float64)) / n_tasks
    inner = np.searchsorted(cum, targets, side="left") + 1
    b = np.concatenate([[0], np.minimum(inner, n), [n]]).astype(np.int64)
    return np.maximum.accumulate(b)


def last_wins(
    u: np.ndarray, i: np.ndarray, r: np.ndarray, n_items: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Ratings sorted by user (then item), keeping the last of duplicate pairs."""
    key = u.astype(np.int64) * max(int(n_items), 1) + i.astype(np.int64)
    order = np.argsort(key, kind="stable")
    k = key[order]
    if k.shape[0] > 1:
        keep = np.empty(k.shape[0], np.bool_)
        keep[:-1] = k[1:] != k[:-1]  # the last of each run of equal keys
        keep[-1] = True
        if not keep.all():
            order = order[keep]
    return u[order], i[order], r[order]


def make_part(
    task: int,
    user0: int,
    user1: int,
    u: np.ndarray,
    i: np.ndarray,
    r: np.ndarray,
    n_items: int,
    evals: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
) -> RatingsPart:
    """A task's part from its ratings (global user rows ``user0 <= u < user1``)."""
    u, i, r = last_wins(u, i, r, n_items)
    ev: dict[str, np.ndarray] = {}
    if evals is not None:
        eu, ei, er = evals
        ev = {
            "eval_u": np.where(eu >= 0, eu - user0, -1).astype(np.int32),
            "eval_i": np.asarray(ei, np.int32),
            "eval_r": np.asarray(er, np.float32),
        }
    return RatingsPart(
        int(task),
        int(user0),
        int(user1 - user0),
        (u - user0).astype(np.int32),
        i.astype(np.int32),
        r.astype(np.float32),
        **ev,
    )


def task_of(u: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """The task of each user row (unknown users, ``-1``, go to task 0)."""
    t = np.searchsorted(bounds, u, side="right") - 1
    return np.clip(t, 0, bounds.shape[0] - 2)


def split_by_user(
    u: np.ndarray,
    i: np.ndarray,
    r: np.ndarray,
    bounds: np.ndarray,
    n_items: int | None = None,
    evals: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
) -> list[RatingsPart]:
    """Encoded ratings cut into one :class:`RatingsPart` per task (``bounds``)."""
    n_tasks = bounds.shape[0] - 1
    ni = int(n_items) if n_items is not None else (int(i.max()) + 1 if i.shape[0] else 0)
    t = task_of(u, bounds)
    order = np.argsort(t, kind="stable")
    cuts = np.searchsorted(t[order], np.arange(n_tasks + 1))
    ecuts = None
    if evals is not None:
        et = task_of(evals[0], bounds)
        eorder = np.argsort(et, kind="stable")
        ecuts = np.searchsorted(et[eorder], np.arange(n_tasks + 1))
    parts = []
    for k in range(n_tasks):
        sel = order[cuts[k] : cuts[k + 1]]
        ev = None
        if evals is not None and ecuts is not None:
            esel = eorder[ecuts[k] : ecuts[k + 1]]
            ev = (evals[0][esel], evals[1][esel], evals[2][esel])
        parts.append(
            make_part(k, int(bounds[k]), int(bounds[k + 1]), u[sel], i[sel], r[sel], ni, ev)
        )
    return parts
