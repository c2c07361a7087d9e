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
...     w = ps.zeros("w", shape=(2**20,), dtype="float32")
...     w.increment(np.ones(3, "float32"), cols=[1, 5, 5])
...     w.get(cols=[1, 5])
array([1., 2.], dtype=float32)
"""

from __future__ import annotations

import concurrent.futures
import html
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
from dask.base import tokenize
from dask.utils import format_bytes

from .. import config
from .._recv import landed
from ..errors import ContextClosedError, InvalidTypeError, PSIndexError, ShapeMismatchError
from ._binding import Binding, get_binding
from ._keylists import KeySet
from ._meta import ArrayMeta, BlockInfo
from ._packed import plan_packed
from ._routing import (
    AxisPlan,
    check_size,
    check_values,
    normalize_index,
    plan_axis,
    route_coo,
)
from ._taskclock import current_clock

if TYPE_CHECKING:
    import dask.array

__all__ = ["PSArray", "PSFuture"]


class PSFuture:
    """The pending result of an ``*_async`` call.

    ``result()`` waits for the servers and finishes the work (assembling a get)
    in the calling thread.
    """

    def __init__(self, fut: concurrent.futures.Future[Any], finish: Callable[[Any], Any]) -> None:
        self._fut = fut
        self._finish = finish
        self._done = False
        self._value: Any = None

    def done(self) -> bool:
        return self._fut.done()

    def result(self, timeout: float | None = None) -> Any:
        if not self._done:
            self._value = self._finish(self._fut.result(timeout))
            self._done = True
        return self._value

    def exception(self, timeout: float | None = None) -> BaseException | None:
        return self._fut.exception(timeout)


def _rebuild(name: str) -> PSArray:
    return PSArray(name)


class PSArray:
    """A named 2-D parameter matrix on PS servers (a vector is a 1-D array).

    Create arrays through :class:`daskangel.PSContext` (``ps.zeros``, ``ps.random``
    ...), or re-attach with ``PSArray(name)`` / ``ps.get_array(name)``.
    """

    def __init__(self, name: str, context: Any = None, binding: Binding | None = None) -> None:
        self.name = name
        self._context = context
        self._binding_obj = binding

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (self.name,))

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
        return m if m is not None else b.run(b.meta, self.name)

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

    # -- planning ---------------------------------------------------------------

    def _axes(
        self, m: ArrayMeta, rows: Any, cols: Any
    ) -> tuple[AxisPlan, AxisPlan, tuple[int, ...]]:
        if m.ndim == 1 and rows is not None:
            raise PSIndexError(f"rows: array {self.name!r} is 1-D; select with cols=")
        r, r_scalar = normalize_index("rows", rows, m.shape[0])
        c, c_scalar = normalize_index("cols", cols, m.shape[1])
        rp = plan_axis(m.layout, "rows", r, m.shape[0])
        cp = plan_axis(m.layout, "cols", c, m.shape[1])
        shape: tuple[int, ...] = (rp.size, cp.size)
        if m.ndim == 1 or r_scalar:
            shape = shape[1:]
        if c_scalar:
            shape = shape[:-1]
        return rp, cp, shape

    @staticmethod
    def _grid(
        m: ArrayMeta, rp: AxisPlan, cp: AxisPlan
    ) -> list[tuple[int, int, int]]:  # [(block, row_k, col_k)]
        nc = m.layout.n_col_blocks
        return [
            (rb * nc + cb, i, j) for i, rb in enumerate(rp.blocks) for j, cb in enumerate(cp.blocks)
        ]

    @staticmethod
    def _len(x: np.ndarray | slice) -> int:
        return x.stop - x.start if isinstance(x, slice) else x.shape[0]

    # -- get --------------------------------------------------------------------

    def _plan_get(self, rows: Any, cols: Any) -> tuple[Any, ...]:
        m = self.meta
        rp, cp, shape = self._axes(m, rows, cols)
        check_size("get", rp.size * cp.size * m.itemsize)
        parts, places, cost = {}, {}, {}
        for b, i, j in self._grid(m, rp, cp):
            parts[b] = {"block": b, "rows": _short(rp.local[i]), "cols": _short(cp.local[j])}
            places[b] = (rp.out[i], cp.out[j])
            cost[b] = self._len(rp.out[i]) * self._len(cp.out[j]) * m.itemsize
        return m, parts, places, cost, (rp.size, cp.size), shape

    def _assemble(
        self,
        m: ArrayMeta,
        places: dict[int, Any],
        full: tuple[int, int],
        shape: tuple[int, ...],
        out: np.ndarray | None = None,
        into: dict[int, tuple[int, np.ndarray | None]] | None = None,
    ) -> Callable[[dict[int, Any]], np.ndarray]:
        """The function putting the blocks' results into one array.

        With ``out`` (preallocated for a large get) results read straight into
        their place (``into``) are left alone; anything else is copied in, after
        taking a copy of a result that still lies inside ``out``.
        """

        def finish(results: dict[int, np.ndarray]) -> np.ndarray:
            if out is None:
                if len(results) == 1:
                    (res,) = results.values()
                    if res.shape == full:
                        return res.reshape(shape)
                dest = np.empty(full, dtype=m.dtype)
            else:
                dest = out
            copies = []
            for b, res in results.items():
                target = into[b][1] if into is not None and b in into else None
                if landed(res, target):
                    continue
                if out is not None and np.may_share_memory(res, out):
                    res = res.copy()
                copies.append((b, res))
            for b, res in copies:
                rs, cs = places[b]
                if isinstance(rs, slice) or isinstance(cs, slice):
                    dest[rs, cs] = res
                else:
                    dest[np.ix_(rs, cs)] = res
            return dest.reshape(shape)

        return finish

    def get_async(self, rows: Any = None, cols: Any = None) -> PSFuture:
        """Start a :meth:`get`; return a :class:`PSFuture` of the numpy result."""
        m, parts, places, cost, full, shape = self._plan_get(rows, cols)
        out, into = _direct_targets(m.dtype, full, places, cost)
        b = self._binding
        fut = b.submit(b.call_blocks, self.name, "get", parts, cost, {}, into)
        return PSFuture(fut, self._assemble(m, places, full, shape, out, into))

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
        m, parts, places, cost, full, shape = self._plan_get(rows, cols)
        out, into = _direct_targets(m.dtype, full, places, cost)
        b = self._binding
        results = b.run(b.call_blocks, self.name, "get", parts, cost, {}, into)
        return self._assemble(m, places, full, shape, out, into)(results)

    def _agent(self) -> Any:
        from ._agent import agent_of

        return agent_of(self._binding)

    def get_iter(
        self, rows: Any = None, batch: int = 1024, *, ordered: bool = False
    ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Pipelined pull of rows: yield ``(row ids, values)`` batches as they arrive.

        Requests for many batches go out up front, so work on one batch overlaps
        pulling the next (Angel's pipelined pulling).  ``ordered=True`` yields the
        batches in request order.  Pulls go through this process's agent, so
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

    def _plan_update(
        self,
        values: Any,
        rows: Any,
        cols: Any,
        casting: str | None,
        on_nonfinite: str | None,
        add: bool = False,
    ) -> tuple[dict[int, dict[str, Any]], dict[int, int]]:
        m = self.meta
        if casting is None and isinstance(values, (int, float)) and not isinstance(values, bool):
            casting = "same_kind"  # a Python number takes the array's dtype (NEP 50)
        if _is_sparse_input(values):
            if rows is not None or cols is not None:
                raise ShapeMismatchError(
                    "values: a sparse matrix carries its own coordinates; "
                    "pass it without rows= / cols="
                )
            return self._plan_coo(m, values, casting, on_nonfinite)
        # one row of a sparse 4-byte array at many columns: packed parts (a vector
        # with rows= goes the general way, which names the error)
        if (
            add
            and cols is not None
            and m.sparse
            and m.itemsize == 4
            and (m.ndim > 1 or rows is None)
        ):
            packed = plan_packed(m, values, rows, cols, casting, on_nonfinite)
            if packed is not None:
                return packed
        rp, cp, shape = self._axes(m, rows, cols)
        vals = np.asarray(values)
        try:
            vals = np.broadcast_to(vals, shape).reshape(rp.size, cp.size)
        except ValueError:
            raise ShapeMismatchError(
                f"values: expected shape {shape} (the rows x cols of the request) "
                f"or one that broadcasts to it, got {vals.shape}"
            ) from None
        check_size("values", vals.size * m.itemsize)
        vals, keep = check_values(vals, m.dtype, casting, on_nonfinite)
        if keep is not None:
            rr, cc = np.nonzero(keep)
            gr = rr if rp.size == m.shape[0] and rows is None else _expand(rp)[rr]
            gc = cc if cp.size == m.shape[1] and cols is None else _expand(cp)[cc]
            coo = route_coo(m.layout, gr, gc, vals[rr, cc])
            return self._with_block(coo), {b: p["values"].nbytes * 3 for b, p in coo.items()}
        parts: dict[int, dict[str, Any]] = {}
        cost: dict[int, int] = {}
        for b, i, j in self._grid(m, rp, cp):
            rs, cs = rp.out[i], cp.out[j]
            if isinstance(rs, slice) or isinstance(cs, slice):
                v = np.ascontiguousarray(vals[rs, cs])
            else:
                v = vals[np.ix_(rs, cs)]
            parts[b] = {"block": b, "rows": rp.local[i], "cols": cp.local[j], "values": v}
            cost[b] = v.nbytes
        return parts, cost

    def _plan_coo(
        self, m: ArrayMeta, values: Any, casting: str | None, on_nonfinite: str | None
    ) -> tuple[dict[int, dict[str, Any]], dict[int, int]]:
        rows, cols, data, shape = _coo_parts(values)
        want = (m.shape[1],) if m.ndim == 1 else m.shape
        if shape != want and not (m.ndim == 1 and shape == m.shape):
            raise ShapeMismatchError(
                f"values: expected a sparse matrix of shape {want}, got {shape}"
            )
        check_size("values", data.nbytes + rows.nbytes + cols.nbytes)
        data, keep = check_values(data, m.dtype, casting, on_nonfinite)
        if keep is not None:
            rows, cols, data = rows[keep], cols[keep], data[keep]
        coo = route_coo(m.layout, rows, cols, data)
        return self._with_block(coo), {b: p["values"].nbytes * 3 for b, p in coo.items()}

    @staticmethod
    def _with_block(parts: dict[int, dict[str, np.ndarray]]) -> dict[int, dict[str, Any]]:
        out: dict[int, dict[str, Any]] = {}
        for b, p in parts.items():
            out[b] = {"block": b, **p}
        return out

    def _write(
        self,
        add: bool,
        values: Any,
        rows: Any,
        cols: Any,
        casting: str | None,
        on_nonfinite: str | None,
    ) -> concurrent.futures.Future[Any] | None:
        parts, cost = self._plan_update(values, rows, cols, casting, on_nonfinite, add)
        if not parts:
            return None
        b = self._binding
        extra = {"add": add, "tag": b.next_tag(), "clock": current_clock()}
        return b.submit(b.call_blocks, self.name, "update", parts, cost, extra)

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
        return _done_future() if fut is None else PSFuture(fut, lambda _: None)

    def increment(
        self,
        values: Any,
        rows: Any = None,
        cols: Any = None,
        *,
        casting: str | None = None,
        on_nonfinite: str | None = None,
    ) -> None:
        """Add ``values`` to the selected entries; duplicate indices are summed.

        ``values`` is a dense array shaped like the selection (or broadcastable to
        it), or a ``scipy.sparse`` matrix / ``sparse.COO`` of the array's full shape.
        ``casting`` (default ``daskangel.client.casting``, ``'safe'``) governs the
        cast to the array's dtype; ``on_nonfinite='skip'`` drops NaN/inf entries.
        """
        self.increment_async(
            values, rows, cols, casting=casting, on_nonfinite=on_nonfinite
        ).result()

    def set(
        self,
        values: Any,
        rows: Any = None,
        cols: Any = None,
        *,
        casting: str | None = None,
        on_nonfinite: str | None = None,
    ) -> None:
        """Overwrite the selected entries (the last of duplicate indices wins)."""
        fut = self._write(False, values, rows, cols, casting, on_nonfinite)
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
        extra = {"value": v.astype(m.dtype).item(), "clock": current_clock()}
        b.run(b.call_blocks, self.name, "fill", parts, {}, extra)

    # -- psf --------------------------------------------------------------------

    def psf_async(self, func: Any, *others: PSArray, atomic: bool = True) -> PSFuture:
        """Start :meth:`psf`; return a :class:`PSFuture` of its result."""
        from ._psf_client import run_psf

        names = [self.name] + [_name_of(o) for o in others]
        b = self._binding
        return PSFuture(b.submit(run_psf, b, func, names, atomic, current_clock()), lambda r: r)

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
        return b.run(run_psf, b, func, names, atomic, current_clock())

    # -- dask -------------------------------------------------------------------

    def version_token(self) -> str:
        """A token that changes whenever any block of the array is written."""
        m = self.meta
        parts = {blk: {"block": blk} for blk in range(m.layout.n_blocks)}
        b = self._binding
        versions = b.run(b.call_blocks, self.name, "versions", parts, {}, {})
        return tokenize(self.name, m.generation, sorted(versions.items()))

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


def _short(idx: np.ndarray | None) -> Any:
    """Short index arrays travel as plain lists inside the message (no extra frame)."""
    if idx is not None and idx.shape[0] <= 32:
        return idx.tolist()
    return idx


def _direct_targets(
    dtype: np.dtype,
    full: tuple[int, int],
    places: dict[int, tuple[Any, Any]],
    cost: dict[int, int],
) -> tuple[np.ndarray | None, dict[int, tuple[int, np.ndarray | None]] | None]:
    """The preallocated output of a large get and ``{block: (bytes, target)}``.

    A block's result can be read straight into the output when its place there is
    one contiguous run (whole rows of a row range, or a column range of one row)
    and it is at least ``daskangel.client.direct-read-bytes`` long.  Every part gets
    its byte count, so the frames of parts read as usual are told apart.
    """
    limit = config.get_bytes("daskangel.client.direct-read-bytes")
    n_cols = full[1]
    runs: dict[int, tuple[int, int]] = {}  # {block: (start, stop)} flat in the output
    for b, (rs, cs) in places.items():
        if cost[b] < limit or not (isinstance(rs, slice) and isinstance(cs, slice)):
            continue
        if rs.stop - rs.start == 1 or (cs.start == 0 and cs.stop == n_cols):
            runs[b] = (rs.start * n_cols + cs.start, (rs.stop - 1) * n_cols + cs.stop)
    if not runs:
        return None, None
    out = np.empty(full, dtype=dtype)
    flat = out.reshape(-1)
    into: dict[int, tuple[int, np.ndarray | None]] = {}
    for b, (rs, cs) in places.items():
        if b in runs:
            start, stop = runs[b]
            into[b] = (cost[b], flat[start:stop].reshape(rs.stop - rs.start, cs.stop - cs.start))
        else:
            into[b] = (cost[b] if cost[b] >= limit else 0, None)
    return out, into


def _expand(plan: AxisPlan) -> np.ndarray:
    """The global indices a plan covers, in request order."""
    out = np.empty(plan.size, np.int64)
    for loc, pos in zip(plan.local, plan.out, strict=True):
        if loc is None:
            assert isinstance(pos, slice)
            out[pos] = np.arange(pos.start, pos.stop)
        else:
            out[pos] = loc
    return out


def _is_sparse_input(values: Any) -> bool:
    mod = type(values).__module__
    return mod.startswith("scipy.sparse") or mod.startswith("sparse")


def _coo_parts(values: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple[int, ...]]:
    """``(rows, cols, data, shape)`` of a scipy.sparse or sparse.COO input."""
    if type(values).__module__.startswith("scipy.sparse"):
        coo = values.tocoo()
        return (
            coo.row.astype(np.int64),
            coo.col.astype(np.int64),
            np.asarray(coo.data),
            tuple(coo.shape),
        )
    coo = values.asformat("coo") if hasattr(values, "asformat") else values
    coords = np.asarray(coo.coords, dtype=np.int64)
    data = np.asarray(coo.data)
    if coords.shape[0] == 1:
        return np.zeros(coords.shape[1], np.int64), coords[0], data, tuple(coo.shape)
    if coords.shape[0] != 2:
        raise ShapeMismatchError(f"values: expected a 1-D or 2-D sparse array, got {coo.ndim}-D")
    return coords[0], coords[1], data, tuple(coo.shape)


def _done_future() -> PSFuture:
    f: concurrent.futures.Future[Any] = concurrent.futures.Future()
    f.set_result(None)
    return PSFuture(f, lambda _: None)
