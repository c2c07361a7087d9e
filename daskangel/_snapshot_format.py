"""The on-disk snapshot format: zarr v3 at any fsspec URL, readable without daskangel.

A *snapshot directory* holds versions and a pointer::

    <root>/LATEST                 text: the name of the newest complete version
    <root>/v000007-1a2b3c/        one zarr v3 group per version (see below)

A *version group* (also what ``ps.save(url)`` writes at ``url`` itself) holds::

    zarr.json                     group metadata; attributes["daskangel"] is the
                                  manifest: format, clock, arrays (shape, dtype,
                                  layout, init, storage, per-block crc32)
    <name>/                       "grid" storage: one zarr array with the array's
                                  own shape (1-D for vectors) and one chunk per block
    <name>/b<id>/keys, values     "blocks" storage (sparse arrays, or dense arrays
                                  whose blocks are not a regular grid): one group
                                  per block; ``keys`` are ``local_row * width +
                                  local_col``, attributes give the block's place

Writing order makes a crash harmless: block chunks (each by the one server that
owns the block), then the manifest and consolidated metadata, then ``LATEST``
(temp file + rename on local disks, one PUT on object stores).  A version that
``LATEST`` does not name is ignored and later removed.

Both planes use this module; it imports neither.

Example
-------
>>> import numpy as np, zarr
>>> x = zarr.open_array("/tmp/ckpt/v000001-ab/w", mode="r")   # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import json
import re
import uuid
import zlib
from typing import Any

import numpy as np

from .errors import SnapshotError

__all__ = [
    "FORMAT",
    "block_checksum",
    "block_files",
    "create_arrays",
    "fs_and_path",
    "grid_chunks",
    "list_versions",
    "new_version_name",
    "open_store",
    "prune_versions",
    "read_dense_block",
    "read_latest",
    "read_manifest",
    "read_sparse_block",
    "remove_version",
    "resolve",
    "write_dense_block",
    "write_latest",
    "write_manifest",
    "write_sparse_block",
]

FORMAT = 1
_VERSION_RE = re.compile(r"^v(\d{6,})-[0-9a-f]+$")


def fs_and_path(url: str) -> tuple[Any, str]:
    """The fsspec file system and path of ``url`` (local dirs are created on write)."""
    import fsspec

    local = "://" not in url or url.startswith("file://")
    fs, path = fsspec.core.url_to_fs(url, auto_mkdir=True) if local else fsspec.core.url_to_fs(url)
    return fs, path.rstrip("/")


def open_store(url: str, read_only: bool = False) -> Any:
    """A zarr store for ``url``: a LocalStore for local paths, else an FsspecStore."""
    from zarr.storage import FsspecStore, LocalStore

    if "://" not in url or url.startswith("file://"):
        return LocalStore(url.removeprefix("file://"), read_only=read_only)
    return FsspecStore.from_url(url, read_only=read_only)


def join(url: str, *parts: str) -> str:
    return "/".join([url.rstrip("/"), *parts])


def new_version_name(number: int) -> str:
    return f"v{number:06d}-{uuid.uuid4().hex[:8]}"


def grid_chunks(layout: dict[str, Any]) -> tuple[int, int] | None:
    """The chunk shape when blocks form a regular grid starting at 0, else None."""
    if layout["col_mode"] != "range":
        return None
    chunks = []
    for bounds in (layout["row_bounds"], layout["col_bounds"]):
        step = bounds[1] - bounds[0]
        if any(bounds[i] != i * step for i in range(len(bounds) - 1)):
            return None
        chunks.append(step)
    return chunks[0], chunks[1]


def create_arrays(url: str, arrays: dict[str, dict[str, Any]]) -> dict[str, str]:
    """Create a version group and the zarr metadata of every array; no chunks.

    Returns ``{array_name: storage}`` with storage ``"grid"`` or ``"blocks"``.
    """
    import zarr

    store = open_store(url)
    root = zarr.open_group(store=store, mode="w")
    storage = {}
    for name, meta in arrays.items():
        chunks = None if meta["sparse"] else grid_chunks(meta["layout"])
        if chunks is None:
            root.create_group(name)
            storage[name] = "blocks"
            continue
        shape = tuple(meta["shape"])
        if meta["ndim"] == 1:
            shape, chunks = (shape[1],), (chunks[1],)  # type: ignore[assignment]
        root.create_array(
            name, shape=shape, chunks=chunks, dtype=meta["dtype"], fill_value=0, overwrite=True
        )
        storage[name] = "grid"
    return storage


def block_checksum(*arrays: np.ndarray) -> int:
    """crc32 over the bytes of the arrays (C order)."""
    crc = 0
    for a in arrays:
        crc = zlib.crc32(np.ascontiguousarray(a).view(np.uint8), crc)  # type: ignore[arg-type]
    return crc


def _region(spec: dict[str, Any], ndim: int) -> tuple[slice, ...]:
    r0, c0 = spec["row0"], spec["col0"]
    rows, cols = spec["shape"]
    if ndim == 1:
        return (slice(c0, c0 + cols),)
    return (slice(r0, r0 + rows), slice(c0, c0 + cols))


def write_dense_block(
    url: str, name: str, storage: str, ndim: int, spec: dict[str, Any], data: np.ndarray
) -> int:
    """Write one dense block (its own chunk, or its own group); return its crc32."""
    import zarr

    store = open_store(url)
    if storage == "grid":
        arr = zarr.open_array(store=store, path=name, mode="r+")
        arr[_region(spec, ndim)] = data.reshape(-1) if ndim == 1 else data
    else:
        g = zarr.open_group(store=store, path=f"{name}/b{spec['block']}", mode="w")
        g.create_array("values", data=data)
        g.attrs.update({"row0": spec["row0"], "col0": spec["col0"], "shape": list(data.shape)})
    return block_checksum(data)


def _all_chunks(arr: Any) -> list[tuple[int, ...]]:
    return [tuple(c) for c in np.ndindex(*arr.cdata_shape)]


def _damaged(
    url: str,
    name: str,
    spec: dict[str, Any],
    node: str,
    parts: list[tuple[Any, list[tuple[int, ...]]]],
    err: BaseException,
) -> SnapshotError:
    """A SnapshotError naming the array, the block and the file that does not decode.

    ``parts`` are the opened zarr arrays of the block with the chunks it covers; the
    first chunk that fails on its own is named, else the zarr node ``node``.
    """
    file, cause = join(url, node), err
    for arr, chunks in parts:
        for coords in chunks:
            try:
                arr.blocks[coords]
            except Exception as e:  # noqa: BLE001 - any codec or store error names the file
                file, cause = join(url, arr.path, arr.metadata.encode_chunk_key(coords)), e
                break
        else:
            continue
        break
    return SnapshotError(
        f"snapshot {url}: block {spec['block']} of array {name!r} cannot be read: "
        f"file {file} is damaged ({type(cause).__name__}: {cause or 'no message'}); "
        "load an older snapshot version, or save the model again"
    )


def block_files(url: str, name: str, storage: str, ndim: int, spec: dict[str, Any]) -> str:
    """Where a block's data lives: its chunk file (grid storage) or its zarr group."""
    if storage != "grid":
        return join(url, name, f"b{spec['block']}")
    import zarr

    try:
        arr = zarr.open_array(store=open_store(url, read_only=True), path=name, mode="r")
        region = _region(spec, ndim)
        coords = tuple(r.start // c for r, c in zip(region, arr.chunks, strict=True))
        return join(url, name, arr.metadata.encode_chunk_key(coords))
    except Exception:  # noqa: BLE001 - only names the file of an error being raised
        return join(url, name)


def read_dense_block(
    url: str, name: str, storage: str, ndim: int, spec: dict[str, Any]
) -> np.ndarray:
    """Read one dense block; a file that does not decode raises :class:`SnapshotError`."""
    import zarr

    store = open_store(url, read_only=True)
    node = name if storage == "grid" else f"{name}/b{spec['block']}/values"
    parts: list[tuple[Any, list[tuple[int, ...]]]] = []
    try:
        arr = zarr.open_array(store=store, path=node, mode="r")
        if storage == "grid":
            region = _region(spec, ndim)
            coords = tuple(r.start // c for r, c in zip(region, arr.chunks, strict=True))
            parts.append((arr, [coords]))
            return np.asarray(arr[region]).reshape(tuple(spec["shape"]))
        parts.append((arr, _all_chunks(arr)))
        return np.asarray(arr[...])
    except Exception as e:
        raise _damaged(url, name, spec, node, parts, e) from e


def write_sparse_block(
    url: str,
    name: str,
    spec: dict[str, Any],
    keys: np.ndarray,
    values: np.ndarray,
    attrs: dict[str, Any],
) -> int:
    import zarr

    g = zarr.open_group(store=open_store(url), path=f"{name}/b{spec['block']}", mode="w")
    g.create_array("keys", data=keys)
    g.create_array("values", data=values)
    g.attrs.update(
        {**attrs, "row0": spec["row0"], "col0": spec["col0"], "shape": list(spec["shape"])}
    )
    return block_checksum(keys, values)


def read_sparse_block(
    url: str, name: str, spec: dict[str, Any]
) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """Read one sparse block; a file that does not decode raises :class:`SnapshotError`."""
    import zarr

    node = f"{name}/b{spec['block']}"
    parts: list[tuple[Any, list[tuple[int, ...]]]] = []
    try:
        g = zarr.open_group(store=open_store(url, read_only=True), path=node, mode="r")
        keys, values = g["keys"], g["values"]
        parts = [(keys, _all_chunks(keys)), (values, _all_chunks(values))]
        return np.asarray(keys[...]), np.asarray(values[...]), dict(g.attrs)  # type: ignore[index]
    except Exception as e:
        raise _damaged(url, name, spec, node, parts, e) from e


def write_manifest(url: str, manifest: dict[str, Any]) -> None:
    """Store the manifest in the group's attributes and consolidate metadata."""
    import warnings

    import zarr

    store = open_store(url)
    g = zarr.open_group(store=store, mode="r+")
    g.attrs["daskangel"] = manifest
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "consolidated metadata is not in the v3 spec"
        zarr.consolidate_metadata(store)


def read_manifest(url: str) -> dict[str, Any]:
    """The manifest of a version group (or of a saved model)."""
    fs, path = fs_and_path(url)
    try:
        with fs.open(f"{path}/zarr.json", "rb") as f:
            meta = json.load(f)
    except FileNotFoundError:
        raise FileNotFoundError(f"url: no daskangel snapshot or model at {url!r}") from None
    manifest = meta.get("attributes", {}).get("daskangel")
    if manifest is None:
        raise FileNotFoundError(
            f"url: {url!r} is a zarr group without a daskangel manifest (unfinished?)"
        )
    return manifest  # type: ignore[no-any-return]


def write_latest(root: str, version: str) -> None:
    """Point ``LATEST`` at ``version`` atomically."""
    fs, path = fs_and_path(root)
    target = f"{path}/LATEST"
    protocols = fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)
    if "file" in protocols or "local" in protocols:
        tmp = f"{path}/.LATEST-{uuid.uuid4().hex[:8]}"
        with fs.open(tmp, "w") as f:
            f.write(version)
        fs.mv(tmp, target)  # os.rename: atomic on POSIX
    else:
        fs.pipe_file(target, version.encode())  # one PUT


def read_latest(root: str) -> str | None:
    fs, path = fs_and_path(root)
    try:
        return str(fs.cat_file(f"{path}/LATEST").decode().strip()) or None
    except FileNotFoundError:
        return None


def list_versions(root: str) -> list[str]:
    """Version directories under ``root``, oldest first."""
    fs, path = fs_and_path(root)
    try:
        names = [p.rstrip("/").rsplit("/", 1)[-1] for p in fs.ls(path, detail=False)]
    except FileNotFoundError:
        return []
    found = [(int(m.group(1)), n) for n in names if (m := _VERSION_RE.match(n))]
    return [n for _, n in sorted(found)]


def remove_version(root: str, version: str) -> None:
    fs, path = fs_and_path(root)
    with contextlib.suppress(FileNotFoundError):
        fs.rm(f"{path}/{version}", recursive=True)


def prune_versions(root: str, current: str, keep: int) -> None:
    """Keep the newest ``keep`` versions up to ``current`` (unfinished ones
    included) but for rollback points: those older than ``current`` are
    superseded by it and removed; ``current`` itself, when it is one, is kept
    beside the ``keep`` others."""
    versions = list_versions(root)
    if current not in versions:
        return
    counted = []
    for v in versions[: versions.index(current) + 1]:
        if not _rollback_point(root, v):
            counted.append(v)
        elif v != current:
            remove_version(root, v)
    for v in counted[:-keep]:
        remove_version(root, v)


def _rollback_point(root: str, version: str) -> bool:
    """Whether ``version`` is a job's starting snapshot (False when unfinished)."""
    try:
        return bool(read_manifest(join(root, version)).get("rollback_point"))
    except FileNotFoundError:
        return False


def resolve(url: str) -> tuple[str, dict[str, Any]]:
    """``(version_url, manifest)`` of a snapshot directory (its LATEST) or a saved model."""
    latest = read_latest(url)
    target = join(url, latest) if latest else url
    return target, read_manifest(target)
