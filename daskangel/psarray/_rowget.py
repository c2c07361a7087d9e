"""Random-row gets: one request and one reply frame per server.

A get of whole rows of a dense matrix cut only by rows (LDA's word-topic
counts, MF's factors) is the row path's common case, and for small gets its
cost was fixed per-request work rather than bytes: a part and a reply frame per
block, planning in Python per block, the caller's thread woken per reply.  Here
(:func:`plan_rows`, no sort of the row ids):

* one compiled pass (:mod:`._rowkernels`) finds each row's block and server
  by binary search over the row bounds and groups the rows by a stable counting
  sort of ``(server, block)`` keys, each block's run keeping the caller's order;
* each server gets one ``get_rows`` request: its local rows (``int32``, block
  after block) and the runs' block ids and counts, and answers with one array,
  gathered into a reused reply buffer (:func:`~._dataops._get_rows`);
* a reply of at least ``daskangel.client.direct-read-bytes`` is read from the
  socket into a reused scratch buffer (:mod:`daskangel._recv`); its rows go to
  their request positions with one compiled scatter (:func:`._rowkernels.put_rows`), done
  on the event loop up to ``daskangel.client.loop-scatter-bytes`` (the caller is
  then woken once, at the end) and in the caller's thread above it, as each
  reply lands, while the loop receives the others;
* a get whose replies are each at most ``daskangel.client.batched-reply-bytes``
  writes every server's request and then reads the replies in turn in one
  coroutine, without a task per server (:func:`~daskangel._recv.send_all_recv_into`).

Anything unusual (a lost, moved or moving block, an unreachable server) makes
:func:`get_rows` return ``None`` and the caller takes the general path, which
refreshes the layout, waits for recoveries and resends (a read is idempotent).

Example
-------
>>> from daskangel.psarray._layout import Layout
>>> from daskangel.psarray._initspec import InitSpec
>>> from daskangel.psarray._meta import ServerId
>>> lay = Layout((10, 2), (0, 4, 8, 10), "range", (0, 2), 1)
>>> m = ArrayMeta("w", (10, 2), 2, np.dtype("float32"), False, lay, InitSpec(),
...               servers=(ServerId("a", 0), ServerId("b", 0), ServerId("a", 0)))
>>> p = plan_rows(m, np.array([9, 1, 5, 0]))
>>> p.order.tolist(), p.local.tolist()
([1, 3, 0, 2], [1, 0, 1, 1])
>>> [(s.address, blocks, counts, run) for s, blocks, counts, run in p.requests]
[('a', [0, 2], [2, 1], (0, 3)), ('b', [1], [1], (3, 4))]
"""

from __future__ import annotations

import functools
import queue
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from distributed.comm.core import CommClosedError
from distributed.protocol import to_serialize

from .. import config
from .._recv import send_all_recv_into, send_recv_into
from .._wire import raise_if_error
from ..errors import StaleLayoutError
from . import _kernels as K
from . import _rowkernels as RK
from ._binding import Binding
from ._meta import ArrayMeta, ServerId
from ._routing import check_size, normalize_index

__all__ = ["RowChunk", "RowPlan", "get_rows", "get_rows_async", "plan_rows", "unsorted_rows"]

# a fetch handing a large reply to the caller's thread: (request positions, rows)
Handoff = Callable[[tuple[np.ndarray, np.ndarray] | None], None]


@dataclass(frozen=True)
class RowPlan:
    """Where the rows of a random-row get go.

    ``order[i]``: the request position of the ``i``-th row sent (rows grouped by
    server, then block); ``local``: those rows, local to their blocks;
    ``requests``: per server ``(server, block ids, rows per block, (start, stop)
    in order / local)``."""

    order: np.ndarray
    local: np.ndarray
    requests: list[tuple[ServerId, list[int], list[int], tuple[int, int]]]


@functools.lru_cache(maxsize=64)
def _keys(bounds: tuple[int, ...], servers: tuple[ServerId, ...]) -> tuple[np.ndarray, ...]:
    """``(row bounds, server rank of each block, the servers)`` of a layout."""
    ranked = sorted(set(servers))
    rank = {s: i for i, s in enumerate(ranked)}
    return (
        np.asarray(bounds, np.int64),
        np.array([rank[s] for s in servers], np.int64),
        np.array(ranked, dtype=object),
    )


