"""The push side of the worker agent: buffered, merged, exactly-once increments.

Every task on a worker adds its increments to shared :class:`MergeBuffer` s, one
per ``(job, array, clock, shape)``, so increments of different tasks to the same
rows or keys are merged before anything is sent.  The buffers are pushed

* on their own, in the agent's push thread, once they hold more than
  ``daskangel.agent.flush-bytes`` (callers keep computing; they block only while
  more than ``daskangel.agent.max-inflight-bytes`` are in flight), and
* on :meth:`UpdatePusher.flush`, which ``clock()`` calls and which returns only
  once every buffered and in-flight push has been applied.

Each push carries a fresh write tag ``[writer_id, seq]``, the writer's clock and,
for a training task, its run ``[job, epoch]``.  A push that fails on the network
is resent with the *same* tag, and servers apply a tag once, so a retried push
is applied exactly once; a push of a run that a rollback abandoned is refused
(``PSServer.check_fence``), so it never lands on the restored state.  A flush
returns (or raises the first failure) only once none of its pushes is running.

Example
-------
>>> p = get_agent().pusher                                          # doctest: +SKIP
>>> p.increment("w", np.ones(3), cols=[1, 5, 5], job=None, clock=None)  # doctest: +SKIP
>>> p.flush()  # doctest: +SKIP

``flush`` returns once every buffered update is applied.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
from distributed.comm.core import CommClosedError

from .. import config
from ..errors import PSIndexError, RolledBackError, ServerLostError, ShapeMismatchError
from ._array import PSArray
from ._binding import Binding
from ._budgeted import BudgetedSender
from ._meta import ArrayMeta
from ._plan import coo_parts as _coo_parts
from ._plan import is_sparse_input as _is_sparse_input
from ._plan import plan_update, with_block
from ._pushbuffer import MergeBuffer
from ._routing import check_shape, check_size, check_values, normalize_index, route_coo

__all__ = ["BufferKey", "UpdatePusher", "to_units"]

# (job, array, clock, mode, epoch) with mode "rows" or "entries" and epoch the
# job's rollbacks when the writing task started (None outside training)
BufferKey = tuple[str | None, str, int | None, str, int | None]


def to_units(
    m: ArrayMeta, values: Any, rows: Any, cols: Any, casting: str | None, on_nonfinite: str | None
) -> tuple[str, np.ndarray, np.ndarray]:
    """Validate an increment; return ``(mode, unit keys, (k, width) values)``.

    Whole rows of a matrix become ``rows`` units; anything else (vector keys,
    rows x cols selections, sparse matrices) becomes ``entries`` keyed by
    ``row * n_cols + col``.  Errors are raised before anything is buffered.
    """
    nr, nc = m.shape
    if _is_sparse_input(values):
        if rows is not None or cols is not None:
            raise ShapeMismatchError(
                "values: a sparse matrix carries its own coordinates; pass it without rows=/cols="
            )
        cr, cc, data, shape = _coo_parts(values)
        full = (nc,) if m.ndim == 1 else m.shape
        if shape != full and not (m.ndim == 1 and shape == m.shape):
            raise ShapeMismatchError(
                f"values: expected a sparse matrix of shape {full}, got {shape}"
            )
        check_size("values", data.nbytes * 3)
        data, dkeep = check_values(data, m.dtype, casting, on_nonfinite)
        if dkeep is not None:
            cr, cc, data = cr[dkeep], cc[dkeep], data[dkeep]
        return "entries", cr * nc + cc, data.reshape(-1, 1)
    if m.ndim == 1 and rows is not None:
        raise PSIndexError(f"rows: array {m.name!r} is 1-D; select with cols=")
    check_shape("values", m.shape, m.itemsize, rows, cols)
    r, r_scalar = normalize_index("rows", rows, nr)
    c, c_scalar = normalize_index("cols", cols, nc)
    vals = np.asarray(values)
    want: tuple[int, ...]
    ri = np.arange(nr, dtype=np.int64) if r is None else r
    if c is None and m.ndim == 2:
        want = (nc,) if r_scalar else (ri.shape[0], nc)
        mode, keys = "rows", ri
    else:
        ci = np.arange(nc, dtype=np.int64) if c is None else c
        want = (ri.shape[0], ci.shape[0])
        if m.ndim == 1 or r_scalar:
            want = want[1:]
        if c_scalar:
            want = want[:-1]
        mode, keys = "entries", (ri[:, None] * nc + ci[None, :]).ravel()
    try:
        vals = np.broadcast_to(vals, want)
    except ValueError:
        raise ShapeMismatchError(
            f"values: expected shape {want} (the rows x cols of the request) or one that "
            f"broadcasts to it, got {vals.shape}"
        ) from None
    width = nc if mode == "rows" else 1
    vals = vals.reshape(-1, width)
    check_size("values", vals.size * m.itemsize)
    vals, keep = check_values(vals, m.dtype, casting, on_nonfinite)
    if keep is not None:
        if mode == "rows":
            vals = np.where(keep, vals, 0).astype(m.dtype)  # adding 0 skips an entry
        else:
            k = keep.ravel()
            keys, vals = keys[k], vals[k]
    return mode, keys, np.array(vals, dtype=m.dtype, copy=True)


class UpdatePusher:
    """Merge buffers shared by a worker's tasks, and the pushes in flight."""

    def __init__(self, binding: Binding) -> None:
        self.binding = binding
        self._cv = threading.Condition(threading.Lock())
        # {(job, array, clock, mode): MergeBuffer}
        self.buffers: dict[BufferKey, MergeBuffer] = {}
        # {push future: wire bytes}: pushes started and not yet applied
        self.inflight: dict[concurrent.futures.Future[None], int] = {}
        self.error: BaseException | None = None
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="daskangel-agent-push")
        # counters: pushes sent, wire bytes, automatic flushes, increments buffered
        self.stats = {"pushes": 0, "push_bytes": 0, "auto_flushes": 0, "increments": 0}
        # managed communication (daskangel.comm.*): budgeted pushes between clocks
        self.budget = BudgetedSender(self)

    def _meta(self, name: str) -> ArrayMeta:
        return PSArray(name, binding=self.binding).meta

    # -- buffering --------------------------------------------------------------------

    def increment(
        self,
        name: str,
        values: Any,
        rows: Any = None,
        cols: Any = None,
        *,
        job: str | None = None,
        clock: int | None = None,
        epoch: int | None = None,
        casting: str | None = None,
        on_nonfinite: str | None = None,
    ) -> int:
        """Buffer an increment; return its size in bytes.  Pushes once over threshold.

        ``job`` / ``clock`` / ``epoch``: the writing task's job, clock and run (its
        pushes are fenced by that run: a rollback makes the servers refuse them)."""
        m = self._meta(name)
        mode, keys, vals = to_units(m, values, rows, cols, casting, on_nonfinite)
        if keys.shape[0] == 0:
            return 0
        key: BufferKey = (job, name, clock, mode, epoch)
        with self._cv:
            self._raise_error()
            buf = self.buffers.get(key)
            if buf is None:
                buf = self.buffers[key] = self._new_buffer(m, mode)
            buf.add(keys, vals)
            self.stats["increments"] += 1
            held = sum(b.nbytes for b in self.buffers.values())
            taken = self._take() if held >= config.get_bytes("daskangel.agent.flush-bytes") else []
            if taken:
                self.stats["auto_flushes"] += 1
        if taken:
            self._start(taken, background=True, kind="auto")
        if config.get("daskangel.comm.budget") is not None:
            self.budget.refresh()
        self._backpressure()
        return int(vals.nbytes)

    @staticmethod
    def _new_buffer(m: ArrayMeta, mode: str) -> MergeBuffer:
        dense_ok = not m.sparse and m.layout.col_mode == "range"
        limit = config.get_bytes("daskangel.agent.dense-buffer-bytes") if dense_ok else 0
        merge = config.get_bytes("daskangel.agent.merge-bytes")
        if mode == "rows":
            return MergeBuffer(m.shape[0], m.shape[1], m.dtype, 8, limit, merge)
        return MergeBuffer(m.shape[0] * m.shape[1], 1, m.dtype, 16, limit, merge)

    def _take(self) -> list[tuple[BufferKey, MergeBuffer, concurrent.futures.Future[None]]]:
        """Swap the buffers out (lock held) and register one push future for them."""
        if not self.buffers:
            return []
        taken = list(self.buffers.items())
        self.buffers = {}
        return self._register(taken)

    def _register(
        self, taken: list[tuple[BufferKey, MergeBuffer]]
    ) -> list[tuple[BufferKey, MergeBuffer, concurrent.futures.Future[None]]]:
        """Register one push future for buffers taken out (lock held)."""
        fut: concurrent.futures.Future[None] = concurrent.futures.Future()
        self.inflight[fut] = sum(b.nbytes for _, b in taken)
        fut.add_done_callback(self._done)
        return [(k, b, fut) for k, b in taken]

    def _done(self, fut: concurrent.futures.Future[None]) -> None:
        with self._cv:
            self.inflight.pop(fut, None)
            e = fut.exception()
            # a push refused by a rollback's fence belongs to the abandoned run (its
            # task is told to stop at its next tick): the error is kept for no one,
            # as the next task of this worker to flush would be the restarted run's
            if e is not None and self.error is None and not isinstance(e, RolledBackError):
                self.error = e
            self._cv.notify_all()

    def _raise_error(self) -> None:
        if self.error is not None:
            e, self.error = self.error, None
            raise e

    def _backpressure(self) -> None:
        limit = config.get_bytes("daskangel.agent.max-inflight-bytes")
        with self._cv:
            while self.error is None and sum(self.inflight.values()) > limit:
                self._cv.wait()

    # -- pushing ----------------------------------------------------------------------

    def flush(self, wait: bool = True) -> None:
        """Push everything buffered; with ``wait``, return once every push is applied."""
        with self._cv:
            taken = self._take()
        if taken:
            self._start(taken, background=False, kind="flush")
        if wait:
            self.wait()

    def wait(self) -> None:
        """Block until no push is in flight; raise the first push error, if any."""
        with self._cv:
            while self.inflight:
                self._cv.wait()
            self._raise_error()

    def _start(
        self,
        taken: list[tuple[BufferKey, MergeBuffer, concurrent.futures.Future[None]]],
        background: bool,
        kind: str = "flush",
    ) -> None:
        """Push ``taken``: ``kind`` is ``"early"`` (budgeted, counted when chosen),
        ``"auto"`` (over the size threshold) or ``"flush"`` (a clock boundary)."""
        outer = taken[0][2]

        def work() -> None:
            subs: list[concurrent.futures.Future[None]] = []
            try:
                sent = units = 0
                for (job, name, clock, mode, epoch), buf, _ in taken:
                    fmt, keys, vals = buf.take()
                    parts, cost = self.plan(name, mode, fmt, keys, vals)
                    sent += sum(cost.values())
                    units += vals.shape[0] if keys is None else keys.shape[0]
                    if parts:
                        extra = {"add": True, "tag": self.binding.next_tag(), "clock": clock}
                        if job is not None and epoch is not None:
                            extra["fence"] = [job, epoch]
                        subs.append(self.binding.submit(self.send, name, parts, cost, extra))
                        with self._cv:
                            self.stats["pushes"] += 1
                            self.stats["push_bytes"] += sum(cost.values())
                if kind != "early":
                    with self._cv:
                        self.budget.record_boundary(sent, units, clock=kind == "flush")
                # every push ends before the flush does, failed or not: a failure of
                # one must not leave the others running (and resending) behind it
                concurrent.futures.wait(subs)
                for s in subs:
                    s.result()
                outer.set_result(None)
            except BaseException as e:  # noqa: BLE001 - reported through the future
                concurrent.futures.wait(subs)
                outer.set_exception(e)

        if background:
            self._thread.submit(work)
        else:
            work()

    def plan(
        self, name: str, mode: str, fmt: str, keys: np.ndarray | None, vals: np.ndarray
    ) -> tuple[dict[int, dict[str, Any]], dict[int, int]]:
        """Parts per block for merged increments in the chosen wire format."""
        arr = PSArray(name, binding=self.binding)
        m = arr.meta
        if fmt == "dense":
            full = vals.reshape(m.shape) if m.ndim == 2 else vals.reshape(m.shape[1])
            return plan_update(m, full, None, None, "unsafe", "raise")
        assert keys is not None
        if keys.shape[0] == 0:
            return {}, {}
        if mode == "rows":
            return plan_update(m, vals, keys, None, "unsafe", "raise")
        r, c = np.divmod(keys, m.shape[1])
        coo = route_coo(m.layout, r, c, np.ascontiguousarray(vals[:, 0]))
        parts = with_block(coo)
        return parts, {b: p["values"].nbytes * 3 for b, p in parts.items()}

    async def send(
        self,
        name: str,
        parts: dict[int, dict[str, Any]],
        cost: dict[int, int],
        extra: dict[str, Any],
    ) -> None:
        """Push once; on a network failure resend with the same tag (applied once)."""
        retries = int(config.get("daskangel.agent.push-retries"))
        for attempt in range(retries + 1):
            try:
                await self.binding.call_blocks(name, "update", parts, cost, extra)
                return
            except (OSError, CommClosedError, ServerLostError, TimeoutError):
                if attempt >= retries:
                    raise
                await asyncio.sleep(min(2.0, 0.05 * 2**attempt))

    def drop_job(self, job: str) -> int:
        """Discard the buffered (unsent) increments of ``job``; return how many buffers.

        Used when a job rolls back: its tasks restart from a snapshot, and what
        they had buffered belongs to the abandoned run.
        """
        with self._cv:
            keys = [k for k in self.buffers if k[0] == job]
            for k in keys:
                del self.buffers[k]
        return len(keys)

    def drop_arrays(self, names: set[str]) -> int:
        """Discard the buffered increments of freed arrays; return how many buffers."""
        with self._cv:
            keys = [k for k in self.buffers if k[1] in names]
            for k in keys:
                del self.buffers[k]
        return len(keys)

    def buffered_bytes(self) -> int:
        with self._cv:
            return sum(b.nbytes for b in self.buffers.values())

    def comm_status(self) -> dict[str, float]:
        """Managed-communication counters (``comm_*``; see :class:`BudgetedSender`)."""
        out = self.budget.status()
        out["comm_buffered"] = float(self.buffered_bytes())
        return out

    def close(self) -> None:
        self.budget.close()
        self._thread.shutdown(wait=False)
