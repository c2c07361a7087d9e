"""The body of one training task, as it runs on its worker.

It builds the :class:`TaskContext` (asking the scheduler for the task's clock,
so a resubmitted task resumes), runs ``fn(ctx, partition)``, pushes what is left
in the update buffer and tells the scheduler the task is done.  A failure is
reported to the clock service, which stops the job: the other tasks get
:class:`~daskangel.errors.JobAbortedError` at their next clock, read wait or
group call and end cleanly; a task moved off a slow worker ends at its clock
with status ``"moved"``.  The task's outcome is returned as a plain dict
(never raised), so the driver can name the task and show its traceback.

Example
-------
>>> out = run_task(spec, fn, partition)                             # doctest: +SKIP
>>> out["status"], out["result"]  # doctest: +SKIP
('ok', 42)
"""

from __future__ import annotations

import pickle
import traceback
from collections.abc import Callable
from typing import Any

from ..errors import JobAbortedError, TaskMovedError
from ..psarray import agent_of
from ..psarray._binding import get_binding
from ..psarray._taskclock import set_task_clock, set_task_fence
from ._context import TaskContext
from ._spec import TaskSpec

__all__ = ["run_task"]


def _picklable(e: BaseException) -> BaseException | None:
    try:
        pickle.dumps(e)
    except Exception:  # noqa: BLE001 - any pickling failure means "send the text only"
        return None
    return e


def run_task(
    spec: TaskSpec, fn: Callable[[TaskContext, Any], Any], partition: Any
) -> dict[str, Any]:
    """Run one task; return ``{"task", "status", "result"|"error", "traceback", "history"}``."""
    binding = get_binding()
    out: dict[str, Any] = {"task": spec.task, "worker": None, "history": []}
    ctx: TaskContext | None = None
    try:
        ctx = TaskContext(spec, binding, agent_of(binding))
        out["worker"] = ctx.worker
        result = fn(ctx, partition)
        ctx._finish()
        out.update(status="ok", result=result)
    except TaskMovedError as e:  # the driver restarts it on another worker
        out.update(status="moved", error=str(e))
    except JobAbortedError as e:
        out.update(status="aborted", error=str(e))
    except BaseException as e:  # noqa: BLE001 - every failure is reported, none is lost
        tb = traceback.format_exc()
        text = f"{type(e).__name__}: {e}"
        if ctx is not None:
            ctx._fail(text, tb)
        out.update(status="error", error=text, traceback=tb, exception=_picklable(e))
    set_task_clock(None)
    set_task_fence(None)
    if ctx is not None:
        out["history"] = ctx.history
    return out
