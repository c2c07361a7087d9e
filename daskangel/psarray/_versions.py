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
  From a thread with no event loop, on TCP, the thread writes and reads the
  lean wire's sockets itself instead (:mod:`daskangel._leandirect`,
  ``daskangel.client.lean-direct``): no hop to the loop and back.

Each array's requests are made once per metadata (a new layout or generation
makes them again), and the token is a plain hash of the versions (:func:`token_of`):
dask's ``tokenize`` and the request building were ~0.12 ms of a ~1.3 ms token
in the caller on the 2-core benchmark VM (their cold cost; 18 us and ~7 us warm).

The servers run the same ``versions`` op through their lean
``daskangel_versions`` handler (``_endpoints.PSWorkerPlugin.handle_versions``:
read at once when the server is idle, else queued behind every write before it
as through ``daskangel_ps``), so what is waited for is unchanged.  Anything
unusual (a lost, moved or moving block, an unreachable server, a server in this
process, the actors transport, ``daskangel.client.lean-versions`` off) gives
None: the general path answers (it refreshes the layout and waits for
recoveries).
"""

from __future__ import annotations

import asyncio
import hashlib
import weakref
from typing import Any

from .. import config
from .._lean import lean_all
from .._leandirect import direct_all, direct_pool, or_general_path, watch
from .._recv import send_all_recv_into
from .._wire import raise_if_error
from ._binding import Binding
from ._blockcalls import fast_path_held
from ._loopcall import run_lean
from ._meta import ArrayMeta, ServerId

__all__ = ["block_versions", "lean_versions", "token_of"]

Planned = tuple[list[ServerId], list[list[int]], list[Any]]
# {binding: {array name: (the metadata they were made for, its requests or None)}}
_plans: weakref.WeakKeyDictionary[Binding, dict[str, tuple[ArrayMeta, Planned | None]]] = (
    weakref.WeakKeyDictionary()
)


def token_of(name: str, generation: int, versions: dict[int, int]) -> str:
    """The version token of array ``name``: a hash of its generation and every
    block's version (the same in every process).

    Example
    -------
    >>> token_of("w", 0, {1: 3, 0: 2}) == token_of("w", 0, {0: 2, 1: 3})
    True
    >>> token_of("w", 0, {0: 2}) != token_of("w", 0, {0: 3})
    True
    >>> import numpy as np
    >>> token_of("w", 0, {np.int64(0): np.int64(2)}) == token_of("w", 0, {0: 2})
    True
    """
    # plain ints: a numpy integer's repr ("np.int64(3)") would change the token
    text = repr((name, int(generation), sorted((int(g), int(v)) for g, v in versions.items())))
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def _requests(b: Binding, name: str, m: ArrayMeta) -> Planned | None:
    """Each server's blocks and its ``versions`` request; None: the general path.
    Made once per metadata ``m`` (the requests are only read: every write copies
    the message)."""
    if not config.get("daskangel.client.lean-versions"):
        return None
    plans = _plans.get(b)
    if plans is None or len(plans) > 256:  # (names of dropped arrays add up)
        plans = _plans[b] = {}
    got = plans.get(name)
    if got is None or got[0] is not m:
        got = plans[name] = (m, _plan(b, name, m))
    return got[1]


def _plan(b: Binding, name: str, m: ArrayMeta) -> Planned | None:
    """:func:`_requests`' requests for metadata ``m``."""
    if m.transport != "handlers" or m.lost:
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
            s.address, "daskangel_versions",
            {"server": s.index, "array": name, "blocks": blocks, **uid},
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
        lean = b.lean([c[0] for c in calls])
        if lean is not None:
            replies = await lean_all(lean, calls)
        else:
            replies = await send_all_recv_into(b._pool or await b.pool(), calls)
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
    pool = direct_pool(b, [c[0] for c in calls])
    if pool is None:
        held = run_lean(b, _fetch(b, name, m, servers, blocks, calls, out))
        return out if held else None
    check, period = watch(b, name, m, servers)  # asked from this thread: no loop hop

    def read() -> dict[int, int]:
        for got, bl in zip(direct_all(pool, calls, check, period), blocks, strict=True):
            out.update(zip(bl, raise_if_error(got), strict=True))
        return out

    return or_general_path(read)


def block_versions(b: Binding, name: str, m: ArrayMeta) -> dict[int, int]:
    """Every block's version ``{block: version}``: by :func:`lean_versions`, or
    the general path when it declines."""
    got = lean_versions(b, name, m)
    if got is None:
        parts = {g: {"block": g} for g in range(m.layout.n_blocks)}
        got = b.run(b.call_blocks, name, "versions", parts, {}, {})
    return got
