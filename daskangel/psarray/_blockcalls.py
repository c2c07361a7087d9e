"""Requests routed by block, with recovery: :class:`BlockCalls`, mixed into
:class:`~._binding.Binding`.

``call_blocks`` groups a request's parts by the server holding each block (one
message a server, sent concurrently), watches the calls for a server declared lost
or a call past ``daskangel.client.call-timeout``, and resends to wherever the
blocks live once the metadata says they moved, were rebuilt after a lost server, or
finished a hand-off.  Writes carry tags the servers apply once, so resending is
safe.

Example
-------
>>> _into({0: (8, None), 1: (16, None)}, [0, 1]) is None  # no part has a target
True
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
from distributed.comm.core import CommClosedError

from .. import config
from .._wire import check_wire_config
from ..errors import BlockMovingError, ServerLostError, StaleLayoutError
from ._meta import ArrayMeta, ServerId

__all__ = ["BlockCalls", "fast_path_held"]


class BlockCalls:
    """Block-routed calls of a :class:`~._binding.Binding`: it provides the
    scheduler handle, the metadata cache and ``meta`` / ``call``."""

    scheduler: Any
    # {array_name: ArrayMeta}
    metas: dict[str, ArrayMeta]

    async def meta(self, name: str, refresh: bool = False) -> ArrayMeta:
        raise NotImplementedError

    async def call(
        self,
        server: ServerId,
        op: str,
        cost: int,
        transport: str,
        into: tuple[list[int], list[np.ndarray | None]] | None = None,
        **kwargs: Any,
    ) -> Any:
        raise NotImplementedError

    async def call_blocks(
        self,
        name: str,
        op: str,
        by_block: dict[int, dict[str, Any]],
        cost: dict[int, int],
        extra: dict[str, Any],
        into: dict[int, tuple[int, np.ndarray | None]] | None = None,
        resend: bool = True,
    ) -> dict[int, Any]:
        """Send each block's part to its server, one message per server, concurrently.

        ``by_block`` is ``{block_id: part}``; parts of blocks on the same server go in
        one message as ``parts=[...]``.  Returns ``{block_id: result}`` when the op
        returns a list (one result per part), else ``{}``.  ``into`` is
        ``{block_id: (result bytes, target array or None)}``: results that may be
        read from the socket straight into their place in the caller's output.

        If a server no longer holds a block (it moved) or cannot be reached, the
        metadata is refreshed and that server's parts are resent once to wherever
        the blocks live now.  A server that rejects a stale block applied none of
        the parts, and writes carry a tag the server uses to apply them only once,
        so resending is safe.  A block being handed to another server is waited
        for.  With ``resend=False`` nothing is resent: a moving block raises
        :class:`BlockMovingError` at once and a moved one :class:`StaleLayoutError`
        once the new routing is known (a two-phase prepare is redone whole under a
        new transaction: it must not hold blocks while waiting for a move that may
        wait for them, and parts resent under its transaction to a server that
        prepared it already would be taken for a repeat and skipped).
        """
        check_wire_config()  # a bad framing key fails here, before any message leaves
        loop = asyncio.get_running_loop()
        deadline = loop.time() + config.get_seconds("daskangel.client.recovery-wait")
        meta = await self.meta(name)
        done: dict[int, Any] = {}
        pending = by_block
        while True:
            meta = await self._usable(meta, pending, deadline)
            groups: dict[ServerId, list[int]] = {}
            for b in pending:
                groups.setdefault(meta.servers[b], []).append(b)
            calls = [
                self.call(
                    s,
                    op,
                    sum(cost.get(b, 0) for b in blocks),
                    meta.transport,
                    None if into is None else _into(into, blocks),
                    array=name,
                    parts=[pending[b] for b in blocks],
                    **extra,
                    **({"uid": meta.uid} if meta.uid else {}),
                )
                for s, blocks in groups.items()
            ]
            results = await self._watched(name, meta, list(groups), calls)
            stale: list[int] = []
            unreachable: dict[ServerId, BaseException] = {}
            moving = False
            for (s, blocks), r in zip(groups.items(), results, strict=True):
                if isinstance(r, StaleLayoutError):
                    stale.extend(blocks)
                    moving = moving or isinstance(r, BlockMovingError)
                elif isinstance(r, (OSError, CommClosedError)):
                    stale.extend(blocks)
                    unreachable[s] = r
                elif isinstance(r, BaseException):
                    raise r
                elif isinstance(r, (list, tuple)):
                    done.update(zip(blocks, r, strict=True))
            if not stale:
                return done
            pending = {b: by_block[b] for b in stale}
            remaining = deadline - loop.time()
            fresh = await self.meta(name, refresh=True)
            if fresh.uid != meta.uid:
                # planned for an array since dropped: the parts may not fit the new one
                raise StaleLayoutError(
                    f"array {name!r} was dropped and created again while this request was "
                    "made for the old one (shape or dtype may differ); its metadata is now "
                    "refreshed here: make the request again"
                )
            if moving and not resend and fresh.generation == meta.generation:
                raise BlockMovingError(
                    f"array {name!r}: blocks {stale[:10]} are being moved to another server"
                )
            if (unreachable or moving) and fresh.generation == meta.generation and remaining > 0:
                # the scheduler has not noticed yet (a lost server), or the blocks are
                # being handed to another server: wait for the new routing
                fresh = await self._wait(name, meta.generation, remaining)
            if fresh.generation == meta.generation or remaining <= 0:
                if not unreachable:
                    raise StaleLayoutError(
                        f"array {name!r}: blocks {stale[:10]} not found on their servers"
                    )
                s, err = next(iter(unreachable.items()))
                raise ServerLostError(
                    f"array {name!r}: PS server {s} is unreachable ({err!r}) and its "
                    "blocks were not moved within daskangel.client.recovery-wait"
                ) from err
            if not resend:
                raise StaleLayoutError(
                    f"array {name!r}: blocks {stale[:10]} moved; make the request again"
                )
            meta = fresh

    async def _watched(
        self, name: str, meta: ArrayMeta, servers: list[ServerId], calls: list[Any]
    ) -> list[Any]:
        """Run the calls (concurrently); results or exceptions, in order.

        No task is made for a single call: a timer fires after
        ``daskangel.client.liveness-check`` and, while the calls are pending, asks
        the registry whether one of their servers was declared lost (a hung worker
        never closes its connection).  If so, or once ``daskangel.client.call-timeout``
        has passed, the waiting is cancelled: every call is then reported
        unreachable (and resent by the caller: writes carry tags, so resending is
        safe) or a :class:`TimeoutError` is raised.
        """
        loop = asyncio.get_running_loop()
        check = config.get_seconds("daskangel.client.liveness-check")
        limit = loop.time() + config.get_seconds("daskangel.client.call-timeout")
        # Everything the timer callbacks share lives in ``state``, which is cleared
        # on the way out: the callbacks then hold no path back to this task, whose
        # result (a large get's output) must be freed as soon as the caller drops
        # it, not at the next cyclic garbage collection.
        state: dict[str, Any] = {"why": None, "probe": None, "task": asyncio.current_task()}

        def fire() -> None:
            state["probe"] = asyncio.ensure_future(probe())

        async def probe() -> None:
            if loop.time() > limit:
                state["why"] = "timeout"
            else:
                fresh = await self.meta(name, refresh=True)
                gone = {fresh.servers[b] for b in fresh.lost}
                gone |= set(meta.servers) - set(fresh.servers)
                if not any(s in gone for s in servers):
                    if "fire" in state:  # not finished meanwhile
                        state["timer"] = loop.call_later(check, state["fire"])
                    return
                state["why"] = "lost"
            task = state.get("task")
            if task is not None:
                task.cancel()

        if not calls:
            return []
        state["fire"] = fire
        state["timer"] = loop.call_later(check, fire)
        try:
            # the other calls become tasks (started on the loop's next turn); the first
            # runs here at once, so its request leaves without waiting for that turn
            rest = [asyncio.ensure_future(c) for c in calls[1:]]
            try:
                try:
                    first = await calls[0]
                except Exception as e:  # noqa: BLE001 - sorted out by the caller, as with gather
                    first = e
                return [first, *await asyncio.gather(*rest, return_exceptions=True)]
            except BaseException:
                for t in rest:
                    t.cancel()
                    t.add_done_callback(_consume)  # nobody awaits it any more
                raise
        except asyncio.CancelledError:
            me = state["task"]
            if state["why"] is None or me is None:
                raise
            me.uncancel()
            if state["why"] == "timeout":
                raise TimeoutError(
                    f"array {name!r}: a call to {servers} took longer than "
                    "daskangel.client.call-timeout"
                ) from None
            return [ConnectionError("the server was declared lost during the call") for _ in calls]
        finally:
            state["timer"].cancel()
            p = state["probe"]
            if p is not None and not p.done() and p is not asyncio.current_task():
                p.cancel()
            state.clear()

    async def _wait(self, name: str, generation: int, timeout: float) -> ArrayMeta:
        d = await self.scheduler.daskangel_wait_meta(
            name=name, generation=generation, timeout=timeout
        )
        m = self.metas[name] = ArrayMeta.from_dict(d)
        return m

    async def _usable(self, meta: ArrayMeta, blocks: dict[int, Any], deadline: float) -> ArrayMeta:
        """``meta`` once no block of the request is lost: waits for a running
        recovery, raises :class:`ServerLostError` when nothing can rebuild them."""
        loop = asyncio.get_running_loop()
        refreshed = False
        while True:
            lost = sorted(b for b in blocks if b in meta.lost)
            if not lost:
                return meta
            remaining = deadline - loop.time()
            if meta.recovering and remaining > 0:
                meta = await self._wait(meta.name, meta.generation, remaining)
                continue
            if not refreshed:  # the cached metadata may predate a finished recovery
                meta = await self.meta(meta.name, refresh=True)
                refreshed = True
                continue
            servers = sorted({str(meta.servers[b]) for b in lost})
            note = f" ({meta.recovery_note})" if meta.recovery_note else ""
            why = (
                f"rebuilding them failed: {meta.recovery_error}"
                if meta.recovery_error
                else "recovery did not finish within daskangel.client.recovery-wait" + note
                if meta.recovering
                else meta.recovery_note or "there is no snapshot to rebuild them from"
            )
            raise ServerLostError(
                f"array {meta.name!r}: PS server(s) {', '.join(servers)} left the cluster "
                f"holding blocks {lost[:20]}, and {why}"
            )


def _consume(task: asyncio.Future[Any]) -> None:
    """Mark an abandoned task's outcome as seen (no "exception never retrieved")."""
    if not task.cancelled():
        task.exception()


def _into(
    into: dict[int, tuple[int, np.ndarray | None]], blocks: list[int]
) -> tuple[list[int], list[np.ndarray | None]] | None:
    """``(sizes, targets)`` of one message's parts, or None when none has a target."""
    sizes: list[int] = []
    targets: list[np.ndarray | None] = []
    for b in blocks:
        size, target = into.get(b, (0, None))
        sizes.append(size)
        targets.append(target)
    return (sizes, targets) if any(t is not None for t in targets) else None


def fast_path_held(results: list[Any]) -> bool:
    """Whether a fast-path request (a row get or push written straight to the
    servers, watched by :meth:`BlockCalls._watched`) answered: ``False`` when the
    general path must answer instead (the layout changed or a server is gone:
    :meth:`BlockCalls.call_blocks` refreshes, waits and resends with the same
    tag); any other failure is raised."""
    for r in results:
        if isinstance(r, (StaleLayoutError, OSError, CommClosedError)):
            return False
        if isinstance(r, BaseException):
            raise r
    return True
