"""Write-behind: a server acknowledges a validated write and applies it right after.

An increment of a whole 32 MiB block spends ~10 ms adding on the server, and the
two servers of a worker pair share the memory bandwidth.  Applying it before
replying put that time on the caller's path.  A *deferrable* op (registered with
``server_op(name, writes=True, defer=predicate)``), when its predicate accepts the
request, instead validates it on the event loop, under the server lock, and
returns :class:`Deferred`: the reply goes out at once, and the change itself is
queued.  Queued changes are applied one at a time, in the order they were
accepted (small ones on the event loop, large ones in the server's op thread).  Every other operation (gets, psf, snapshots, drops, reads for
``to_dask_array``) first waits for the queued writes (:meth:`WriteBehind.drain`)
while holding the lock; a later deferrable write just queues behind them.

So a caller that saw its write acknowledged and then reads the block reads its
write (read-your-writes), writes stay atomic with respect to reads, and a
request rejected by validation changes nothing, as before: a write only becomes
deferred after every check of it passed.

Example
-------
>>> import asyncio
>>> from concurrent.futures import ThreadPoolExecutor
>>> from collections import defaultdict
>>> class S(WriteBehind):
...     op_stats = defaultdict(lambda: [0, 0.0, 0])
>>> s, log = S(), []
>>> async def go():
...     s.init_behind()
...     s.defer("add", 0, Deferred("ok", lambda: log.append("applied")))
...     log.append("replied")
...     await s.drain()
...     return log
>>> asyncio.run(go())
['replied', 'applied']
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict, deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from .. import config

__all__ = ["DEFERRABLE_OPS", "Deferred", "WriteBehind"]

logger = logging.getLogger(__name__)

# {op_name: predicate(server, kwargs) -> bool}: ops that return Deferred when called
# with defer=True, for the requests their predicate accepts
DEFERRABLE_OPS: dict[str, Callable[[Any, dict[str, Any]], bool]] = {}


@dataclass(frozen=True, slots=True)
class Deferred:
    """A validated write: ``result`` to reply with, ``apply()`` to run afterwards."""

    result: Any
    apply: Callable[[], None]


class WriteBehind:
    """Mixin of :class:`~daskangel.psarray._server.PSServer`: the queue of
    accepted writes not applied yet."""

    address: str = ""
    index: int = 0
    executor: ThreadPoolExecutor
    # {op_name: [calls, seconds, bytes_in_out]}
    op_stats: defaultdict[str, list[float]]

    def init_behind(self) -> None:
        # [(op, in_thread, apply)]: accepted writes waiting to be applied, oldest first
        self._queue: deque[tuple[str, bool, Callable[[], None]]] = deque()
        # True from the first queued write until the queue is empty and applied
        self.behind = False
        # resolved when ``behind`` turns False (made by the first waiter)
        self._idle: asyncio.Future[None] | None = None
        # writes that raised while being applied after their reply (logged)
        self.apply_errors = 0

    def defer(self, op: str, cost: int, d: Deferred, in_thread: bool | None = None) -> Any:
        """Queue ``d.apply`` behind earlier writes; ``d.result``.

        Unless ``in_thread`` says where, writes under
        ``daskangel.server.behind-thread-bytes`` are applied on the event loop,
        after the reply went out (the handler writes its reply before the loop
        runs callbacks); larger ones in the op thread, so the loop keeps
        receiving meanwhile.
        """
        if in_thread is None:
            in_thread = cost >= config.get_bytes("daskangel.server.behind-thread-bytes")
        self._queue.append((op, in_thread, d.apply))
        if not self.behind:
            self.behind = True
            asyncio.get_running_loop().call_soon(self._pump)
        return d.result

    def _pump(self) -> None:
        """Apply the oldest queued write, then come back for the next one."""
        loop = asyncio.get_running_loop()
        if not self._queue:
            self.behind = False
            if self._idle is not None:
                if not self._idle.done():
                    self._idle.set_result(None)
                self._idle = None
            return
        op, in_thread, apply = self._queue.popleft()
        if not in_thread:
            self._apply(op, apply)
            loop.call_soon(self._pump)
            return
        fut = loop.run_in_executor(self.executor, self._apply, op, apply)
        fut.add_done_callback(lambda _: self._pump())

    def _apply(self, op: str, apply: Callable[[], None]) -> None:
        start = time.perf_counter()
        try:
            apply()
        except Exception:  # the caller was answered: all that is left is to say so
            self.apply_errors += 1
            logger.exception(
                "daskangel: server %s#%s failed to apply an accepted %r",
                self.address,
                self.index,
                op,
            )
        self.op_stats[op][1] += time.perf_counter() - start

    async def drain(self) -> None:
        """Wait until every accepted write is applied (call holding the lock).

        Shielded: a cancelled waiter leaves the queue alone.
        """
        while self.behind:
            if self._idle is None:
                self._idle = asyncio.get_running_loop().create_future()
            await asyncio.shield(self._idle)

    def drop_behind(self) -> None:
        """Forget queued writes (the server is closing)."""
        self._queue.clear()
