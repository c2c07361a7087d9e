"""Compressed-row writes: one request and one packed follow frame a server, made
in the caller's thread and sent by one coroutine.

A sparse row increment of a dense matrix cut by rows (``scipy.sparse`` CSR or
COO, planned by :mod:`._csrplan`) costs about a memcpy of its few hundred
kilobytes a server; the rest of a call was fixed work on the caller's event
loop, where the three processes of a 2-core machine take turns: the general
path's task a server, its liveness timers, a walk of every request for arrays to
frame, a ``concurrent.futures`` chain back to the caller.  Here (as a random-row
get does, :mod:`._rowget`):

* the caller's thread packs each server's parts into one follow frame
  (:func:`daskangel._wire.split_follow`, narrowing as planned) and makes each
  request: plain values only, nothing left to wrap;
* one coroutine writes every request and its frame (bare bytes after the
  request on a TCP comm, ``daskangel.client.raw-follow``), then reads the replies
  (:func:`daskangel._recv.send_all_recv_into`), watched as any call is for a lost
  server or the call timeout, and sets the caller's future from the loop;
* a caller that waits for the write anyway (``increment``, ``set``; not
  ``increment_async``) from a thread with no event loop writes and reads the
  lean wire's sockets itself instead (:mod:`daskangel._leandirect`,
  ``daskangel.client.lean-direct``): no hop to the loop and back;
* each server's ``daskangel_push`` handler reads the frame into a reused buffer
  and runs the ordinary ``update`` op (tags, snapshot cuts, holds, write-behind
  and eager-refresh notes unchanged: :meth:`~._endpoints.PSWorkerPlugin.handle_push`).

A plain CSR increment of the array's dtype is packed without planning
(:func:`push_csr`, :mod:`._csrpack`).  Blocks on this process's own servers are written by a direct call meanwhile (no
comm).  Anything unusual (a lost, moved or moving block, an unreachable server,
the actors transport, a request under
``daskangel.client.follow-bytes``, ``daskangel.client.lean-push`` off) goes the
general way
(:meth:`~._blockcalls.BlockCalls.call_blocks`), which refreshes the layout, waits
for recoveries and resends with the same write tag (applied once a block).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable
from typing import Any

from distributed.protocol import to_serialize

from .. import config
from .._lean import lean_all
from .._leandirect import direct_all, direct_pool, or_general_path, watch
from .._recv import send_all_recv_into
from .._wire import raise_if_error, split_follow
from ._binding import Binding
from ._blockcalls import fast_path_held
from ._csrpack import pack_csr
from ._meta import ArrayMeta, ServerId

__all__ = ["PUSH_HANDLER", "push_csr", "push_rows"]

PUSH_HANDLER = "daskangel_push"

# one request: (address, handler, message, reply sizes, reply targets), its frames
Call = tuple[tuple[str, str, dict[str, Any], list[int], list[Any]], list[Any]]
# a block group of this process's own server: (server, its parts, their cost)
Local = tuple[ServerId, list[dict[str, Any]], int]

_running: set[asyncio.Task[None]] = set()  # a task is only weakly held by its loop


def _calls(
    b: Binding, name: str, m: ArrayMeta, parts: dict[int, dict[str, Any]],
    cost: dict[int, int], extra: dict[str, Any],
) -> tuple[list[ServerId], list[Call], list[Local]] | None:  # fmt: skip
    """Each other process's server's request and follow frames, and the parts of
    this process's own servers (called without a comm); None: the general path."""
    if m.transport != "handlers" or not config.get("daskangel.client.lean-push"):
        return None
    here = b.local_worker.address if b.local_worker is not None else None
    lost = m.lost
    groups: dict[ServerId, list[int]] = {}
    for g, p in parts.items():
        if (lost and g in lost) or "csr_rows" not in p:
            return None
        groups.setdefault(m.servers[g], []).append(g)
    calls: list[Call] = []
    local: list[Local] = []
    for s, blocks in groups.items():
        mine = [parts[g] for g in blocks]
        c = sum(cost.get(g, 0) for g in blocks)
        if s.address == here:
            local.append((s, mine, c))
            continue
        kw, frames = split_follow("update", {"parts": mine}, b.send_buffer)
        if not frames:
            return None  # small: one message on the general path
        msg = {
            "server": s.index, "array": name, "parts": kw["parts"], "follow": kw["follow"],
            "cost": c, **extra,
        }  # fmt: skip
        if m.uid:
            msg["uid"] = m.uid
        calls.append(((s.address, PUSH_HANDLER, msg, [], []), frames))
    if not calls:
        return None  # all on this process's servers: nothing to gain here
    return list(groups), calls, local


