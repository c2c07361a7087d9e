"""A lean call's coroutine run on the binding's loop, its end put on the caller's queue.

The lean paths (:mod:`._rowget`, :mod:`._versions`) make their requests in the
caller's thread and hand one coroutine to the binding's loop.  A
``concurrent.futures.Future`` would tell the caller one loop turn later, through a
callback chain; here the coroutine's task puts an :class:`Outcome` on the caller's
queue itself, the moment it ends.  A getter may share the queue with the replies it
takes as they land (:mod:`._rowget` scatters rows while the loop reads the rest).

Example
-------
>>> import asyncio, queue
>>> async def ok() -> bool:
...     return True
>>> q: queue.SimpleQueue = queue.SimpleQueue()
>>> async def main() -> None:
...     launch(ok(), q.put)
...     await asyncio.sleep(0)
>>> asyncio.run(main())
>>> q.get().ok
True
"""

from __future__ import annotations

import asyncio
import queue
from collections.abc import Awaitable, Callable
from typing import Any

from ._binding import Binding

__all__ = ["Outcome", "launch", "run_lean"]

_running: set[asyncio.Task[None]] = set()  # a task is only weakly held by its loop


class Outcome:
    """How a lean call's coroutine ended: ``ok`` (False: the general path must
    answer) or the ``error`` it raised, to raise in the caller's thread."""

    __slots__ = ("error", "ok")

    def __init__(self, ok: bool, error: BaseException | None) -> None:
        self.ok, self.error = ok, error


async def _report(coro: Awaitable[bool], put: Callable[[Any], None]) -> None:
    try:
        ok = await coro
    except BaseException as e:  # noqa: BLE001 - raised in the caller's thread
        put(Outcome(False, e))
        return
    put(Outcome(ok, None))


def launch(coro: Awaitable[bool], put: Callable[[Any], None]) -> None:
    """Run ``coro`` as a task of the running loop; its :class:`Outcome` goes to ``put``."""
    task = asyncio.ensure_future(_report(coro, put))
    _running.add(task)
    task.add_done_callback(_running.discard)


def run_lean(b: Binding, coro: Awaitable[bool]) -> bool:
    """Run ``coro`` on ``b``'s loop from another thread and wait for it: its result
    (False: the general path must answer), or its error raised here."""
    landed: queue.SimpleQueue[Outcome] = queue.SimpleQueue()
    b.loop.asyncio_loop.call_soon_threadsafe(launch, coro, landed.put)
    got = landed.get()
    if got.error is not None:
        raise got.error
    return got.ok
