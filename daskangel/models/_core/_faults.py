"""The kill-a-worker test hook the families' fault-tolerance tests arm.

A family reads ``daskangel.<family>.<step-key>`` (the step its task dies at) and
``daskangel.<family>.exit-marker`` (a file path) from the worker's config once per task
(:meth:`ExitHook.from_config`) and calls :meth:`ExitHook.at` at that point of every
step.  The first task to reach the step on a worker where both are set creates the
marker file and exits its process (after flushing its buffered pushes); every later
task sees the marker and goes on, so the resubmitted task finishes the fit.

Example
-------
>>> hook = ExitHook.from_config("kmeans", "exit-at-iteration")
>>> hook.step is None   # not armed: ``at`` never exits
True
>>> hook.at(None, 3)
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from ... import config

__all__ = ["ExitHook"]


@dataclass(frozen=True, slots=True)
class ExitHook:
    """Exit the process once, at ``step``, unless the file ``marker`` exists."""

    step: int | None
    marker: str | None

    @classmethod
    def from_config(cls, family: str, step_key: str) -> ExitHook:
        """The hook armed by ``daskangel.<family>.<step_key>`` and ``…exit-marker``."""
        step = config.get(f"daskangel.{family}.{step_key}")
        marker = config.get(f"daskangel.{family}.exit-marker")
        return cls(None if step is None else int(step), None if marker is None else str(marker))

    def at(self, ctx: Any, step: int) -> None:
        """Exit the process if armed for ``step`` and no task has exited yet."""
        if self.step is None or self.marker is None or step != self.step:
            return
        try:
            os.close(os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return
        ctx.flush()
        os._exit(1)
