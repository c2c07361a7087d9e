"""Resuming a training job from a snapshot: ``train(..., resume=url)``.

A clock-driven snapshot "at clock t" holds exactly the writes of every task's
first ``t`` clocks, and its manifest records the job that took it
(``job_state``: tasks, groups, protocol, epochs).  Resuming on any cluster (a
restarted scheduler, a new client) loads every array of the snapshot into the
context (created with their stored layout when missing, see
:meth:`~daskangel.PSContext.load`), checks that the job has the same tasks and
groups, and registers the new job with every task at clock ``t``:
``ctx.epochs()`` then starts there.  A job whose writes depend only on task and
clock (an order-independent BSP workload) therefore ends exactly as the run that
was never interrupted.

.. warning::
   What is not on the parameter server is not in the snapshot: a task's local
   state (its own optimiser state, a random generator not seeded by the clock)
   starts afresh; group mailboxes (leader commands) in flight are not kept.

Example
-------
>>> from daskangel.train._resume import check_state
>>> check_state({"n_tasks": 2, "groups": [0, 1]}, 2, [0, 1], "ckpt")
>>> check_state({"n_tasks": 4, "groups": [0, 1, 2, 3]}, 2, [0, 1], "ckpt")
Traceback (most recent call last):
...
daskangel.errors.InvalidArgumentError: resume: the snapshot ckpt was taken by a job of 4 tasks in groups [0, 1, 2, 3]; this one has 2 tasks in groups [0, 1]
"""

from __future__ import annotations

from typing import Any

from .. import _snapshot_format as fmt
from ..errors import InvalidArgumentError

__all__ = ["check_state", "resume_from"]


def check_state(state: dict[str, Any] | None, n_tasks: int, groups: list[int], url: str) -> None:
    """Refuse a job whose tasks or groups differ from those of the snapshot's job."""
    if not state:
        return  # taken before job state was recorded: the clock is all there is
    if int(state["n_tasks"]) != n_tasks or list(state["groups"]) != list(groups):
        raise InvalidArgumentError(
            f"resume: the snapshot {url} was taken by a job of {state['n_tasks']} tasks in "
            f"groups {list(state['groups'])}; this one has {n_tasks} tasks in groups "
            f"{list(groups)}"
        )


def resume_from(ps: Any, url: str, n_tasks: int, groups: list[int]) -> int:
    """Load the snapshot at ``url`` into ``ps`` and return the clock to resume at.

    ``url`` is a snapshot directory (its newest snapshot) or one version of it.
    Nothing is loaded when the snapshot was not taken at a training clock or
    belongs to a job of another shape.
    """
    if not isinstance(url, str) or not url:
        raise InvalidArgumentError(f"resume: expected a snapshot URL (a str), got {url!r}")
    try:
        version, manifest = fmt.resolve(url)
    except (FileNotFoundError, KeyError) as e:
        raise InvalidArgumentError(f"resume: no snapshot at {url!r} ({e!r})") from None
    clock = manifest.get("clock")
    if clock is None:
        raise InvalidArgumentError(
            f"resume: the snapshot {version} was not taken at a training clock (ps.snapshot() "
            "or ps.save() outside training); take snapshots with PSContext(snapshot_every=N)"
        )
    check_state(manifest.get("job_state"), n_tasks, groups, version)
    ps.load(version)
    return int(clock)
