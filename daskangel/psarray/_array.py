"""PSArray: the client handle of a parameter matrix held on PS servers.

A handle is a name.  It pickles to that name and binds late to whatever Dask
process unpickles it (driver, task, ``map_blocks`` chunk, another thread), so it
can be used anywhere in Dask.  Every operation validates its request in the
caller's thread, sends one message per touched server carrying the parts of each
touched block, contacts the servers concurrently, and assembles the answer.

Example
-------
>>> import numpy as np, daskangel as angel                     # doctest: +SKIP
>>> with angel.PSContext(client) as ps:                        # doctest: +SKIP
...     w = ps.zeros("w", shape=(2**20,), dtype="float32")  # doctest: +SKIP
...     w.increment(np.ones(3, "float32"), cols=[1, 5, 5])  # doctest: +SKIP
...     w.get(cols=[1, 5])  # doctest: +SKIP
array([1., 2.], dtype=float32)
"""

from __future__ import annotations

import concurrent.futures
import html
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, TypedDict, Unpack

import numpy as np
from dask.utils import format_bytes

from ..errors import ContextClosedError, InvalidTypeError, ShapeMismatchError, StaleLayoutError
from ._binding import Binding, get_binding
from ._keylists import KeySet
from ._meta import ArrayMeta, BlockInfo
from ._packpush import push_packed
from ._plan import assemble, direct_targets, plan_get, plan_update, sort_rows
from ._psfuture import PSFuture, done_future, in_order
from ._routing import check_values
from ._rowget import get_rows, get_rows_async, unsorted_rows
from ._rowpush import push_csr, push_rows
from ._taskclock import current_clock, current_fence
from ._versions import block_versions, token_of

if TYPE_CHECKING:
    import dask.array

__all__ = ["PSArray", "PSFuture", "WriteOptions"]


class WriteOptions(TypedDict, total=False):
    """The keyword options of a write (:meth:`PSArray.increment`, :meth:`PSArray.set`,
    a task's ``TaskArray.increment``): ``casting`` and ``on_nonfinite``."""

    casting: str | None
    on_nonfinite: str | None


def _rebuild(name: str, uid: str | None = None) -> PSArray:
    a = PSArray(name)
    a._uid = uid
    return a


