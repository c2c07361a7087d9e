"""Block versions in one lean round trip a server: the read-your-writes wait.

:meth:`PSArray.version_token` asks every server for its blocks' versions; the
``versions`` op runs in the servers' queue, so its answer comes once every
write queued before it (a write-behind add included) is applied: a caller
takes it to wait for its writes (the benchmarks close an increment with it), and
``to_dask_array`` once a call (its keys include the token).  The general path
(:meth:`~._blockcalls.BlockCalls.call_blocks` through ``Binding.run``) adds a
task and a ``concurrent.futures`` chain a call, the request walk for arrays to
wrap and the liveness bookkeeping: ~0.2-0.3 ms over a raw round trip on the
2-core benchmark VM.  Here, as a random-row get does (:mod:`._rowget`):

* the caller's thread makes each server's request (plain values only);
* one coroutine writes every request and reads the replies
  (:func:`daskangel._recv.send_all_recv_into`), watched as any call is for a
  lost server or the call timeout, and puts the outcome on the caller's queue.

The servers run the same ``versions`` op through the ordinary ``daskangel_ps``
handler, so what is waited for is unchanged.  Anything unusual (a lost, moved
or moving block, an unreachable server, a server in this process, the actors
transport, ``daskangel.client.lean-versions`` off) gives None: the general path
answers (it refreshes the layout and waits for recoveries).
"""

from __future__ import annotations

import asyncio
from typing import Any

from .. import config
from .._recv import send_all_recv_into
from .._wire import raise_if_error
from ._binding import Binding
from ._blockcalls import fast_path_held
from ._loopcall import run_lean
from ._meta import ArrayMeta, ServerId

__all__ = ["block_versions", "lean_versions"]


def _requests(
    b: Binding, name: str, m: ArrayMeta
) -> tuple[list[ServerId], list[list[int]], list[Any]] | None:
    """Each server's blocks and its ``versions`` request; None: the general path."""
    if m.transport != "handlers" or m.lost or not config.get("daskangel.client.lean-versions"):
        return None
    here = b.local_worker.address if b.local_worker is not None else None
    groups: dict[ServerId, list[int]] = {}
    for g in range(m.layout.n_blocks):
        groups.setdefault(m.servers[g], []).append(g)
    if not groups or any(s.address == here for s in groups):
        return None  # this process's own servers are called directly there
    uid = {"uid": m.uid} if m.uid else {}
    calls: list[Any] = [
        (
            s.address, "daskangel_ps",
            {"ps_op": "versions", "server": s.index, "cost": 0, "array": name,
             "parts": [{"block": g} for g in blocks], **uid},
            [], [],
        )
        for s, blocks in groups.items()
    ]  # fmt: skip
    return list(groups), list(groups.values()), calls


async def _fetch(
    b: Binding, name: str, m: ArrayMeta, servers: list[ServerId], blocks: list[list[int]],
    calls: list[Any], out: dict[int, int],
) -> bool:  # fmt: skip
    """Write every request, read the replies into ``out``; False when the
    general path must answer (a layout change or an unreachable server)."""

    async def go() -> None:
        pool = b._pool or await b.pool()
        replies = await send_all_recv_into(pool, calls)
        for got, bl in zip(replies, blocks, strict=True):
            out.update(zip(bl, raise_if_error(got), strict=True))

    return fast_path_held(await b._watched(name, m, servers, [go()]))


def lean_versions(b: Binding, name: str, m: ArrayMeta) -> dict[int, int] | None:
    """Every block's version ``{block: version}`` of array ``name`` (metadata
    ``m``), or None when the general path must answer (see the module
    docstring).  Called from a thread other than the binding's loop."""
    try:
        on_loop = asyncio.get_running_loop() is b.loop.asyncio_loop
    except RuntimeError:
        on_loop = False
    planned = None if on_loop else _requests(b, name, m)
    if planned is None:
        return None
    servers, blocks, calls = planned
    out: dict[int, int] = {}
    held = run_lean(b, _fetch(b, name, m, servers, blocks, calls, out))
    return out if held else None


def block_versions(b: Binding, name: str, m: ArrayMeta) -> dict[int, int]:
    """Every block's version ``{block: version}``: by :func:`lean_versions`, or
    the general path when it declines."""
    got = lean_versions(b, name, m)
    if got is None:
        parts = {g: {"block": g} for g in range(m.layout.n_blocks)}
        got = b.run(b.call_blocks, name, "versions", parts, {}, {})
    return got
