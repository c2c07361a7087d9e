"""Model and hybrid parallel SGD: DSGD strata, item blocks rotating inside a group of tasks.

Angel's hybrid parallelism for MF (and Gemulla et al.'s DSGD): the tasks form
``groups`` groups of ``S`` members; the item rows are cut into ``S`` blocks
with about the same number of ratings.  An epoch is ``S`` sub-epochs, one
clock each; in sub-epoch ``s`` the member of rank ``k`` trains only on its
ratings whose item lies in block ``(k + s) mod S``, so inside a group no two
tasks touch the same item rows at once, and every rating is visited once per
epoch.  Each sub-epoch pulls the block's rows the task needs (pruned,
pipelined as in :mod:`._sgd`), trains on them rating by rating and pushes the
deltas; the group's clocks move in lockstep, so the next member to own a block
reads it after the previous one pushed.

``parallelism='model'`` is one group of all the tasks (serialisable updates
under BSP); ``'hybrid'`` is several groups, data parallel between them (their
deltas on the same rows add up on the servers, under BSP / SSP / ASP).

Example
-------
>>> rotation(rank=1, sub_epoch=2, size=3)
0
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import InvalidArgumentError
from ._parts import RatingsPart, user_bounds
from ._plan import Plan
from ._sgd import _Run

__all__ = ["DSGDTask", "rotation", "run_dsgd"]


def rotation(rank: int, sub_epoch: int, size: int) -> int:
    """The item block member ``rank`` of a group of ``size`` trains in ``sub_epoch``."""
    return (rank + sub_epoch) % size


class DSGDTask:
    """``fn(ctx, part)`` of model / hybrid parallel SGD (see the module docstring)."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan

    def __call__(self, ctx: Any, part: RatingsPart) -> dict[str, Any]:
        return _Strata(self.plan, ctx, part).run()


class _Strata(_Run):
    @property
    def rounds(self) -> int:
        return self.plan.n_blocks

    def __init__(self, plan: Plan, ctx: Any, part: RatingsPart) -> None:
        super().__init__(plan, ctx, part)
        d = self.d
        bounds = np.asarray(plan.item_bounds, np.int64)
        items = d.keys[d.slot]
        self.block = (np.searchsorted(bounds, items, side="right") - 1).astype(np.int64)

    def rows_of(self, order: np.ndarray, rnd: int) -> np.ndarray:
        """This member's ratings of sub-epoch ``rnd``: those of its block's items."""
        b = rotation(self.ctx.rank_in_group, rnd, self.plan.n_blocks)
        return order[self.block[order] == b]

    def train_rows(self, rows: np.ndarray) -> float:
        return self.step(rows)


def groups_of(parallelism: str, groups: int | None, n_tasks: int) -> tuple[int, int]:
    """``(groups, group size)`` of a fit with ``n_tasks`` tasks."""
    if parallelism == "model":
        return 1, n_tasks
    g = 2 if groups is None else int(groups)
    if g > n_tasks or n_tasks % g:
        raise InvalidArgumentError(
            f"groups: parallelism='hybrid' needs the {n_tasks} tasks in groups of equal size; "
            f"got groups={g} (set n_tasks to a multiple of it)"
        )
    return g, n_tasks // g


def run_dsgd(ps: Any, plan: Plan, ing: Any, est: Any, sync: Any) -> Any:
    """Train ``plan.epochs`` DSGD epochs on the ingested parts; the job's result."""
    import dataclasses

    from ...train import train

    T = len(ing.parts)
    G, S = groups_of(est.parallelism, est.groups, T)
    bounds = user_bounds(np.asarray(ing.item_counts, np.int64), S)
    plan = dataclasses.replace(plan, n_blocks=S, item_bounds=tuple(int(b) for b in bounds))
    return train(
        ps,
        DSGDTask(plan),
        ing.parts,
        groups=G,
        group_size=S,
        sync=sync,
        epochs=plan.epochs * S,
        progress=est.progress,
        unit="epoch",
        clocks_per_unit=S,
    )