async def _send(
    b: Binding, name: str, m: ArrayMeta, servers: list[ServerId], calls: list[Call],
    local: list[Local], extra: dict[str, Any],
) -> bool:  # fmt: skip
    """Write every request and frame, apply the local parts meanwhile, read the
    replies; False when the general path must answer (a layout change or an
    unreachable server)."""
    uid = {"uid": m.uid} if m.uid else {}

    async def go() -> None:
        lean = (
            b.lean([c[0] for c, _ in calls]) if config.get("daskangel.client.raw-follow") else None
        )
        if lean is not None:
            sent = lean_all(lean, [c for c, _ in calls], raw=[f for _, f in calls])
        elif config.get("daskangel.client.raw-follow"):
            pool = b._pool or await b.pool()
            sent = send_all_recv_into(pool, [c for c, _ in calls], raw=[f for _, f in calls])
        else:
            pool = b._pool or await b.pool()
            follows = [{"values": [to_serialize(f) for f in frames]} for _, frames in calls]
            sent = send_all_recv_into(pool, [c for c, _ in calls], follows)
        if local:
            here = [
                b.call(s, "update", c, "handlers", None, array=name, parts=p, **extra, **uid)
                for s, p, c in local
            ]
            got = await asyncio.gather(sent, *here, return_exceptions=True)
            for r in got:  # (all finished: none is left running unseen)
                if isinstance(r, BaseException):
                    raise r
            replies = [*got[0], *got[1:]]
        else:
            replies = await sent
        for reply in replies:
            raise_if_error(reply)

    return fast_path_held(await b._watched(name, m, servers, [go()]))


async def _run(
    b: Binding, name: str, m: ArrayMeta, servers: list[ServerId], calls: list[Call],
    local: list[Local], extra: dict[str, Any], general: Callable[[], tuple[Any, ...]],
    fut: concurrent.futures.Future[None],
) -> None:  # fmt: skip
    """:func:`_send`, then the general path (``general()``: its ``call_blocks``
    arguments) if it must answer; the outcome goes to ``fut`` from the loop (no
    callback chain)."""
    try:
        if not await _send(b, name, m, servers, calls, local, extra):
            await b.call_blocks(*general())  # resent with the same tag: applied once a block
        fut.set_result(None)
    except BaseException as e:  # noqa: BLE001 - raised in the caller's thread
        fut.set_exception(e)


def _launch(coro: Any) -> None:
    task = asyncio.ensure_future(coro)
    _running.add(task)
    task.add_done_callback(_running.discard)


def _direct(
    b: Binding, name: str, m: ArrayMeta, servers: list[ServerId], calls: list[Call]
) -> bool | None:
    """The write made from this thread (:mod:`daskangel._leandirect`): True when
    answered, False when the general path must answer (a layout change or an
    unreachable server), None when it cannot be made here (the loop makes it)."""
    if not config.get("daskangel.client.raw-follow"):
        return None
    pool = direct_pool(b, [c[0][0] for c in calls])
    if pool is None:
        return None
    check, period = watch(b, name, m, servers)

    def write() -> bool:
        for reply in direct_all(pool, [c for c, _ in calls], check, period, [f for _, f in calls]):
            raise_if_error(reply)
        return True

    return or_general_path(write) is not None