def unsorted_rows(m: ArrayMeta, rows: Any, cols: Any) -> np.ndarray | None:
    """The row ids of a get this module answers (whole rows of a dense matrix cut
    only by rows, given as an index array of two or more rows not in increasing
    order), else None: sorted rows are read into place block by block."""
    if (
        cols is not None
        or rows is None
        or m.ndim != 2
        or m.sparse
        or m.layout.n_col_blocks != 1
        or isinstance(rows, (int, np.integer, slice))
    ):
        return None
    if (
        isinstance(rows, np.ndarray)
        and rows.ndim == 1
        and rows.shape[0] >= 2
        and rows.dtype in (np.int64, np.int32)
    ):
        # the common case in one compiled pass (normalize_index's checks, then sortedness)
        lo, hi, ordered = RK.index_scan(rows)
        if lo >= 0 and hi < m.shape[0]:
            return None if ordered else rows.astype(np.int64, copy=False)
    r, scalar = normalize_index("rows", rows, m.shape[0])
    if r is None or scalar or r.shape[0] < 2 or K.is_sorted(r):
        return None
    return r


def plan_rows(m: ArrayMeta, rows: np.ndarray) -> RowPlan | None:
    """Group checked row ids by server and block (None: a touched block is lost,
    or too many blocks)."""
    bounds, rank, servers = _keys(m.layout.row_bounds, m.servers)
    nb = bounds.shape[0] - 1
    if servers.shape[0] * nb > 1 << 16:
        return None
    order, local, counts = RK.plan_rows(rows, bounds, rank, servers.shape[0])
    requests: list[tuple[ServerId, list[int], list[int], tuple[int, int]]] = []
    start = s0 = 0
    last = -1
    blocks: list[int] = []
    cs: list[int] = []
    for k in np.flatnonzero(counts).tolist():
        srv, blk = divmod(k, nb)
        if blk in m.lost:
            return None
        if srv != last:
            if last >= 0:
                requests.append((servers[last], blocks, cs, (s0, start)))
            last, s0, blocks, cs = srv, start, [], []
        c = int(counts[k])
        blocks.append(blk)
        cs.append(c)
        start += c
    if last >= 0:
        requests.append((servers[last], blocks, cs, (s0, start)))
    return RowPlan(order, local, requests)


def _lean_msg(
    m: ArrayMeta, name: str, s: ServerId, blocks: list[int], counts: list[int], rows: np.ndarray,
    nbytes: int, direct: int,
) -> dict[str, Any]:  # fmt: skip
    """The ``daskangel_rows`` request: rows as int32 bytes, nothing wrapped."""
    msg = {
        "server": s.index, "array": name, "blocks": blocks, "counts": counts, "cost": nbytes,
        "rows": rows.tobytes() if rows.nbytes <= direct else to_serialize(rows),
    }  # fmt: skip
    if m.uid:
        msg["uid"] = m.uid
    return msg


async def _fetch(
    b: Binding,
    name: str,
    m: ArrayMeta,
    plan: RowPlan,
    out: np.ndarray,
    scratch: np.ndarray | None,
    handoff: Handoff,
) -> bool:
    """Send every server its request and put each reply's rows in request order
    as it lands (large replies are read into ``scratch`` first); False when the
    general path must answer instead (layout changed).

    A small get (each reply at most ``daskangel.client.batched-reply-bytes``)
    to other processes' servers writes every request, then reads the replies in
    turn, in one coroutine (:func:`~daskangel._recv.send_all_recv_into`)."""
    width = m.shape[1]
    row_bytes = width * m.itemsize
    direct = config.get_bytes("daskangel.client.direct-read-bytes")
    on_loop = config.get_bytes("daskangel.client.loop-scatter-bytes")
    # requests to other processes' servers over the handlers transport go lean
    lean = m.transport == "handlers"
    here = b.local_worker.address if b.local_worker is not None else None

    def into(start: int, stop: int) -> tuple[list[int], list[np.ndarray | None]]:
        nbytes = (stop - start) * row_bytes
        if scratch is not None and nbytes >= direct:
            return [nbytes], [scratch[start:stop]]
        return [], []

    async def small() -> None:
        pool = b._pool or await b.pool()
        calls = []
        for s, blocks, counts, (start, stop) in plan.requests:
            rows = plan.local[start:stop]
            msg = _lean_msg(m, name, s, blocks, counts, rows, (stop - start) * row_bytes, direct)
            calls.append((s.address, "daskangel_rows", msg, *into(start, stop)))
        replies = await send_all_recv_into(pool, calls)
        for (_, _, _, (start, stop)), got in zip(plan.requests, replies, strict=True):
            RK.put_rows(
                out, plan.order[start:stop], raise_if_error(got).reshape(stop - start, width)
            )

    async def one(s: ServerId, blocks: list[int], counts: list[int], run: tuple[int, int]) -> None:
        start, stop = run
        nbytes = (stop - start) * row_bytes
        rows = plan.local[start:stop]
        if lean and s.address != here:
            pool = b._pool or await b.pool()
            msg = _lean_msg(m, name, s, blocks, counts, rows, nbytes, direct)
            got = await send_recv_into(pool, s.address, "daskangel_rows", msg, *into(start, stop))
            part = raise_if_error(got)
        else:  # this worker's own server (no comm), or the actors transport
            target = into(start, stop)
            part = await b.call(
                s, "get_rows", nbytes, m.transport, target if target[0] else None,
                array=name, rows=rows, blocks=blocks, counts=counts,
                **({"uid": m.uid} if m.uid else {}),
            )  # fmt: skip
        part = part.reshape(stop - start, width)
        if nbytes <= on_loop:
            RK.put_rows(out, plan.order[start:stop], part)
        else:
            handoff((plan.order[start:stop], part))

    servers = [r[0] for r in plan.requests]
    batched = config.get_bytes("daskangel.client.batched-reply-bytes")
    if (
        lean
        and max(r[3][1] - r[3][0] for r in plan.requests) * row_bytes <= min(batched, on_loop)
        and here not in {s.address for s in servers}
    ):
        calls = [small()]
    else:
        calls = [one(*r) for r in plan.requests]
    results = await b._watched(name, m, servers, calls)
    for r in results:
        if isinstance(r, (StaleLayoutError, OSError, CommClosedError)):
            return False
        if isinstance(r, BaseException):
            raise r
    return True


