"""Random-row gets: one request and one reply frame per server.

For small gets the cost of a get of whole random rows (planned by
:mod:`._rowplan`) is fixed per-request work rather than bytes, so:

* each server gets one ``get_rows`` request (the ``daskangel_rows`` handler)
  and answers with one array, gathered into a reused reply buffer
  (:func:`~._dataops._get_rows`);
* a reply of at least ``daskangel.client.direct-read-bytes`` is read from the
  socket into a reused scratch buffer (:mod:`daskangel._recv`); its rows go to
  their request positions with one compiled scatter (:func:`._rowkernels.put_rows`),
  done on the event loop up to ``daskangel.client.loop-scatter-bytes`` (the
  caller is then woken once, at the end) and in the caller's thread above it,
  as each reply lands, while the loop receives the others;
* a get whose replies are each at most ``daskangel.client.batched-reply-bytes``
  has its requests made in the caller's thread, then writes every server's
  request and reads the replies in turn in one coroutine, without a task per
  server (:func:`~daskangel._recv.send_all_recv_into`); a blocking
  :func:`get_rows` is told the outcome by the coroutine itself, not through a
  ``concurrent.futures.Future`` (one loop turn and a callback chain fewer).

Between processes on TCP / TLS both go over daskangel's lean wire
(:mod:`daskangel._lean`: kept comms, no Dask per-message framing), a large
reply's rows read from it into the scratch buffer as above.

Anything unusual (a lost, moved or moving block, an unreachable server) makes
:func:`get_rows` return ``None`` and the caller takes the general path, which
refreshes the layout, waits for recoveries and resends (a read is idempotent).
"""

from __future__ import annotations

import concurrent.futures
import queue
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np

from .. import config
from .._lean import lean_all
from .._recv import send_all_recv_into, send_recv_into
from .._wire import raise_if_error
from . import _rowkernels as RK
from ._binding import Binding
from ._blockcalls import fast_path_held
from ._loopcall import Outcome, launch
from ._meta import ArrayMeta, ServerId
from ._routing import check_size
from ._rowplan import RowPlan, RowSpec, lean_msg, plan_rows, row_spec, unsorted_rows

__all__ = ["RowChunk", "get_rows", "get_rows_async", "unsorted_rows"]

# a fetch handing a large reply to the caller's thread: (request positions, rows)
Handoff = Callable[[tuple[np.ndarray, np.ndarray] | None], None]


def _small_calls(
    sp: RowSpec, name: str, m: ArrayMeta, plan: RowPlan, scratch: np.ndarray | None,
    direct: int, into_at: int,
) -> list[tuple[str, str, dict[str, Any], list[int], list[np.ndarray | None]]]:  # fmt: skip
    """A small get's lean requests, made in the caller's thread (replies of at
    least ``into_at`` bytes are read into ``scratch``)."""
    calls: list[tuple[str, str, dict[str, Any], list[int], list[np.ndarray | None]]] = []
    for s, blocks, counts, (start, stop) in plan.requests:
        nbytes = (stop - start) * sp.row_bytes
        msg = lean_msg(m, name, s, blocks, counts, plan.local[start:stop], nbytes, direct)
        if scratch is not None and nbytes >= into_at:
            calls.append((s.address, "daskangel_rows", msg, [nbytes], [scratch[start:stop]]))
        else:
            calls.append((s.address, "daskangel_rows", msg, [], []))
    return calls


def _plain(call: Any) -> Any:
    """A ``daskangel_rows`` call for the lean wire: its rows as bytes (the wire
    carries plain values; the handler reads bytes as int32 rows)."""
    address, op, msg, sizes, targets = call
    rows = msg["rows"]
    if not isinstance(rows, bytes):
        msg = {**msg, "rows": np.ascontiguousarray(rows.data, np.int32).tobytes()}
    return address, op, msg, sizes, targets


def _part(got: Any, m: ArrayMeta, n: int) -> np.ndarray:
    """A reply's ``n`` rows: an array, or their bytes (a reply under
    ``daskangel.server.reply-frame-bytes`` travels inside the message)."""
    got = raise_if_error(got)
    if isinstance(got, (bytes, bytearray, memoryview)):
        got = np.frombuffer(got, m.dtype)
    return got.reshape(n, m.shape[1])  # type: ignore[no-any-return]


async def _fetch_small(
    b: Binding, name: str, m: ArrayMeta, plan: RowPlan, out: np.ndarray, calls: list[Any]
) -> bool:
    """A small get (each reply at most ``daskangel.client.batched-reply-bytes``) to
    other processes' servers: write every request, then read the replies in turn
    and put their rows in request order, in one coroutine
    (:func:`~daskangel._recv.send_all_recv_into`)."""

    async def go() -> None:
        lean = b.lean([c[0] for c in calls])
        if lean is not None:
            replies = await lean_all(lean, [_plain(c) for c in calls])
        else:
            replies = await send_all_recv_into(b._pool or await b.pool(), calls)
        for (_, _, _, (start, stop)), got in zip(plan.requests, replies, strict=True):
            RK.put_rows(out, plan.order[start:stop], _part(got, m, stop - start))

    return fast_path_held(await b._watched(name, m, [r[0] for r in plan.requests], [go()]))


