"""Where a task sits in its job: :class:`TaskSpec`, sent with the task to its worker.

Example
-------
>>> spec = TaskSpec("job", task=3, group=1, rank=1, group_size=2, n_groups=2, staleness=0)
>>> spec.n_tasks
4
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["TaskSpec"]


@dataclass(frozen=True, slots=True)
class TaskSpec:
    """Where a task sits in its job (sent with the task to its worker)."""

    job: str
    task: int
    group: int
    rank: int
    group_size: int
    n_groups: int
    staleness: int | None
    array_staleness: dict[str, int | None] = field(default_factory=dict)
    epochs: int | None = None
    sync: str = "BSP()"

    @property
    def n_tasks(self) -> int:
        return self.n_groups * self.group_size
