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

A model resumes the same way, ``model.fit(X, y, resume=url)``: the fit makes its
arrays afresh under new names (``<family>-<uuid>.w`` ...) and runs its job
inside :func:`resuming`, which hands ``url`` to that job's ``train()``.  The
manifest lists the arrays the snapshot's context held in creation order
(``job_state["arrays"]``); those of the snapshot missing here are matched, in
that order, with those of this context missing from the snapshot (same shape,
dtype and kind, else the resume is refused) and loaded under their names here
(:func:`match_arrays`).  Arrays created inside :func:`resuming` are cut into
blocks as the snapshot's arrays they will hold from the start
(:func:`daskangel._resuming.stored_layout`), so a fit resumed on a cluster of
another size makes each array once and its handles stay valid.  An array made
before (``train(ps, fn, data, resume=url)`` on arrays created outside
:func:`resuming`) and cut otherwise is dropped and made again with the
snapshot's layout (:func:`relayout`); the context's handles to it follow the new
array.  A deterministic fit therefore ends with the model the uninterrupted fit
made.

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

import json
from typing import Any

from .. import _snapshot_format as fmt
from .._resuming import check_url, kind_of, resuming, take_pending
from ..errors import InvalidArgumentError

__all__ = [
    "check_state", "match_arrays", "relayout", "resume_from", "resuming", "take_pending",
]  # fmt: skip


def match_arrays(
    stored: list[str], kinds: dict[str, Any], here: list[str], here_kinds: dict[str, Any]
) -> dict[str, str]:
    """``{stored name: name here}`` for the stored arrays missing here, matched in
    creation order with the arrays here missing from the snapshot.

    ``stored`` / ``here``: names in creation order; ``kinds``: ``(shape, dtype,
    sparse)`` per name.  Empty when nothing here is missing (every stored array
    is loaded under its own name).  Raises :class:`InvalidArgumentError` when the
    two lists differ in length or kind.

    >>> match_arrays(["lr-a.w", "lr-a.m"], {"lr-a.w": 1, "lr-a.m": 2},
    ...              ["lr-b.w", "lr-b.m"], {"lr-b.w": 1, "lr-b.m": 2})
    {'lr-a.w': 'lr-b.w', 'lr-a.m': 'lr-b.m'}
    """
    have = set(here)
    old = [n for n in stored if n not in have]
    new = [n for n in here if n not in set(stored)]
    if not old or not new:
        return {}
    if len(old) != len(new) or any(
        kinds[a] != here_kinds[b] for a, b in zip(old, new, strict=True)
    ):
        raise InvalidArgumentError(
            "resume: the snapshot's arrays "
            f"{[(n, kinds[n]) for n in old]} do not match this job's "
            f"{[(n, here_kinds[n]) for n in new]} (another model, other parameters or "
            "other data than the run that took the snapshot)"
        )
    return dict(zip(old, new, strict=True))


def relayout(
    ps: Any, rename: dict[str, str], stored_layouts: dict[str, Any], order: list[str]
) -> list[str] | None:
    """Drop the fresh arrays ``rename`` loads into when any is partitioned otherwise
    than its stored array (``stored_layouts``); return the stored names to load,
    in creation order (``order``), so that :meth:`PSContext.load` makes them again
    with the stored layouts.  ``None``: every layout matches, nothing dropped (a
    fit's arrays, made inside :func:`resuming` with the stored layouts)."""
    here = {new: ps.get_array(new).meta.to_dict()["layout"] for new in rename.values()}
    same = all(
        json.dumps(stored_layouts[old], sort_keys=True) == json.dumps(here[new], sort_keys=True)
        for old, new in rename.items()
    )
    if same:
        return None
    for new in rename.values():  # made by this fit, empty: the load fills them anyway
        ps.drop(new)
    return list(order)


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
    check_url(url)
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
    state = manifest.get("job_state") or {}
    check_state(state, n_tasks, groups, version)
    stored = list(state.get("arrays") or manifest["arrays"])
    kinds = {n: kind_of(manifest["arrays"][n]) for n in stored}
    here = list(ps.client.sync(ps._scheduler.daskangel_list, ctx=ps.id, created=True))
    here_kinds = {n: kind_of(ps.get_array(n).meta.to_dict()) for n in here if n not in kinds}
    rename = match_arrays(stored, kinds, here, {**kinds, **here_kinds})
    layouts = {n: manifest["arrays"][n]["layout"] for n in rename}
    arrays = relayout(ps, rename, layouts, stored) if rename else None
    ps.load(version, arrays=arrays, rename=rename or None)
    if arrays is not None:  # the handles given out for the dropped arrays: to the new ones
        made = set(rename.values())
        for h in list(getattr(ps, "_handles", ())):
            if h.name in made:
                h._uid = None
    return int(clock)