async def _fetch(
    b: Binding,
    name: str,
    m: ArrayMeta,
    plan: RowPlan,
    out: np.ndarray,
    scratch: np.ndarray | None,
    handoff: Handoff,
    keep_at: int | None = None,
) -> bool:
    """Send every server its request and put each reply's rows in request order
    as it lands (large replies are read into ``scratch`` first, and handed to
    the caller's thread above ``daskangel.client.loop-scatter-bytes``, or from
    ``keep_at`` bytes when the caller takes them as they landed); False when the
    general path must answer instead (layout changed)."""
    width = m.shape[1]
    row_bytes = width * m.itemsize
    direct = config.get_bytes("daskangel.client.direct-read-bytes")
    on_loop = config.get_bytes("daskangel.client.loop-scatter-bytes")
    lean = m.transport == "handlers"
    here = b.local_worker.address if b.local_worker is not None else None

    async def one(s: ServerId, blocks: list[int], counts: list[int], run: tuple[int, int]) -> None:
        start, stop = run
        nbytes = (stop - start) * row_bytes
        rows = plan.local[start:stop]
        into: tuple[list[int], list[np.ndarray | None]] = ([], [])
        if scratch is not None and nbytes >= direct:
            into = ([nbytes], [scratch[start:stop]])
        if lean and s.address != here:
            msg = lean_msg(m, name, s, blocks, counts, rows, nbytes, direct)
            wire = b.lean([s.address])
            if wire is not None:
                call = _plain((s.address, "daskangel_rows", msg, *into))
                part = (await lean_all(wire, [call]))[0]
            else:
                pool = b._pool or await b.pool()
                part = await send_recv_into(pool, s.address, "daskangel_rows", msg, *into)
        else:  # this worker's own server (no comm), or the actors transport
            part = await b.call(
                s, "get_rows", nbytes, m.transport, into if into[0] else None,
                array=name, rows=rows, blocks=blocks, counts=counts,
                **({"uid": m.uid} if m.uid else {}),
            )  # fmt: skip
        part = _part(part, m, stop - start)
        if keep_at is not None:  # kept as it landed if read into scratch (writable)
            if nbytes >= keep_at and part.flags.writeable:
                handoff((plan.order[start:stop], part))
            else:
                RK.put_rows(out, plan.order[start:stop], part)
        elif nbytes <= on_loop:
            RK.put_rows(out, plan.order[start:stop], part)
        else:
            handoff((plan.order[start:stop], part))

    servers = [r[0] for r in plan.requests]
    return fast_path_held(await b._watched(name, m, servers, [one(*r) for r in plan.requests]))


def _start(
    b: Binding, name: str, m: ArrayMeta, rows: np.ndarray, handoff: Handoff, keep: bool = False
) -> tuple[Callable[..., Awaitable[bool]], tuple[Any, ...], np.ndarray] | None:
    """Plan a get in the caller's thread: ``(coroutine function, its arguments,
    the result buffer)``, or None when the general path must answer.  ``keep``:
    every reply read into the scratch buffer goes to ``handoff`` as it landed,
    not into request order (the caller takes the rows in any order)."""
    sp = row_spec(b, name, m)
    n = rows.shape[0]
    check_size("get", n * sp.row_bytes)
    plan = plan_rows(m, rows, sp)
    if plan is None:
        return None
    full = (n, sp.width)
    out = b.result(full, m.dtype)  # a reused buffer once the caller drops it
    direct = config.get_bytes("daskangel.client.direct-read-bytes")
    # replies under reply-frame-bytes come as bytes inside the message: nothing to
    # read into place; larger ones land in a scratch buffer (only scattered from)
    into_at = max(direct, config.get_bytes("daskangel.server.reply-frame-bytes"))
    biggest = max(r[3][1] - r[3][0] for r in plan.requests) * sp.row_bytes
    scratch = b.scratch(full, m.dtype) if biggest >= into_at else None
    if sp.small and biggest <= min(
        config.get_bytes("daskangel.client.batched-reply-bytes"),
        config.get_bytes("daskangel.client.loop-scatter-bytes"),
    ):
        calls = _small_calls(sp, name, m, plan, scratch, direct, into_at)
        return _fetch_small, (b, name, m, plan, out, calls), out
    keep_at = into_at if keep and scratch is not None else None
    return _fetch, (b, name, m, plan, out, scratch, handoff, keep_at), out


