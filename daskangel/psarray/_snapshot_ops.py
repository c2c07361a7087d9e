"""Server side of snapshots: consistent cuts, block writes and restores.

A snapshot of clock ``t`` is taken in three steps the scheduler plugin drives:

1. ``cut_begin(t)`` on every server: from now on writes tagged with a clock
   after ``t`` copy a block before changing it (see ``PSServer.write_block``);
2. ``snapshot_write`` per array: under the server lock each block is *copied*
   (the saved cut copy if one was made, else the live block), which is the only
   time training waits; the copy is then written to zarr by the server's I/O
   thread, and its crc32 returned;
3. ``cut_end`` on every server drops the copies.

``restore`` reads blocks (checking their crc32 against the manifest) in the I/O
thread and then installs them under the lock, creating blocks that do not exist
on this server (recovery onto a new server) or replacing those that do.

A rollback first ``fence`` s the job on every server: from then on writes of the
runs it abandons (their ``[job, epoch]`` older than the fence) are refused, so a
push still in flight (or being resent) never lands on the restored state.

Example
-------
The scheduler plugin calls, for one server::

    await call(server, "cut_begin", clock=7)
    crcs = await call(server, "snapshot_write", url=u, array="w", ...)
    await call(server, "cut_end")
"""

from __future__ import annotations

import asyncio
import itertools
import os
from typing import Any

import dask.config
import numpy as np

from .. import _snapshot_format as fmt
from ..errors import SnapshotError
from ._blocks import DenseBlock, SparseBlock, make_block
from ._initspec import InitSpec
from ._server import Block, PSServer, server_async_op, server_op

__all__: list[str] = []


@server_op("cut_begin")
def _cut_begin(server: PSServer, clock: int | None = None, cut: str | None = None) -> None:
    server.cut_active = True
    server.cut_clock = None if clock is None else int(clock)
    server.cut_id = cut
    server.shadows.clear()


@server_op("cut_end")
def _cut_end(server: PSServer, cut: str | None = None) -> None:
    """End the cut ``cut`` (a late end of an older snapshot leaves a newer cut alone)."""
    if cut is not None and cut != server.cut_id:
        return
    server.cut_active = False
    server.cut_clock = None
    server.cut_id = None
    server.shadows.clear()


@server_op("cut_take")
def _cut_take(server: PSServer, array: str, parts: list[dict[str, Any]]) -> list[Block]:
    """Copies of the blocks as of the pending cut (or as of now, without a cut)."""
    out = []
    for p in parts:
        key = (array, int(p["block"]))
        shadow = server.shadows.pop(key, None)
        out.append(shadow if shadow is not None else server.block(*key).copy())
    return out


_written = itertools.count(1)  # blocks this process has written (for crash injection)


def _write(
    url: str, array: str, storage: str, ndim: int, parts: list[dict[str, Any]], blocks: list[Block]
) -> list[int]:
    crash_after = dask.config.get("daskangel.snapshot.crash-after-blocks", None)
    crcs = []
    for spec, b in zip(parts, blocks, strict=True):
        if isinstance(b, DenseBlock):
            crcs.append(fmt.write_dense_block(url, array, storage, ndim, spec, b.data))
        else:
            attrs = {"default": b.default.item(), "lazy": b.init is not None}
            crcs.append(
                fmt.write_sparse_block(url, array, spec, b.keys[: b.n], b.vals[: b.n], attrs)
            )
        if crash_after is not None and next(_written) >= int(crash_after):
            os._exit(1)  # fault injection for tests: a real crash mid-snapshot
    return crcs


@server_async_op("snapshot_write")
async def _snapshot_write(
    server: PSServer, url: str, array: str, storage: str, ndim: int, parts: list[dict[str, Any]]
) -> list[int]:
    """Copy this server's blocks of ``array`` under the lock, write them outside it."""
    hold = dask.config.get("daskangel.snapshot.hold-dir", None)
    if hold:
        await _hold(str(hold))
    blocks = await server.run("cut_take", array=array, parts=parts)
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(
        server.io_executor, _write, url, array, storage, ndim, parts, blocks
    )