def _start(
    b: Binding, name: str, m: ArrayMeta, rows: np.ndarray, handoff: Handoff
) -> tuple[Any, np.ndarray] | None:
    check_size("get", rows.shape[0] * m.shape[1] * m.itemsize)
    plan = plan_rows(m, rows)
    if plan is None:
        return None
    full = (rows.shape[0], m.shape[1])
    out = b.result(full, m.dtype)  # a reused buffer once the caller drops it
    direct = config.get_bytes("daskangel.client.direct-read-bytes")
    row_bytes = m.shape[1] * m.itemsize
    biggest = max(r[3][1] - r[3][0] for r in plan.requests)
    # replies land in a scratch buffer: they are only scattered from
    scratch = b.scratch(full, m.dtype) if biggest * row_bytes >= direct else None
    return b.submit(_fetch, b, name, m, plan, out, scratch, handoff), out


def get_rows(b: Binding, name: str, m: ArrayMeta, rows: np.ndarray) -> np.ndarray | None:
    """Rows ``rows`` (checked, from :func:`unsorted_rows`) in request order, or
    None when the general path must answer."""
    landed: queue.SimpleQueue[Any] = queue.SimpleQueue()
    started = _start(b, name, m, rows, landed.put)
    if started is None:
        return None
    fut, out = started
    fut.add_done_callback(lambda _: landed.put(None))
    while (got := landed.get()) is not None:
        pos, part = got
        RK.put_rows(out, pos, part)  # releases the GIL: the loop receives the other replies
    return out if fut.result() else None


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
    fut, out = started

    def finish(ok: bool) -> np.ndarray:
        if not ok:
            return fallback()
        for pos, part in big:
            RK.put_rows(out, pos, part)
        return out

    return fut, finish


class RowChunk:
    """Random rows fetched for :meth:`~._agent.PSAgent.get_iter` as :func:`get_rows`
    fetches them: one request a server, each reply put in request order as it
    lands (the large ones by :meth:`finish`, in the consumer's thread), into a
    result buffer reused once nothing refers to it; the batches are then views
    of it (no copy a batch)."""

    def __init__(self, fut: Any, finish: Callable[[bool], np.ndarray]) -> None:
        self._fut, self._finish = fut, finish

    @property
    def futures(self) -> list[Any]:
        return [self._fut]

    def done(self) -> bool:
        return bool(self._fut.done())

    def finish(self) -> np.ndarray:
        """The rows in request order (the general path's if the layout changed)."""
        return self._finish(self._fut.result())

    @classmethod
    def start(
        cls,
        b: Binding,
        name: str,
        m: ArrayMeta,
        rows: np.ndarray,
        fallback: Callable[[], np.ndarray],
    ) -> RowChunk | None:
        """Start fetching ``rows`` (checked, unsorted); None: take the general path."""
        if m.sparse or m.layout.n_col_blocks != 1:
            return None
        started = get_rows_async(b, name, m, rows, fallback)
        return None if started is None else cls(*started)
