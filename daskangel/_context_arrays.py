"""Creating arrays on a context's servers: the constructors of
:class:`~daskangel.PSContext` (:class:`ArrayCreationMixin`).

``zeros`` / ``full`` / ``random`` / ``zeros_like`` / ``full_like`` / ``from_array``
check the name, shape and dtype, choose the layout (a partitioner, a block shape,
the layout of the array to co-partition with, or the stored layout of a snapshot
being resumed), register the array with the scheduler plugin, which creates its
blocks on the servers, and give back a :class:`~daskangel.psarray.PSArray` handle.
``from_array`` then writes a numpy array in slabs of at most half the request
limit, or a dask array chunk by chunk from the workers holding the chunks.

Example
-------
::

    w = ps.zeros("w", shape=(1, 2**20), dtype="float32")
    g = ps.zeros_like(w)                    # same blocks on the same servers
    X = ps.from_array("X", np.eye(4))
"""

from __future__ import annotations

import re
import uuid
import weakref
from typing import TYPE_CHECKING, Any

import numpy as np
from distributed import Client

from . import config
from ._resuming import stored_layout
from .errors import InvalidArgumentError, InvalidTypeError, ShapeMismatchError
from .persist import StoredLayout
from .psarray import PSArray
from .psarray._binding import Binding
from .psarray._initspec import InitSpec
from .psarray._layout import AutoPartitioner, BlockPartitioner, Partitioner
from .psarray._meta import DTYPES, ArrayMeta, ServerId

__all__ = ["ArrayCreationMixin"]


def _shape(shape: Any) -> tuple[int, ...]:
    if isinstance(shape, (int, np.integer)):
        shape = (int(shape),)
    try:
        out = tuple(int(s) for s in shape)
    except (TypeError, ValueError):
        raise ShapeMismatchError(
            f"shape: expected an int or a tuple of 1-2 ints, got {shape!r}"
        ) from None
    if len(out) not in (1, 2) or any(s < 1 for s in out):
        raise ShapeMismatchError(f"shape: expected 1 or 2 positive extents, got {shape!r}")
    return out


def _dtype(dtype: Any) -> np.dtype:
    try:
        dt = np.dtype(dtype)
    except TypeError:
        dt = None
    if dt is None or dt.name not in DTYPES:
        raise InvalidTypeError(f"dtype: expected one of {DTYPES}, got {dtype!r}")
    return dt