async def _hold(where: str) -> None:
    """Test hook ``daskangel.snapshot.hold-dir``: say "held", wait for "release"."""
    open(os.path.join(where, "held"), "w").close()
    while not os.path.exists(os.path.join(where, "release")):
        await asyncio.sleep(0.01)


def _read(
    url: str,
    array: str,
    storage: str,
    ndim: int,
    parts: list[dict[str, Any]],
    checksums: dict[str, int],
) -> list[Block]:
    out: list[Block] = []
    for spec in parts:
        init = InitSpec.from_dict(spec["init"])
        shape = (int(spec["shape"][0]), int(spec["shape"][1]))
        args = (int(spec["row0"]), int(spec["col0"]), int(spec["n_cols"]))
        if spec["kind"] == "dense":
            data = fmt.read_dense_block(url, array, storage, ndim, spec)
            crc = fmt.block_checksum(data)
            block: Block = DenseBlock(data.astype(spec["dtype"], copy=False), *args)
        else:
            keys, vals, attrs = fmt.read_sparse_block(url, array, spec)
            crc = fmt.block_checksum(keys, vals)
            sb = make_block("sparse", shape, np.dtype(spec["dtype"]), init, *args)
            assert isinstance(sb, SparseBlock)
            sb.default = sb.dtype.type(attrs.get("default", 0))
            if not attrs.get("lazy", False):
                sb.init = None
            sb.load(keys, vals)
            block = sb
        want = checksums.get(str(spec["block"]))
        if want is not None and int(want) != crc:
            where = fmt.block_files(url, array, storage, ndim, spec)
            raise SnapshotError(
                f"snapshot {url}: block {spec['block']} of array {array!r} ({where}) has "
                f"crc32 {crc}, the manifest says {want}; the snapshot is damaged: load an "
                "older snapshot version, or save the model again"
            )
        out.append(block)
    return out


@server_async_op("restore_stage")
async def _restore_stage(
    server: PSServer,
    url: str,
    array: str,
    storage: str,
    ndim: int,
    parts: list[dict[str, Any]],
    checksums: dict[str, int],
    token: str,
    stored: str | None = None,
) -> int:
    """Read and verify blocks in the I/O thread; keep them until commit or abort.

    ``stored`` is the array's name in the store when it is loaded under another
    name (``array``).
    """
    loop = asyncio.get_running_loop()
    blocks = await loop.run_in_executor(
        server.io_executor, _read, url, stored or array, storage, ndim, parts, checksums
    )
    staged = server.staged.setdefault(token, [])
    staged.extend(((array, int(p["block"])), b) for p, b in zip(parts, blocks, strict=True))
    return len(blocks)


@server_op("restore_commit")
def _restore_commit(server: PSServer, token: str) -> int:
    """Install staged blocks (creating or replacing them) in one step.

    A prepared two-phase transaction holding a replaced block is aborted: what it
    staged was computed on the old block (its commit would be refused), and its
    hold would keep writes to the restored block waiting until it expires.
    """
    staged = server.staged.pop(token, [])
    server.release_blocks({key for key, _ in staged})
    for key, b in staged:
        server.blocks[key] = b
        server.moving.pop(key, None)
        server.shadows.pop(key, None)  # a cut copy of the replaced block is void
    return len(staged)


@server_op("restore_abort")
def _restore_abort(server: PSServer, token: str) -> None:
    server.staged.pop(token, None)


@server_op("fence")
def _fence(server: PSServer, job: str, epoch: int) -> None:
    """Refuse from now on every write of ``job`` from a run older than ``epoch``
    (``PSServer.check_fence``); a fence only ever moves forward.  The prepared
    two-phase transactions of those runs are aborted (holds and staged changes
    dropped): their commit must not come, and nobody of the new run waits for it."""
    server.fences[str(job)] = max(int(epoch), server.fences.get(str(job), int(epoch)))
    server.release_runs_before(str(job), server.fences[str(job)])