def get_rows(b: Binding, name: str, m: ArrayMeta, rows: np.ndarray) -> np.ndarray | None:
    """Rows ``rows`` (checked, from :func:`unsorted_rows`) in request order, or
    None when the general path must answer."""
    landed: queue.SimpleQueue[Any] = queue.SimpleQueue()
    started = _start(b, name, m, rows, landed.put)
    if started is None:
        return None
    fn, args, out = started
    b.loop.asyncio_loop.call_soon_threadsafe(launch, fn(*args), landed.put)
    while not isinstance(got := landed.get(), Outcome):
        pos, part = got
        RK.put_rows(out, pos, part)  # releases the GIL: the loop receives the other replies
    if got.error is not None:
        raise got.error
    return out if got.ok else None


def get_rows_async(
    b: Binding, name: str, m: ArrayMeta, rows: np.ndarray, fallback: Callable[[], np.ndarray]
) -> tuple[Any, Callable[[bool], np.ndarray]] | None:
    """``(future, finish)`` of :func:`get_rows` started now: ``finish(future's
    result)`` in the caller's thread scatters the large replies (or runs
    ``fallback``, the general path); None when the general path must answer."""
    big: list[tuple[np.ndarray, np.ndarray]] = []
    started = _start(b, name, m, rows, lambda got: big.append(got) if got else None)
    if started is None:
        return None
    fn, args, out = started
    fut = b.submit(fn, *args)

    def finish(ok: bool) -> np.ndarray:
        if not ok:
            return fallback()
        for pos, part in big:
            RK.put_rows(out, pos, part)
        return out

    return fut, finish


class RowChunk:
    """Random rows fetched for :meth:`~._agent.PSAgent.get_iter` as :func:`get_rows`
    fetches them: one request a server, into a result buffer reused once nothing
    refers to it; the batches are then views of it (no copy a batch).

    In request order (``ordered``), each large reply is put in place as it lands
    (by :meth:`finish`, in the consumer's thread, while the loop receives the
    others).  In any order, every reply read into the scratch buffer is kept as
    it landed (:meth:`finish_parts`: no scatter at all), collected on the loop,
    so the consumer is woken once, when the last reply is in."""

    def __init__(
        self,
        fut: Any,
        out: np.ndarray,
        landed: queue.SimpleQueue[Any],
        fallback: Callable[[], np.ndarray],
        kept: list[tuple[np.ndarray, np.ndarray]],
    ) -> None:
        self._fut, self._out, self._landed, self._fallback = fut, out, landed, fallback
        self._kept = kept

    @property
    def futures(self) -> list[Any]:
        return [self._fut]

    def done(self) -> bool:
        return bool(self._fut.done())

    def finish(self) -> np.ndarray:
        """The rows in request order (the general path's if the layout changed)."""
        while not isinstance(got := self._landed.get(), Outcome):
            RK.put_rows(self._out, *got)  # releases the GIL: the loop receives the others
        if got.error is not None:
            raise got.error
        if not got.ok:
            return self._fallback()
        for pos, part in self._kept:
            RK.put_rows(self._out, pos, part)
        return self._out

    def finish_parts(self) -> tuple[np.ndarray, list[tuple[np.ndarray, np.ndarray]]]:
        """``(result, parts)`` without putting the large replies in request order:
        ``parts`` are ``[(their positions among the rows, their rows)]`` as they
        landed (views of the scratch buffer), ``result`` holds the other rows in
        place (all of them, ``parts`` empty, if the general path answered)."""
        parts = []
        while not isinstance(got := self._landed.get(), Outcome):
            parts.append(got)
        if got.error is not None:
            raise got.error
        return (self._out, parts + self._kept) if got.ok else (self._fallback(), [])

    @classmethod
    def start(
        cls,
        b: Binding,
        name: str,
        m: ArrayMeta,
        rows: np.ndarray,
        fallback: Callable[[], np.ndarray],
        ordered: bool = True,
    ) -> RowChunk | None:
        """Start fetching ``rows`` (checked, unsorted); None: take the general path.
        ``ordered=False``: the large replies are kept as they landed (see the class)."""
        if m.sparse or m.layout.n_col_blocks != 1:
            return None
        landed: queue.SimpleQueue[Any] = queue.SimpleQueue()
        done: concurrent.futures.Future[None] = concurrent.futures.Future()
        kept: list[tuple[np.ndarray, np.ndarray]] = []

        def put(got: Any) -> None:  # on the loop: large replies, then the outcome
            landed.put(got)
            if isinstance(got, Outcome):
                done.set_result(None)

        def keep(got: tuple[np.ndarray, np.ndarray] | None) -> None:
            if got is not None:  # on the loop: collected, the consumer not woken
                kept.append(got)

        started = _start(b, name, m, rows, put if ordered else keep, keep=not ordered)
        if started is None:
            return None
        fn, args, out = started
        b.loop.asyncio_loop.call_soon_threadsafe(launch, fn(*args), put)
        return cls(done, out, landed, fallback, kept)