class PSArray:
    """A named 2-D parameter matrix on PS servers (a vector is a 1-D array).

    Create arrays through :class:`daskangel.PSContext` (``ps.zeros``, ``ps.random``
    ...), or re-attach with ``PSArray(name)`` / ``ps.get_array(name)``.
    """

    def __init__(self, name: str, context: Any = None, binding: Binding | None = None) -> None:
        self.name = name
        self._context = context
        self._binding_obj = binding
        # the creation of ``name`` this handle stands for (pinned on first use):
        # a handle never silently follows a dropped array's successor
        self._uid: str | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (self.name, self._uid))

    # -- binding and metadata ------------------------------------------------

    @property
    def _binding(self) -> Binding:
        if self._context is not None and self._context.closed:
            raise ContextClosedError(
                f"array {self.name!r}: its PSContext is closed and the array was freed"
            )
        if self._binding_obj is None:
            self._binding_obj = get_binding()
        return self._binding_obj

    @property
    def meta(self) -> ArrayMeta:
        b = self._binding
        m = b.metas.get(self.name)
        uid = self._uid
        if m is not None and (uid is None or m.uid == uid):
            if uid is None:
                self._uid = m.uid
            return m
        # unknown here, or this process cached another creation of the name
        m = b.run(b.meta, self.name, m is not None)
        if uid is None:
            self._uid = m.uid
        elif m.uid != uid:
            raise StaleLayoutError(
                f"array {self.name!r}: this handle is for an array that was dropped; an "
                f"array of that name was created again (shape {m.shape}, dtype "
                f"{m.dtype.name}): use its handle (ps.get_array({self.name!r}))"
            )
        return m

    @property
    def shape(self) -> tuple[int, ...]:
        m = self.meta
        return (m.shape[1],) if m.ndim == 1 else m.shape

    @property
    def dtype(self) -> np.dtype:
        return self.meta.dtype

    @property
    def ndim(self) -> int:
        return self.meta.ndim

    @property
    def sparse(self) -> bool:
        return self.meta.sparse

    @property
    def blocks(self) -> list[BlockInfo]:
        """The layout: each block's rows, columns, shape and server."""
        return self.meta.blocks()

    @property
    def nbytes(self) -> int:
        """Bytes the servers hold for this array (stored entries for sparse)."""
        b = self._binding
        stats = b.run(self._stats)
        return sum(s["arrays"].get(self.name, 0) for s in stats)

    async def _stats(self) -> list[dict[str, Any]]:
        import asyncio

        m = await self._binding.meta(self.name)
        servers = sorted(set(m.servers))
        return list(
            await asyncio.gather(*(self._binding.call(s, "stats", 0, m.transport) for s in servers))
        )

    # -- get --------------------------------------------------------------------

    def get_async(self, rows: Any = None, cols: Any = None) -> PSFuture:
        """Start a :meth:`get`; return a :class:`PSFuture` of the numpy result."""
        m = self.meta
        b = self._binding
        r = unsorted_rows(m, rows, cols)
        if r is not None:
            # whole random rows: one request and one reply frame per server
            started = get_rows_async(b, self.name, m, r, lambda: self._get(m, rows, cols))
            if started is not None:
                return PSFuture(*started)
        parts, cost, into, finish = self._plan_get(m, rows, cols)
        return PSFuture(b.submit(b.call_blocks, self.name, "get", parts, cost, {}, into), finish)

    def _plan_get(self, m: ArrayMeta, rows: Any, cols: Any) -> tuple[Any, Any, Any, Any]:
        """The general path of a get, one part per block (any selection):
        ``(parts, cost, into, finish)`` for ``call_blocks``."""
        rows, order = sort_rows(m, rows)
        m, parts, places, cost, full, shape = plan_get(m, rows, cols)
        # rows planned sorted land in a scratch buffer, then are scattered back
        scratch = None if order is None else self._binding.scratch
        out, into = direct_targets(m.dtype, full, places, cost, scratch)
        return parts, cost, into, in_order(assemble(m, places, full, shape, out, into), order)

    def _get(self, m: ArrayMeta, rows: Any, cols: Any) -> np.ndarray:
        parts, cost, into, finish = self._plan_get(m, rows, cols)
        b = self._binding
        return finish(b.run(b.call_blocks, self.name, "get", parts, cost, {}, into))  # type: ignore[no-any-return]

    def get(self, rows: Any = None, cols: Any = None) -> np.ndarray:
        """Pull the whole array, some rows, some columns, or rows x columns.

        ``rows`` / ``cols`` are ``None`` (all), an int (drops that axis), a slice,
        a boolean mask or a sequence of integer indices (duplicates allowed).  A
        column index set is a pruned pull: each block is sent only its own keys;
        a :class:`KeySet` from :meth:`key_set` sends only a tag.
        """
        if isinstance(cols, KeySet):
            if rows is not None:
                raise ShapeMismatchError("rows: a key-set pull selects columns of a vector only")
            return self._agent().get_keys(cols)
        m = self.meta
        r = unsorted_rows(m, rows, cols)
        if r is not None:
            # whole random rows: one request and one reply frame per server
            got = get_rows(self._binding, self.name, m, r)
            if got is not None:
                return got
        return self._get(m, rows, cols)

    def _agent(self) -> Any:
        from ._agent import agent_of

        return agent_of(self._binding)

    def get_iter(
        self, rows: Any = None, batch: int = 1024, *, ordered: bool = False
    ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Pipelined pull of rows: yield ``(row ids, values)`` batches as they arrive.

        Requests for many batches go out up front, so work on one batch overlaps
        pulling the next (Angel's pipelined pulling).  ``ordered=True`` yields
        batches of consecutive ``rows`` in request order; otherwise a batch may
        group any of the rows (each once, with its id), as the replies landed.  Pulls go through this process's agent, so
        concurrent pulls of the same rows by several threads are sent once.
        """
        return self._agent().get_iter(self.name, rows, batch, ordered=ordered)  # type: ignore[no-any-return]

    def key_set(self, cols: Any) -> KeySet:
        """Register a key set of this vector on its servers for pruned pulls.

        ``w.get(cols=ks)`` then sends each server only a tag and moves only the
        values of those keys.  Example: ``ks = w.key_set(idx); v = w.get(cols=ks)``.
        """
        return self._agent().key_set(self.name, cols)  # type: ignore[no-any-return]

    def to_numpy(self) -> np.ndarray:
        """The whole array as numpy (subject to ``max-request-bytes``)."""
        return self.get()

    # -- writes -----------------------------------------------------------------

    def _write(
        self,
        add: bool,
        values: Any,
        rows: Any,
        cols: Any,
        casting: str | None = None,
        on_nonfinite: str | None = None,
        wait: bool = False,
    ) -> concurrent.futures.Future[Any] | None:
        # wait: the caller blocks on the write (a lean push may then be made in
        # its own thread, daskangel._leandirect)
        b = self._binding
        extra = {"add": add, "tag": b.next_tag(), "clock": current_clock(),
                 "fence": current_fence()}  # fmt: skip
        if rows is None and cols is None and casting is None and on_nonfinite is None:
            fut = push_csr(b, self.name, self.meta, values, extra, wait)  # a CSR, unplanned
            if fut is not None:
                return fut
        parts, cost = plan_update(
            self.meta, values, rows, cols, casting, on_nonfinite, add, b.pack_buffer
        )
        if not parts:
            return None
        fut = push_rows(b, self.name, self.meta, parts, cost, extra, wait) or push_packed(
            b, self.name, self.meta, parts, cost, extra, wait
        )
        return fut or b.submit(b.call_blocks, self.name, "update", parts, cost, extra)

    def increment_async(
        self,
        values: Any,
        rows: Any = None,
        cols: Any = None,
        *,
        casting: str | None = None,
        on_nonfinite: str | None = None,
    ) -> PSFuture:
        """Start an :meth:`increment`; ``result()`` returns ``None`` once applied."""
        fut = self._write(True, values, rows, cols, casting, on_nonfinite)
        return done_future() if fut is None else PSFuture(fut, lambda _: None)

    def increment(
        self, values: Any, rows: Any = None, cols: Any = None, **options: Unpack[WriteOptions]
    ) -> None:
        """Add ``values`` to the selected entries; duplicate indices are summed.

        ``values`` is a dense array shaped like the selection (or broadcastable to
        it), or a ``scipy.sparse`` matrix / ``sparse.COO`` of the array's full shape.
        ``casting`` (default ``daskangel.client.casting``, ``'safe'``) governs the
        cast to the array's dtype; ``on_nonfinite='skip'`` drops NaN/inf entries.
        """
        fut = self._write(True, values, rows, cols, wait=True, **options)
        if fut is not None:
            fut.result()

    def set(
        self, values: Any, rows: Any = None, cols: Any = None, **options: Unpack[WriteOptions]
    ) -> None:
        """Overwrite the selected entries (the last of duplicate indices wins);
        ``options`` as :meth:`increment`'s."""
        fut = self._write(False, values, rows, cols, wait=True, **options)
        if fut is not None:
            fut.result()

    def fill(self, value: Any) -> None:
        """Set every entry to ``value`` (a sparse array drops its stored keys)."""
        m = self.meta
        v = np.asarray(value)
        if v.ndim != 0:
            raise ShapeMismatchError(f"value: expected a scalar, got shape {v.shape}")
        check_values(
            v.reshape(1), m.dtype, "same_kind" if isinstance(value, (int, float)) else None, None
        )
        parts = {blk: {"block": blk} for blk in range(m.layout.n_blocks)}
        b = self._binding
        extra = {"value": v.astype(m.dtype).item(), "clock": current_clock(),
                 "fence": current_fence()}  # fmt: skip
        b.run(b.call_blocks, self.name, "fill", parts, {}, extra)

    # -- psf --------------------------------------------------------------------

    def psf_async(self, func: Any, *others: PSArray, atomic: bool = True) -> PSFuture:
        """Start :meth:`psf`; return a :class:`PSFuture` of its result."""
        from ._psf_client import run_psf

        names = [self.name] + [_name_of(o) for o in others]
        b = self._binding
        return PSFuture(
            b.submit(run_psf, b, func, names, atomic, current_clock(), current_fence()), lambda r: r
        )

    def psf(self, func: Any, *others: PSArray, atomic: bool = True) -> Any:
        """Run the PS function ``func`` on this array's servers (and ``others``').

        ``func`` is a psf object, e.g. from ``daskangel.ops``: a *get* psf
        (``ops.Sum(axis=1)``, ``ops.Dot()`` ...) runs next to each block and returns
        the merged partial results; an *update* psf (``ops.Scale(2.0)``,
        ``ops.Axpy(alpha=0.5)`` ...) changes the blocks in place and returns
        ``None`` when every block is done.  ``others`` must be co-partitioned with
        this array (``ps.zeros_like``).  An update is all-or-nothing: if partition
        code raises on any block, no block changes and :class:`PSFError` carries
        the remote traceback.  ``atomic=False`` lets each server commit on its own
        (one round trip instead of two; a failure may then leave some servers
        updated).
        """
        from ._psf_client import run_psf

        names = [self.name] + [_name_of(o) for o in others]
        b = self._binding
        return b.run(run_psf, b, func, names, atomic, current_clock(), current_fence())

    # -- dask -------------------------------------------------------------------

    def version_token(self) -> str:
        """A token that changes whenever any block of the array is written (answered
        once every write queued before it is applied: :mod:`._versions`)."""
        m = self.meta
        versions = block_versions(self._binding, self.name, m)
        return token_of(self.name, m.generation, versions)

    def to_dask_array(self) -> dask.array.Array:
        """The array as a ``dask.array``: one task per block, read on its worker.

        Keys include :meth:`version_token`, so a later call after any write never
        reuses a cached result.  Sparse arrays give ``sparse.COO`` chunks.
        """
        from ._dask import to_dask_array

        return to_dask_array(self)

    # -- display ----------------------------------------------------------------

    def __repr__(self) -> str:
        try:
            m = self.meta
        except Exception as e:  # noqa: BLE001 - a repr must not raise
            return f"PSArray<{self.name!r}, unavailable: {type(e).__name__}>"
        servers = len(set(m.servers))
        kind = "sparse" if m.sparse else "dense"
        shape = (m.shape[1],) if m.ndim == 1 else m.shape
        logical = format_bytes(m.shape[0] * m.shape[1] * m.itemsize)
        return (
            f"PSArray<name={m.name!r}, shape={shape}, dtype={m.dtype.name}, {kind}, "
            f"{m.layout.n_blocks} blocks on {servers} servers, {logical} logical>"
        )

    def _repr_html_(self) -> str:
        try:
            m = self.meta
        except Exception as e:  # noqa: BLE001
            return html.escape(f"PSArray {self.name!r}: unavailable ({e})")
        shape = (m.shape[1],) if m.ndim == 1 else m.shape
        per_server: dict[str, int] = {}
        for s in m.servers:
            per_server[str(s)] = per_server.get(str(s), 0) + 1
        rows = "".join(
            f"<tr><td>{html.escape(k)}</td><td>{v}</td></tr>" for k, v in sorted(per_server.items())
        )
        return (
            f"<div><strong>PSArray</strong> <code>{html.escape(m.name)}</code>"
            f"<table><tr><th>shape</th><td>{shape}</td></tr>"
            f"<tr><th>dtype</th><td>{m.dtype.name}</td></tr>"
            f"<tr><th>storage</th><td>{'sparse' if m.sparse else 'dense'}</td></tr>"
            f"<tr><th>blocks</th><td>{m.layout.n_blocks} ({html.escape(m.layout.describe())})</td></tr>"
            f"<tr><th>logical bytes</th><td>{format_bytes(m.shape[0] * m.shape[1] * m.itemsize)}</td></tr>"
            f"</table><table><tr><th>server</th><th>blocks</th></tr>{rows}</table></div>"
        )


def _name_of(arr: Any) -> str:
    if not isinstance(arr, PSArray):
        raise InvalidTypeError(f"arrays: expected PSArray operands, got {type(arr).__name__}")
    return arr.name
