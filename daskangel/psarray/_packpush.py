"""Packed sparse increments through shared memory, written from the caller's thread.

A large packed increment (a sparse vector's ``increment(values, cols=keys)``,
:func:`._packed.plan_packed`) is packed straight into a leased shared buffer
(:meth:`daskangel._shm.ShmBuffers.lease`) that this machine's servers map and read
in place.  On the general path the request still crossed to the event loop and
back (:meth:`~._blockcalls.BlockCalls.call_blocks`: the loop's task a server, its
liveness timers, Dask's framing of each message, a ``concurrent.futures`` chain
back), on a 2-core machine where the caller's process and two servers share the
cores.  Here a caller that waits for the write anyway (``increment``, ``set``; not
``increment_async``) from a thread without an event loop writes each server's
request on the lean wire itself (:func:`daskangel._leandirect.direct_all`,
``daskangel.client.lean-direct``), naming its frames where they lie in the buffer,
and reads the replies: the servers' ``daskangel_push`` handler runs the ordinary
``update`` op, never behind the reply (the buffer is the caller's again once it
replies).

Anything else takes the general path, which answers as before: frames not in one
leased buffer, a server of this process, a lost block, the actors transport,
``daskangel.client.shm`` or ``lean-push`` off, a non-TCP address.  A server that
cannot map the buffer answers before applying anything: it is remembered in
``ShmBuffers.refused`` and the general path resends the update with the same
write tag (over the socket for that server; a block that applied it already
skips it).  A call that fails (a closed comm, a layout change) retires the buffer
(the server may still be reading it) and the general path resends likewise.
"""

from __future__ import annotations

import concurrent.futures
from typing import Any

import numpy as np

from .. import config
from .._leandirect import direct_all, direct_pool, or_general_path, watch
from .._shm import UNAVAILABLE
from .._wire import raise_if_error
from ._binding import Binding
from ._meta import ArrayMeta, ServerId

__all__ = ["push_packed"]

PUSH_OP = "push"  # the lean wire's name of the servers' daskangel_push handler
_FIELDS = {"block", "rows", "packed"}  # a part of plan_packed


def _requests(
    b: Binding, name: str, m: ArrayMeta, parts: dict[int, dict[str, Any]],
    cost: dict[int, int], extra: dict[str, Any],
) -> tuple[list[ServerId], list[tuple[str, str, dict[str, Any], list[int], list[Any]]], Any] | None:  # fmt: skip
    """Each server's request naming its frames in the shared buffer, the servers,
    and the buffer; None when the general path must take the update."""
    shm = b.shm_buffers()
    if shm is None:
        return None
    here = b.local_worker.address if b.local_worker is not None else None
    lost = m.lost
    groups: dict[ServerId, list[int]] = {}
    for g, p in parts.items():
        s = m.servers[g]
        if (lost and g in lost) or "packed" not in p or s.address == here:
            return None
        if s.address in shm.refused:
            return None
        groups.setdefault(s, []).append(g)
    calls: list[tuple[str, str, dict[str, Any], list[int], list[Any]]] = []
    seg = None
    for s, blocks in groups.items():
        mine = [parts[g] for g in blocks]
        frames = [p["packed"] for p in mine]
        if any(set(p) - _FIELDS or p["packed"].dtype != np.int64 for p in mine):
            return None
        found = shm.locate(frames)
        if found is None or (seg is not None and found[0] is not seg):
            return None  # not packed into one leased buffer: the general path copies
        seg, at = found
        need = max(a + int(f.nbytes) for a, f in zip(at, frames, strict=True))
        follow = {
            "frames": [int(f.nbytes) for f in frames],
            "fields": [
                [i, "packed", i, 0, f.dtype.str, [f.shape[0]]] for i, f in enumerate(frames)
            ],
            "at": at,
            "shm": seg.desc(need),
        }  # (the follow description of _wire.split_follow, each frame where it lies)
        msg = {
            "server": s.index, "array": name, "follow": follow,
            "parts": [{"block": p["block"], "rows": p["rows"]} for p in mine],
            "cost": sum(cost.get(g, 0) for g in blocks), **extra,
        }  # fmt: skip
        if m.uid:
            msg["uid"] = m.uid
        calls.append((s.address, PUSH_OP, msg, [], []))
    return list(groups), calls, seg


def push_packed(
    b: Binding, name: str, m: ArrayMeta, parts: dict[int, dict[str, Any]],
    cost: dict[int, int], extra: dict[str, Any], wait: bool,
) -> concurrent.futures.Future[None] | None:  # fmt: skip
    """Write a packed increment (``parts`` of :func:`._packed.plan_packed` packed
    into a leased shared buffer) from this thread; a done future once applied, a
    future of the general path's resend when that must answer, or None when this
    way does not apply (the caller takes the general path)."""
    if (
        not wait
        or m.transport != "handlers"
        or not config.get("daskangel.client.shm")
        or not config.get("daskangel.client.lean-push")
    ):
        return None
    planned = _requests(b, name, m, parts, cost, extra)
    if planned is None:
        return None
    servers, calls, seg = planned
    pool = direct_pool(b, [c[0] for c in calls])
    if pool is None:
        return None
    check, period = watch(b, name, m, servers)
    shm = b.shm_buffers()
    assert shm is not None

    def write() -> bool:
        refused = False
        for (address, *_), reply in zip(calls, direct_all(pool, calls, check, period), strict=True):
            if isinstance(reply, str) and reply == UNAVAILABLE:
                shm.refused.add(address)  # nothing applied there: resent over the socket
                refused = True
            else:
                raise_if_error(reply)
        return not refused

    try:
        held = or_general_path(write)
    except BaseException:
        shm.retire(seg)  # a server may still be reading it
        raise
    if held:
        done: concurrent.futures.Future[None] = concurrent.futures.Future()
        done.set_result(None)
        return done
    if held is None:
        shm.retire(seg)
    # resent with the same tag: applied once a block
    return b.submit(b.call_blocks, name, "update", parts, cost, extra)  # type: ignore[arg-type, return-value]
