"""Saving, loading and reading snapshots and models.

``ps.save(url)`` / ``ps.load(url)`` / ``ps.snapshot()`` live on
:class:`~daskangel.PSContext` and call into here; :func:`load_arrays` reads a saved
model or the newest snapshot of a snapshot directory into local numpy arrays (or
``sparse.COO`` for sparse arrays) with zarr alone, no cluster needed.

Example
-------
>>> import daskangel as angel
>>> arrays = angel.load_arrays("/tmp/model")        # doctest: +SKIP
>>> arrays["w"].shape                               # doctest: +SKIP
(123,)
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from . import _snapshot_format as fmt
from .errors import InvalidArgumentError, SnapshotError
from .psarray._initspec import InitSpec
from .psarray._layout import Layout

if TYPE_CHECKING:
    from .psarray import PSArray


class _Context(Protocol):
    """What loading needs of a :class:`~daskangel.PSContext` (which calls it: it
    is typed here, not imported, so ``context`` and ``persist`` import one way)."""

    id: str
    client: Any
    binding: Any
    _scheduler: Any

    def arrays(self) -> list[str]: ...

    def drop(self, name: str) -> None: ...

    def get_array(self, name: str) -> PSArray: ...

    def _create(
        self,
        name: str,
        shape: Any,
        dtype: Any,
        init: InitSpec,
        sparse: bool,
        block_shape: Any = None,
        partitioner: Any = None,
        like: str | None = None,
    ) -> PSArray: ...


__all__ = ["StoredLayout", "load_arrays", "load_into"]


class StoredLayout:
    """A partitioner that reproduces the layout recorded in a manifest."""

    def __init__(self, layout: dict[str, Any]) -> None:
        self._layout = Layout.from_dict(layout)

    def layout(self, shape: tuple[int, int], itemsize: int, n_servers: int, sparse: bool) -> Layout:
        return self._layout


def load_into(
    ps: _Context,
    url: str,
    arrays: list[str] | None = None,
    rename: dict[str, str] | None = None,
) -> dict[str, PSArray]:
    """Load arrays from a snapshot directory or saved model into a context.

    Arrays that exist in the context are overwritten (their shape, dtype,
    storage and partitioning must match the stored ones); missing ones are
    created with the stored layout.  Every block is read and checked before any
    is installed, so a damaged or mismatching store changes nothing.
    ``rename`` (``{stored name: name here}``) loads stored arrays under other
    names (a second copy of a saved model beside the first); the result is keyed
    by the names here.
    """
    version_url, manifest = fmt.resolve(url)
    stored = manifest["arrays"]
    names = list(stored) if arrays is None else list(arrays)
    missing = sorted(set(names) - set(stored))
    if missing:
        raise SnapshotError(f"arrays: {url!r} has no arrays {missing} (it has {sorted(stored)})")
    rename = dict(rename or {})
    unknown = sorted(set(rename) - set(names))
    if unknown:
        raise InvalidArgumentError(f"rename: {unknown} are not among the arrays loaded ({names})")
    live = [rename.get(n, n) for n in names]
    if len(set(live)) != len(live):
        raise InvalidArgumentError(f"rename: two arrays would be loaded as one name ({live})")
    existing = set(ps.arrays())
    created = []
    # {(layout json, sparse): first array created with it}: arrays saved with one
    # layout are created co-placed (block i on one server), as zeros_like made them,
    # so psfs over them (optimiser steps, Axpy ...) still work after loading
    placed: dict[tuple[str, bool], str] = {}
    try:
        for src, n in zip(names, live, strict=True):
            if n in existing:
                continue
            info = stored[src]
            shape = (info["shape"][1],) if info["ndim"] == 1 else tuple(info["shape"])
            key = (json.dumps(info["layout"], sort_keys=True), bool(info["sparse"]))
            ps._create(
                n,
                shape,
                info["dtype"],
                InitSpec.from_dict(info["init"]),
                bool(info["sparse"]),
                partitioner=StoredLayout(info["layout"]),
                like=placed.get(key),
            )
            placed.setdefault(key, n)
            created.append(n)
        ps.client.sync(
            ps._scheduler.daskangel_restore,
            ctx=ps.id,
            url=version_url,
            arrays=live,
            rename={n: src for src, n in zip(names, live, strict=True) if n != src} or None,
        )
    except BaseException:
        for n in created:
            ps.drop(n)
        raise
    for n in live:
        ps.binding.forget(n)
    return {n: ps.get_array(n) for n in live}


def load_arrays(url: str, arrays: list[str] | None = None) -> dict[str, Any]:
    """Read arrays of a saved model / newest snapshot into this process.

    Dense arrays come back as numpy arrays, sparse ones as ``sparse.COO`` (their
    fill value is the array's default).  Every block is checked against the
    manifest's crc32.  Only zarr and fsspec are used.
    """
    version_url, manifest = fmt.resolve(url)
    stored = manifest["arrays"]
    names = list(stored) if arrays is None else list(arrays)
    out: dict[str, Any] = {}
    for n in names:
        if n not in stored:
            raise SnapshotError(f"arrays: {url!r} has no array {n!r} (it has {sorted(stored)})")
        info = stored[n]
        shape = tuple(info["shape"])
        if not info["sparse"]:
            full = np.empty(shape, dtype=info["dtype"])
            for spec in info["blocks"]:
                r0, c0 = spec["row0"], spec["col0"]
                rows, cols = spec["shape"]
                block = fmt.read_dense_block(version_url, n, info["storage"], info["ndim"], spec)
                _verify(info, n, spec, version_url, block)
                full[r0 : r0 + rows, c0 : c0 + cols] = block
            out[n] = full[0] if info["ndim"] == 1 else full
            continue
        import sparse

        coords, values, default = [], [], 0.0
        for spec in info["blocks"]:
            keys, vals, attrs = fmt.read_sparse_block(version_url, n, spec)
            _verify(info, n, spec, version_url, keys, vals)
            width = spec["shape"][1]
            r, c = np.divmod(keys, width)
            coords.append(np.stack([r + spec["row0"], c + spec["col0"]]))
            values.append(vals)
            default = attrs.get("default", 0.0)
        coo = sparse.COO(
            np.concatenate(coords, axis=1) if coords else np.zeros((2, 0), np.int64),
            np.concatenate(values) if values else np.zeros(0, info["dtype"]),
            shape=shape,
            fill_value=np.dtype(info["dtype"]).type(default),
        )
        out[n] = coo[0] if info["ndim"] == 1 else coo
    return out


def _verify(
    info: dict[str, Any], name: str, spec: dict[str, Any], url: str, *arrays: np.ndarray
) -> None:
    want = info.get("checksums", {}).get(str(spec["block"]))
    got = fmt.block_checksum(*arrays)
    if want is not None and int(want) != got:
        where = fmt.block_files(url, name, info["storage"], info["ndim"], spec)
        raise SnapshotError(
            f"snapshot {url}: block {spec['block']} of array {name!r} ({where}) has crc32 "
            f"{got}, the manifest says {want}; the snapshot is damaged: load an older "
            "snapshot version, or save the model again"
        )