def _finish(
    b: Binding, name: str, m: ArrayMeta, servers: list[ServerId], calls: list[Call],
    local: list[Local], extra: dict[str, Any], general: Callable[[], tuple[Any, ...]],
    wait: bool,
) -> concurrent.futures.Future[None]:  # fmt: skip
    """The write made here when the caller waits for it anyway (``wait``) and it
    can be (:func:`_direct`), else started on the loop (:func:`_start`)."""
    held = _direct(b, name, m, servers, calls) if wait and not local else None
    if held is None:
        return _start(b, name, m, servers, calls, local, extra, general)
    if not held:  # resent with the same tag: applied once a block
        done: concurrent.futures.Future[None] = b.submit(b.call_blocks, *general())  # type: ignore[arg-type]
        return done
    fut: concurrent.futures.Future[None] = concurrent.futures.Future()
    fut.set_result(None)
    return fut


def push_rows(
    b: Binding, name: str, m: ArrayMeta, parts: dict[int, dict[str, Any]],
    cost: dict[int, int], extra: dict[str, Any], wait: bool = False,
) -> concurrent.futures.Future[None] | None:  # fmt: skip
    """Start a compressed-row write (``parts`` from :func:`._csrplan.plan_csr`,
    ``extra`` its ``add``, ``tag`` and ``clock``); None when it takes the general
    path (see the module docstring).  ``wait``: the caller waits for the write
    (it may then be made in this thread, the future returned done)."""
    planned = _calls(b, name, m, parts, cost, extra)
    if planned is None:
        return None
    servers, calls, local = planned
    return _finish(
        b, name, m, servers, calls, local, extra, lambda: (name, "update", parts, cost, extra),
        wait,
    )  # fmt: skip


def push_csr(
    b: Binding, name: str, m: ArrayMeta, values: Any, extra: dict[str, Any], wait: bool = False
) -> concurrent.futures.Future[None] | None:
    """Start a write of a ``scipy.sparse`` CSR matrix ``values`` packed in one pass
    (:func:`._csrpack.pack_csr`: no planning, no copy a field); None when it must
    be planned (:func:`push_rows` or the general path take it then).  ``wait`` as
    :func:`push_rows`'."""
    if (
        m.transport != "handlers"
        or not config.get("daskangel.client.lean-push")
        or not config.get("daskangel.client.pack-csr")
    ):
        return None
    here = b.local_worker.address if b.local_worker is not None else None
    packed = pack_csr(m, values, here, b.send_buffer)
    if packed is None:
        return None
    calls: list[Call] = []
    cost: dict[int, int] = {}
    for s, p, follow, frame, c, _, costs in packed:
        msg = {"server": s.index, "array": name, "parts": p, "follow": follow, "cost": c, **extra}
        if m.uid:
            msg["uid"] = m.uid
        calls.append(((s.address, PUSH_HANDLER, msg, [], []), [frame]))
        cost.update(costs)

    def general() -> tuple[Any, ...]:
        parts: dict[int, dict[str, Any]] = {}
        for share in packed:
            parts.update(share[5]())  # the general path's parts: views of the frames
        return (name, "update", parts, cost, extra)

    servers = [s for s, *_ in packed]
    return _finish(b, name, m, servers, calls, [], extra, general, wait)


def _start(
    b: Binding, name: str, m: ArrayMeta, servers: list[ServerId], calls: list[Call],
    local: list[Local], extra: dict[str, Any], general: Callable[[], tuple[Any, ...]],
) -> concurrent.futures.Future[None]:  # fmt: skip
    fut: concurrent.futures.Future[None] = concurrent.futures.Future()
    coro = _run(b, name, m, servers, calls, local, extra, general, fut)
    b.loop.asyncio_loop.call_soon_threadsafe(_launch, coro)
    return fut
