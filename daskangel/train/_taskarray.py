"""A PSArray seen from a training task: :class:`TaskArray` (``ctx.array(name)``).

Reads wait, if the array's protocol asks, until the slowest task of the job
allows a read at this task's clock, then go through the worker's shared agent
(pull cache, de-duplication, pipelining) with that floor; ``own_writes`` raises
the floor to this clock (read-my-writes).  Increments go to the worker's merged
update buffer, tagged with the task and its clock.

Example
-------
>>> def step(ctx, part):                                            # doctest: +SKIP
...     w = ctx.array("w")                                          # doctest: +SKIP
...     w.increment(-0.1 * grad(w.get(cols=part.keys)), cols=part.keys)  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol, Unpack

from ..psarray import KeySet, PSAgent, PSArray, PSFuture
from ..psarray._array import WriteOptions
from ..psarray._binding import Binding

__all__ = ["TaskArray"]


class _Task(Protocol):
    """What a :class:`TaskArray` needs of its :class:`~._context.TaskContext` (typed
    here, not imported, so ``_context`` and ``_taskarray`` import one way)."""

    _binding: Binding
    _agent: PSAgent
    _key: tuple[str, int]
    epoch: int

    @property
    def job(self) -> str: ...

    @property
    def task_id(self) -> int: ...

    @property
    def iteration(self) -> int: ...

    def _read_floor(self, name: str) -> int | None: ...


class TaskArray:
    """A PSArray seen from a task: reads obey the job's clocks, writes are buffered.

    Reads go through the worker's agent (cache, de-duplication, pipelining) after
    waiting, if needed, until the slowest task allows a read at this task's clock
    under the array's protocol.  ``increment`` adds to the worker's merged update
    buffer, pushed by size and at ``ctx.clock()``.  Any other attribute
    (``shape``, ``set``, ``psf`` ...) is the plain :class:`PSArray`'s.
    """

    def __init__(self, ctx: _Task, name: str) -> None:
        self._ctx = ctx
        self.name = name
        self._array = PSArray(name, binding=ctx._binding)

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._array, attr)

    @property
    def plain(self) -> PSArray:
        """The :class:`PSArray` underneath: its reads skip the clock cache and the sync
        floor and go to the servers (for rows another task of this worker changed since
        the clock began, as in model-parallel rounds)."""
        return self._array

    def __repr__(self) -> str:
        return f"TaskArray<{self.name!r}, task {self._ctx.task_id}, clock {self._ctx.iteration}>"

    def get(
        self, rows: Any = None, cols: Any = None, *, own_writes: bool = False, cache: bool = True
    ) -> Any:
        """Pull like :meth:`PSArray.get`; ``cols`` may be a :class:`KeySet`.

        ``own_writes=True``: the read holds every update this task pushed at its
        earlier clocks (read-my-writes), see :meth:`get_iter`.  ``cache=False``: past
        the worker's pull cache, one request a block (after the same wait).
        """
        c = self._ctx
        floor = self._floor(own_writes)
        return c._agent.get(self.name, rows, cols, job=c.job, floor=floor, task=c._key, cache=cache)

    def get_iter(
        self,
        rows: Any = None,
        batch: int = 1024,
        *,
        ordered: bool = False,
        own_writes: bool = False,
    ) -> Iterator[tuple[Any, Any]]:
        """Pipelined pull of rows (see :meth:`PSAgent.get_iter`).

        ``own_writes=True``: the rows hold every update this task pushed at its
        earlier clocks.  Under SSP(s) the worker's pull cache serves a copy fetched
        once the slowest task had reached ``c - s``, which may predate this task's
        own pushes of clocks ``c - s .. c - 1``: a task that trains on its pulled
        rows and pushes deltas (MF SGD) then re-applies the steps it already made
        (on the Netflix-shaped set, SSP(2) ended 0.0003-0.0098 RMSE above BSP).  With
        ``own_writes`` a cached copy serves only if fetched once every task had
        reached this clock (after this task's last push); the wait is still the
        protocol's.

        .. warning:: Without ``own_writes`` an SSP read is within the staleness
           bound but may miss this task's own recent pushes.
        """
        c = self._ctx
        floor = self._floor(own_writes)
        return c._agent.get_iter(
            self.name, rows, batch, job=c.job, floor=floor, task=c._key, ordered=ordered
        )

    def _floor(self, own_writes: bool) -> int | None:
        """The read's floor (after waiting for it): ``c - s``, or with ``own_writes``
        this clock (a copy fetched after this task's last push)."""
        c = self._ctx
        floor = c._read_floor(self.name)
        if own_writes and floor is not None:
            floor = max(floor, int(c.iteration))
        return floor

    def key_set(self, cols: Any) -> KeySet:
        """Register a key set for pruned pulls: ``get(cols=key_set)`` then sends a tag."""
        return self._ctx._agent.key_set(self.name, cols)

    def increment(
        self, values: Any, rows: Any = None, cols: Any = None, **options: Unpack[WriteOptions]
    ) -> None:
        """Add to the worker's update buffer (validated now, pushed by size or at clock);
        ``options`` as :meth:`PSArray.increment`'s."""
        c = self._ctx
        c._agent.increment(
            self.name,
            values,
            rows,
            cols,
            job=c.job,
            clock=c.iteration,
            task=c._key,
            epoch=c.epoch,
            **options,
        )

    def increment_now(
        self, values: Any, rows: Any = None, cols: Any = None, *, casting: str | None = None
    ) -> PSFuture:
        """An increment sent now, past the update buffer; ``result()`` once applied.

        Fenced by this task's clock and run as :meth:`increment` is, and counted as
        its push; ``ctx.clock()`` does not wait for it (wait on the future first).
        For a whole dense vector pushed once a clock (merging it into the buffer
        costs more than sending it).
        """
        c = self._ctx
        return c._agent.increment_now(self.name, values, rows, cols, task=c._key, casting=casting)
