"""How requests reach a worker's PS servers: the comm handler.

:class:`PSWorkerPlugin` installs the servers of a worker and registers one comm
handler, ``daskangel_ps`` (the ``"handlers"`` transport), following the pattern of
distributed's P2P shuffle plugin; it only unwraps a request, runs the op on a
:class:`~._server.PSServer` and wraps its reply.  The ``"actors"`` transport is
:class:`~._actor.PSServerActor`.

Example
-------
>>> PSWorkerPlugin.name
'daskangel-ps'
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

import numpy as np
from distributed.diagnostics.plugin import WorkerPlugin
from distributed.protocol import to_serialize

from .. import config
from .._lean import LEAN_HANDLER, serve
from .._shm import UNAVAILABLE, ShmMaps
from .._wire import call_server, error_reply, payload_nbytes, unwrap_arrays, wrap_arrays
from ..errors import DaskAngelError, InvalidArgumentError
from ._recvpool import ReceivePool, cut_fields, read_follow, shm_frames

if TYPE_CHECKING:
    from distributed import Worker

from ._server import ASYNC_OPS, PLUGIN_NAME, PSServer

__all__ = ["PSWorkerPlugin", "count_payload"]

logger = logging.getLogger(__name__)


class PSWorkerPlugin(WorkerPlugin):
    """Installs PS servers on a worker and the ``daskangel_ps`` comm handler.

    Servers are created on first use, one per ``server`` index the scheduler
    plugin assigns to this worker.
    """

    name = PLUGIN_NAME
    idempotent = True  # a second PSContext must not wipe the first one's state

    def __init__(self) -> None:
        # {server_index: PSServer}
        self.servers: dict[int, PSServer] = {}
        self.worker: Worker | None = None
        self.receive_pool = ReceivePool()
        # the rows a get selects are gathered into these buffers for the reply, so
        # their pages are not faulted in again for every reply
        self.reply_pool = ReceivePool()
        self._shm_maps: ShmMaps | None = None
        self.shm_requests = 0  # requests whose frames were read from a caller's buffer

    @property
    def shm_maps(self) -> ShmMaps:
        """This worker's mappings of callers' shared buffers (:mod:`daskangel._shm`)."""
        if self._shm_maps is None:
            self._shm_maps = ShmMaps(int(config.get("daskangel.server.shm-maps")))
        return self._shm_maps

    def setup(self, worker: Worker) -> None:
        self.worker = worker
        worker.handlers["daskangel_ps"] = self.handle
        worker.handlers["daskangel_rows"] = self.handle_rows
        worker.handlers["daskangel_push"] = self.handle_push
        worker.handlers["daskangel_versions"] = self.handle_versions
        worker.handlers["daskangel_forget"] = self.forget
        worker.handlers[LEAN_HANDLER] = self.handle_lean

    async def handle_lean(self, comm: Any) -> None:
        """The ``daskangel_lean`` handler: keeps ``comm`` and serves the lean wire's
        pushes, row gets and version requests on it until it closes (:mod:`daskangel._lean`),
        through the same handlers as their Dask messages."""
        handlers: dict[str, Any] = {"push": self.handle_push, "rows": self.handle_rows}
        await serve(comm, {**handlers, "versions": self.handle_versions})

    def forget(self, names: list[str]) -> None:
        """The ``daskangel_forget`` handler: the scheduler freed these arrays; this
        process's handles, agent and update buffer forget what they kept of them."""
        binding = getattr(self.worker, "_daskangel_binding", None)
        if binding is not None:
            binding.forget_arrays(names)

    async def teardown(self, worker: Worker) -> None:
        """The worker is closing: first ask the scheduler to move the blocks its
        servers hold to other workers (the hand-off; its handlers still answer
        here), waiting at most ``daskangel.handoff.teardown-timeout``; then free
        the servers.  What could not be moved is lost as in a crash, and rebuilt
        from the newest snapshot."""
        if any(s.blocks for s in self.servers.values()) and _scheduler_may_answer(worker):
            try:
                moved = await asyncio.wait_for(
                    worker.scheduler.daskangel_handoff(workers=[worker.address], closing=True),
                    config.get_seconds("daskangel.handoff.teardown-timeout"),
                )
                logger.info("daskangel: %s handed off its blocks: %s", worker.address, moved)
            except Exception as e:  # noqa: BLE001 - the worker closes anyway
                logger.warning(
                    "daskangel: closing worker %s could not hand off its PS blocks: %r",
                    worker.address,
                    e,
                )
        # the handler stays: a request racing with the worker's shutdown then gets
        # a clean StaleLayoutError (no block here) instead of a KeyError in Dask
        for s in self.servers.values():
            s.close()
        self.servers.clear()
        binding = getattr(worker, "_daskangel_binding", None)
        if binding is not None:  # this worker's tasks' comms to other servers
            binding.close()

    def server(self, index: int) -> PSServer:
        s = self.servers.get(index)
        if s is None:
            assert self.worker is not None
            s = self.servers[index] = PSServer(self.worker.address, index)
            s.peer = self._peer
            s.reply_pool = self.reply_pool
        return s

    async def _peer(self, address: str, index: int, op: str, kwargs: dict[str, Any]) -> Any:
        """A call from one of this worker's servers to another server (hand-off)."""
        assert self.worker is not None
        if address == self.worker.address:
            return await self._run(op, index, 0, kwargs, False)
        return await call_server(self.worker.rpc, address, index, op, "handlers", 0, kwargs)

    async def _run(
        self, ps_op: str, server: int, cost: int, kwargs: dict[str, Any], received: bool
    ) -> Any:
        srv = self.server(int(server))
        srv.check_uid(kwargs)
        afn = ASYNC_OPS.get(ps_op)
        if afn is not None:
            reply = await afn(srv, **kwargs)
        else:
            reply = await srv.run(ps_op, cost, may_defer=received, **kwargs)
        count_payload(srv, ps_op, kwargs, reply)
        return reply

    async def handle(
        self,
        comm: Any,
        ps_op: str,
        server: int,
        cost: int = 0,
        pad: Any = None,
        follow: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> Any:
        """The ``daskangel_ps`` comm handler: run ``ps_op`` and frame its arrays.

        Replies never carry views of live blocks: Dask's TCP comm returns from
        ``write`` before the bytes leave, so a view of a block could change on the
        wire.  A whole dense block is *lent* instead of copied (``get``'s ``lend``):
        the block copies itself before its next write.  Expected errors (bad index,
        stale layout) go back to the caller without an error log on the worker.

        ``follow``: the parts' bulk arrays come in the next message on ``comm``
        (``{"frames": [bytes, ...], "fields": [[part, field, frame, offset, dtype,
        shape], ...]}``, :func:`daskangel._wire.split_follow`), read here
        into reused buffers (:mod:`._recvpool`) before anything else happens, so a
        request that fails still leaves the comm in step.
        """
        if comm is not None:
            comm.allow_offload = False  # as the caller's side (daskangel._recv)
        shared = isinstance(follow, dict) and follow.get("shm") is not None
        if follow is not None:
            bad = await self._follow(comm, follow, kwargs.get("parts"), shared)
            if bad is not None:
                return bad
        if ps_op == "get":
            kwargs["lend"] = True
            if all(p.get("rows") is None and p.get("cols") is None for p in kwargs["parts"]):
                cost = 0  # whole dense blocks are lent, not copied: no work to offload
        try:
            # arrays in the caller's shared buffer are its again once this replies:
            # never applied behind the reply
            reply = await self._run(ps_op, server, cost, unwrap_arrays(kwargs), not shared)
            return wrap_arrays(reply)
        except DaskAngelError as e:
            return error_reply(e)

    async def _follow(
        self, comm: Any, follow: dict[str, Any], parts: Any, shared: bool = False
    ) -> Any:
        """Read a request's follow message into reused buffers and put its fields
        into ``parts``; None, or the error reply (the comm is aborted when the
        message could not be read: it would be out of step).  ``shared``: the
        frames wait in the caller's shared buffer instead (:mod:`daskangel._shm`;
        nothing follows on the comm); :data:`~daskangel._shm.UNAVAILABLE` when it
        cannot be mapped here or ``daskangel.server.shm`` is off."""
        if shared:
            try:
                got = (
                    shm_frames(self.shm_maps, follow)
                    if config.get("daskangel.server.shm")
                    else None
                )
            except InvalidArgumentError as e:
                return error_reply(e)
            if got is None:
                return UNAVAILABLE
            self.shm_requests += 1
            frames: list[Any] = got
        else:
            try:
                frames = await read_follow(comm, follow, self.receive_pool)
            except InvalidArgumentError:
                comm.abort()  # its arrays message was not read: the comm is out of step
                raise
        try:
            for i, field, a in cut_fields(frames, follow["fields"]):
                parts[i][field] = a
        except InvalidArgumentError as e:
            return error_reply(e)
        except (TypeError, IndexError, KeyError, ValueError):
            return error_reply(
                InvalidArgumentError("follow: a field names a part the request lacks")
            )
        return None

    async def handle_push(
        self,
        comm: Any,
        server: int,
        array: str,
        parts: list[dict[str, Any]],
        follow: dict[str, Any],
        add: bool = True,
        tag: list[Any] | None = None,
        clock: int | None = None,
        cost: int = 0,
        uid: str | None = None,
        fence: list[Any] | None = None,
        **unknown: Any,
    ) -> Any:
        """The ``daskangel_push`` handler: a compressed-row write (:mod:`._rowpush`),
        its arrays in the follow message (or bare bytes after it: ``follow["raw"]``),
        or a packed sparse increment whose frames wait in the caller's shared buffer
        (``follow["shm"]``, :mod:`._packpush`; :data:`~daskangel._shm.UNAVAILABLE`
        when it cannot be mapped here, before anything is applied).
        The ordinary ``update`` op runs it (tags, holds, snapshot cuts,
        write-behind), without the general handler's walks of the request and reply
        for arrays to unwrap, wrap and count.  A field it does not know is refused
        only after the frame was read (bare bytes left unread would be taken for
        the comm's next message)."""
        if comm is not None:
            comm.allow_offload = False
        shared = isinstance(follow, dict) and follow.get("shm") is not None
        bad = await self._follow(comm, follow, parts, shared)
        if bad is not None:
            return bad
        if unknown:
            return error_reply(InvalidArgumentError(f"push: unknown fields {sorted(unknown)}"))
        srv = self.server(int(server))
        srv.op_stats["push"][0] += 1  # updates that came this way (applied or refused)
        try:
            srv.check_uid({"array": array, "uid": uid})
            # (frames in the caller's shared buffer: never applied behind the reply)
            out = await srv.run(
                "update", cost, may_defer=not shared, array=array, parts=parts, add=add,
                tag=tag, clock=clock, fence=fence,
            )  # fmt: skip
        except DaskAngelError as e:
            return error_reply(e)
        srv.op_stats["update"][3] += sum(int(n) for n in follow["frames"])
        return out

    async def handle_versions(
        self, comm: Any, server: int, array: str, blocks: list[int], uid: str | None = None
    ) -> Any:
        """The ``daskangel_versions`` handler: the lean ``version_token``'s request
        (:mod:`._versions`), the versions of ``blocks`` of ``array``.  An idle server
        (no write running, waiting or queued behind a reply) reads them at once on
        the event loop; otherwise the ``versions`` op queues like any op, behind every
        write before it (read-your-writes).  Without the general handler's walks of
        the request and reply: ~0.17-0.24 ms of a ~1-2 ms token on the 2-core
        benchmark VM (RESULTS.md, issue 14, push side, eighth session)."""
        if comm is not None:
            comm.allow_offload = False
        srv = self.server(int(server))
        kwargs: dict[str, Any] = {"array": array, "parts": [{"block": g} for g in blocks]}
        try:
            srv.check_uid({"array": array, "uid": uid})
            if srv.idle():
                return srv.timed("versions", 0, kwargs)
            return await srv.run("versions", 0, **kwargs)
        except DaskAngelError as e:
            return error_reply(e)

    async def handle_rows(
        self,
        comm: Any,
        server: int,
        array: str,
        rows: Any,
        blocks: list[int],
        counts: list[int],
        cost: int = 0,
        uid: str | None = None,
    ) -> Any:
        """The ``daskangel_rows`` handler: a random-row get's ``get_rows`` request
        (:mod:`._rowget`; ``rows``: int32 bytes or an array).  An idle server
        answers it at once on the event loop, without the general handler's
        unwrapping, wrapping and payload walks (a third of a small get's time on
        the 2-core benchmark VM); otherwise it queues like any op.  A reply under
        ``daskangel.server.reply-frame-bytes`` is the rows' bytes, sent inside the
        message (no numpy serialisation); a larger one an array, a frame of its
        own."""
        if comm is not None:
            comm.allow_offload = False
        srv = self.server(int(server))
        if isinstance(rows, bytes):
            rows = np.frombuffer(rows, np.int32)
        kwargs = {"array": array, "rows": rows, "blocks": blocks, "counts": counts}
        try:
            srv.check_uid({"array": array, "uid": uid})
            if srv.idle() and cost < config.get_bytes("daskangel.server.inline-get-bytes"):
                out = srv.timed("get_rows", cost, kwargs)
            else:
                out = await srv.run("get_rows", cost, **kwargs)
        except DaskAngelError as e:
            return error_reply(e)
        st = srv.op_stats["get_rows"]
        st[3] += rows.nbytes
        st[4] += out.nbytes
        if out.nbytes < config.get_bytes("daskangel.server.reply-frame-bytes"):
            return out.data  # plain bytes in the message (the caller knows the dtype)
        return to_serialize(out)

    async def call_local(self, op: str, server: int, cost: int = 0, **kwargs: Any) -> Any:
        """The same call from this worker's own process: nothing is serialised (so
        nothing is applied behind the reply: the caller may reuse its arrays)."""
        return await self._run(op, server, cost, kwargs, False)


def _scheduler_may_answer(worker: Worker) -> bool:
    """False when the worker's scheduler runs in this process and is closing (an
    in-process cluster shutting down: nobody would take the blocks, and waiting
    for an answer would hold up the shutdown)."""
    from distributed.core import Status
    from distributed.scheduler import Scheduler

    addr = getattr(worker.scheduler, "address", None)
    for sched in list(Scheduler._instances):
        if sched.address == addr:
            return bool(sched.status == Status.running)
    return True


def count_payload(srv: PSServer, op: str, kwargs: dict[str, Any], reply: Any) -> None:
    """Add the request's and the reply's array bytes to ``op``'s counters."""
    st = srv.op_stats[op]
    st[3] += payload_nbytes(kwargs)
    st[4] += payload_nbytes(reply)