class ArrayCreationMixin:
    """The array constructors of :class:`~daskangel.PSContext` (which provides the
    attributes below)."""

    client: Client
    id: str
    transport: str
    binding: Binding
    _scheduler: Any
    _handles: weakref.WeakSet[PSArray]

    if TYPE_CHECKING:  # provided by PSContext

        @property
        def servers(self) -> list[ServerId]: ...

        def _check_open(self) -> None: ...

        def drop(self, name: str) -> None: ...

    def _create(
        self,
        name: str,
        shape: Any,
        dtype: Any,
        init: InitSpec,
        sparse: bool,
        block_shape: Any = None,
        partitioner: Partitioner | None = None,
        like: str | None = None,
    ) -> PSArray:
        self._check_open()
        if not isinstance(name, str) or not _NAME.match(name):
            raise InvalidArgumentError(
                f"name: expected letters, digits, '_', '-' or '.' (not starting with '.'), "
                f"got {name!r}"
            )
        shp = _shape(shape)
        dt = _dtype(dtype)
        two_d = (1, shp[0]) if len(shp) == 1 else (shp[0], shp[1])
        if block_shape is not None and partitioner is not None:
            raise InvalidArgumentError("block_shape, partitioner: pass one or the other")
        if block_shape is not None:
            bs = _shape(block_shape)
            partitioner = BlockPartitioner((1, bs[0]) if len(bs) == 1 else (bs[0], bs[1]))
        part = partitioner or AutoPartitioner()
        # model.fit(..., resume=url): the layout of the snapshot array it will hold
        stored = stored_layout(self, name, (shp, dt.name, bool(sparse)))
        if stored is not None and like is None:
            part = StoredLayout(stored)
        layout = part.layout(two_d, dt.itemsize, len(self.servers), sparse)
        meta = ArrayMeta.new(name, shp, dt, sparse, layout, init, self.transport)
        full = self.client.sync(
            self._scheduler.daskangel_create,
            ctx=self.id,
            meta=meta.to_dict(),
            blocks=meta.block_specs(),
            like=like,
        )
        m = self.binding.metas[name] = ArrayMeta.from_dict(full)
        arr = PSArray(name, context=self, binding=self.binding)
        arr._uid = m.uid  # this creation, whatever later happens to the name
        self._handles.add(arr)
        return arr

    def zeros(
        self,
        name: str,
        shape: Any,
        dtype: Any = "float32",
        *,
        block_shape: Any = None,
        partitioner: Partitioner | None = None,
        sparse: bool = False,
    ) -> PSArray:
        """A new array of zeros.  ``sparse=True`` stores only touched keys."""
        return self._create(
            name, shape, dtype, InitSpec("const", 0.0), sparse, block_shape, partitioner
        )

    def full(
        self,
        name: str,
        shape: Any,
        fill_value: float,
        dtype: Any = "float32",
        *,
        block_shape: Any = None,
        partitioner: Partitioner | None = None,
        sparse: bool = False,
    ) -> PSArray:
        """A new array with every entry ``fill_value`` (missing sparse keys read it too)."""
        dt = _dtype(dtype)
        if dt.kind in "iu" and float(fill_value) != int(fill_value):
            raise InvalidTypeError(
                f"fill_value: {fill_value!r} is not an integer, the array is {dt}"
            )
        return self._create(
            name, shape, dt, InitSpec("const", float(fill_value)), sparse, block_shape, partitioner
        )

    def random(
        self,
        name: str,
        shape: Any,
        *,
        seed: int = 0,
        dist: str = "uniform",
        low: float = 0.0,
        high: float = 1.0,
        loc: float = 0.0,
        scale: float = 1.0,
        dtype: Any = "float32",
        block_shape: Any = None,
        partitioner: Partitioner | None = None,
        sparse: bool = False,
    ) -> PSArray:
        """A new array of counter-based random numbers.

        Entry ``(r, c)`` depends only on ``seed`` and ``r * n_cols + c``, so the
        values do not depend on the partitioning.  For ``sparse=True`` a key is
        drawn when first read or written (Angel's initAndGet).
        """
        if dist == "uniform":
            init = InitSpec("uniform", float(low), float(high), int(seed), lazy=sparse)
        elif dist == "normal":
            init = InitSpec("normal", float(loc), float(scale), int(seed), lazy=sparse)
        else:
            raise InvalidArgumentError(f"dist: expected 'uniform' or 'normal', got {dist!r}")
        return self._create(name, shape, dtype, init, sparse, block_shape, partitioner)

    def zeros_like(self, arr: PSArray, name: str | None = None, dtype: Any = None) -> PSArray:
        """A zero array co-partitioned with ``arr``: same shape, blocks and servers.

        Binary psfs (``ops.Axpy``, ``ops.Dot``, optimisers ...) need co-partitioned
        arrays.  ``name`` defaults to a fresh one derived from ``arr.name``.
        """
        return self.full_like(arr, 0.0, name, dtype)

    def full_like(
        self, arr: PSArray, fill_value: float, name: str | None = None, dtype: Any = None
    ) -> PSArray:
        """An array co-partitioned with ``arr`` with every entry ``fill_value``."""
        m = arr.meta
        shape = (m.shape[1],) if m.ndim == 1 else m.shape
        dt = _dtype(dtype or m.dtype)
        if dt.kind in "iu" and float(fill_value) != int(fill_value):
            raise InvalidTypeError(
                f"fill_value: {fill_value!r} is not an integer, the array is {dt}"
            )
        name = name or f"{m.name}-like-{uuid.uuid4().hex[:8]}"
        part = _SameLayout(m)
        init = InitSpec("const", float(fill_value))
        return self._create(name, shape, dt, init, m.sparse, None, part, like=m.name)

    def from_array(
        self,
        name: str,
        array: Any,
        *,
        block_shape: Any = None,
        partitioner: Partitioner | None = None,
        dtype: Any = None,
    ) -> PSArray:
        """A new array holding a numpy or dask array's values."""
        is_dask = hasattr(array, "dask") and hasattr(array, "chunks")
        src = array if is_dask else np.asarray(array)
        if src.ndim not in (1, 2):
            raise ShapeMismatchError(f"array: expected 1-D or 2-D, got {src.ndim}-D")
        dt = _dtype(dtype or src.dtype)
        arr = self.zeros(name, src.shape, dt, block_shape=block_shape, partitioner=partitioner)
        try:
            if is_dask:
                _set_from_dask(arr, src)
            else:
                _set_in_slabs(arr, src)
        except BaseException:
            self.drop(name)
            raise
        return arr


_NAME = re.compile(r"^[A-Za-z0-9_\-][A-Za-z0-9_.\-]*$")


class _SameLayout:
    """A partitioner that repeats an existing array's layout (co-partitioning)."""

    def __init__(self, meta: ArrayMeta) -> None:
        self.meta = meta

    def layout(self, shape: tuple[int, int], itemsize: int, n_servers: int, sparse: bool) -> Any:
        return self.meta.layout


def _set_in_slabs(arr: PSArray, src: np.ndarray) -> None:
    limit = max(1, config.get_bytes("daskangel.client.max-request-bytes") // 2)
    if src.ndim == 1:
        arr.set(src, casting="same_kind")
        return
    rows = max(1, limit // max(1, src.shape[1] * src.itemsize))
    for r in range(0, src.shape[0], rows):
        arr.set(src[r : r + rows], rows=slice(r, r + rows), casting="same_kind")


def _set_chunk(chunk: np.ndarray, name: str, r0: int, c0: int, ndim: int) -> int:
    a = PSArray(name)
    if ndim == 1:
        a.set(chunk, cols=slice(c0, c0 + chunk.shape[0]), casting="same_kind")
    else:
        a.set(
            chunk,
            rows=slice(r0, r0 + chunk.shape[0]),
            cols=slice(c0, c0 + chunk.shape[1]),
            casting="same_kind",
        )
    return int(chunk.size)


def _set_from_dask(arr: PSArray, src: Any) -> None:
    import dask

    offsets = [np.concatenate([[0], np.cumsum(c)[:-1]]).astype(int) for c in src.chunks]
    tasks = []
    for idx, block in np.ndenumerate(np.asarray(src.to_delayed(), dtype=object)):
        r0 = int(offsets[0][idx[0]]) if src.ndim == 2 else 0
        c0 = int(offsets[-1][idx[-1]])
        tasks.append(dask.delayed(_set_chunk)(block, arr.name, r0, c0, src.ndim))
    dask.compute(*tasks)
