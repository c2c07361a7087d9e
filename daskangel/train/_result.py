"""What a training job ends with: each task's outcome, its errors, the :class:`TrainResult`.

A task's future ends with a plain dict (``run_task``'s outcome, or one made
here for a future that was cancelled or raised); :func:`task_error` turns the
first failed one into a :class:`~daskangel.errors.TaskFailedError` naming the
task (group, rank) with its remote traceback, and :func:`make_result` gathers
the outcomes into a :class:`TrainResult` with one history DataFrame.

Example
-------
>>> err = task_error("j", 2, {"task": 3, "error": "ValueError: bad", "traceback": ""})
>>> str(err)
"job 'j': task 3 (group 1, rank 1) failed: ValueError: bad"
>>> mean_metrics({"tasks": [{"stats": {"metrics": {"loss": 1.0}}},
...                         {"stats": {"metrics": {"loss": 2.0}}}]})
{'loss': '1.5'}
"""

from __future__ import annotations

import traceback as tbm
from dataclasses import dataclass
from typing import Any, cast

from distributed import Future

from ..errors import JobAbortedError, TaskFailedError

__all__ = ["TrainResult", "make_result", "mean_metrics", "outcome", "raise_failure", "task_error"]


@dataclass(frozen=True, slots=True)
class TrainResult:
    """What a finished training job returns."""

    job: str
    results: list[Any]  # fn's return value, per task id
    history: Any  # pandas.DataFrame: task, group, clock, time, waited, reported metrics
    wall_time: float  # seconds from submission to the last task's end
    clocks: list[int]  # final clock per task
    max_lead: int  # largest (clock - slowest clock) any task was allowed to run at
    waited: list[float]  # seconds each task spent waiting for slower tasks
    restarts: int = 0  # tasks resubmitted after their worker was lost
    rollbacks: int = 0  # times the job rolled back to a snapshot (recovery="rollback")
    moves: int = 0  # slow tasks restarted on another worker (daskangel.train.reschedule-slow)


def outcome(f: Future, task: int) -> dict[str, Any]:
    """The outcome dict of task ``task``'s finished, failed or cancelled future."""
    if f.status == "finished":
        return cast(dict[str, Any], f.result())
    if f.status == "cancelled":
        return {"task": task, "status": "aborted", "error": "cancelled", "history": []}
    exc = f.exception() if f.status == "error" else None
    tb = f.traceback() if f.status == "error" else None
    return {
        "task": task,
        "status": "error",
        "error": f"{type(exc).__name__}: {exc}" if exc is not None else f"future {f.status}",
        "traceback": "".join(tbm.format_tb(tb)) if tb is not None else "",
        "exception": exc,
        "history": [],
    }


def task_error(job: str, group_size: int, out: dict[str, Any]) -> TaskFailedError:
    """The :class:`TaskFailedError` of a failed task's outcome (cause: its exception)."""
    t = int(out["task"])
    where = f"task {t} (group {t // group_size}, rank {t % group_size})"
    msg = f"job {job!r}: {where} failed: {out.get('error')}"
    tb = out.get("traceback")
    if tb:
        msg += f"\n\nRemote traceback of {where}:\n{tb}"
    err = TaskFailedError(msg)
    exc = out.get("exception")
    if isinstance(exc, BaseException):
        err.__cause__ = exc
    return err


def raise_failure(
    job: str, group_size: int, table: dict[str, Any], outs: dict[int, dict[str, Any]]
) -> None:
    """Raise the job's first task error (the one the scheduler recorded first), or
    :class:`JobAbortedError` when it was stopped otherwise; nothing when it succeeded."""
    err = table.get("error") or {}
    first = err.get("task")
    failed = {t: o for t, o in outs.items() if o["status"] == "error"}
    if failed:
        raise task_error(job, group_size, failed[first] if first in failed else failed[min(failed)])
    if any(o["status"] != "ok" for o in outs.values()) or table["status"] in (
        "failed",
        "aborted",
    ):
        raise JobAbortedError(f"job {job!r} was stopped: {err.get('error', 'unknown reason')}")


def make_result(
    job: str,
    n_tasks: int,
    table: dict[str, Any],
    outs: dict[int, dict[str, Any]],
    wall: float,
    **counts: int,
) -> TrainResult:
    """The :class:`TrainResult` of a finished job (``counts``: restarts, rollbacks, moves)."""
    import pandas as pd

    rows = [r for t in sorted(outs) for r in outs[t]["history"]]
    cols = ["task", "group", "clock", "time", "waited"]
    hist = pd.DataFrame(rows, columns=list(dict.fromkeys(cols + [k for r in rows for k in r])))
    return TrainResult(
        job=job,
        results=[outs[t].get("result") for t in range(n_tasks)],
        history=hist,
        wall_time=wall,
        clocks=list(table["clocks"]),
        max_lead=int(table["max_lead"]),
        waited=[float(i["waited"]) for i in table["tasks"]],
        **counts,
    )


def mean_metrics(table: dict[str, Any]) -> dict[str, str]:
    """Mean over tasks of the numeric metrics they reported last (for the bar)."""
    sums: dict[str, list[float]] = {}
    for info in table.get("tasks", []):
        for k, v in ((info.get("stats") or {}).get("metrics") or {}).items():
            sums.setdefault(k, []).append(float(v))
    return {k: f"{sum(v) / len(v):.4g}" for k, v in sums.items()}
