"""The PS server's built-in operations on blocks, registered with :func:`server_op`.

``create`` / ``drop`` / ``get`` / ``get_rows`` / ``update`` / ``fill`` / ``versions`` /
``read_block`` / ``stats`` and the ``ping`` of the heartbeat, with the write-tag
bookkeeping that applies a retried write once (:func:`unapplied`,
:func:`record_tag`).  Other modules add their own operations the same way (psf
execution, snapshots, key lists).  Importing :mod:`._server` registers these.

Example
-------
>>> from daskangel.psarray._server import SERVER_OPS
>>> {"create", "get", "update"} <= set(SERVER_OPS)
True
"""

from __future__ import annotations

from collections import OrderedDict, defaultdict
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import config
from ..errors import InvalidArgumentError, PSIndexError
from ._behind import Deferred
from ._blocks import DenseBlock, make_block
from ._changed import note_write
from ._initspec import InitSpec
from ._packed import PACK_SHIFT
from ._packkernels import min_max
from ._recvpool import pooled
from ._rowkernels import take_rows

if TYPE_CHECKING:
    pass

from ._server import Block, PSServer, server_async_op, server_op

__all__ = ["as_index", "record_tag", "seen_tag", "unapplied"]


# -- built-in operations -------------------------------------------------------


@server_async_op("ping")
async def _ping(server: PSServer, payload: Any = None) -> Any:
    """Answered by the worker's event loop without the server lock: a server busy
    with long operations is alive (the heartbeat must not restart it), a hung
    process is not."""
    return payload


@server_op("create")
def _create(server: PSServer, array: str, blocks: list[dict[str, Any]]) -> None:
    made = {}
    for spec in blocks:
        key = (array, int(spec["block"]))
        made[key] = make_block(
            spec["kind"],
            tuple(spec["shape"]),  # type: ignore[arg-type]
            np.dtype(spec["dtype"]),
            InitSpec.from_dict(spec["init"]),
            int(spec["row0"]),
            int(spec["col0"]),
            int(spec["n_cols"]),
        )
        if spec.get("uid"):
            server.uids[array] = str(spec["uid"])
    server.blocks.update(made)
    for key in made:
        server.moving.pop(key, None)


@server_op("drop", writes=True)
def _drop(server: PSServer, array: str) -> int:
    keys = [k for k in server.blocks if k[0] == array]
    for k in keys:
        del server.blocks[k]
    for k in [k for k in server.moving if k[0] == array]:
        del server.moving[k]
    server.uids.pop(array, None)
    refresh = getattr(server, "refresh", None)  # eager refresh's subscriptions of it
    if refresh is not None:
        refresh.forget(array)
    return len(keys)


def as_index(x: Any) -> np.ndarray | None:
    """A part's local index: callers send short ones as plain lists (no frame)."""
    if x is None or isinstance(x, np.ndarray):
        return x
    return np.asarray(x, dtype=np.int64)


def _plain_indices(parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for p in parts:
        for k in ("rows", "cols"):
            if k in p and not isinstance(p[k], np.ndarray):
                p[k] = as_index(p[k])
    return parts


@server_op("get")
def _get(
    server: PSServer, array: str, parts: list[dict[str, Any]], lend: bool = False
) -> list[np.ndarray]:
    """Read parts of blocks: new arrays, never views of live blocks.  With ``lend``
    (the comm handler, which only serialises the reply) a whole dense block is
    sent as is and copied before its next write instead (``DenseBlock.get``), and
    selected rows are gathered into a buffer of the server's ``reply_pool``
    (reused once the reply has left)."""
    parts = _plain_indices(parts)
    blocks = [server.block(array, int(p["block"])) for p in parts]
    for b, p in zip(blocks, parts, strict=True):
        b.check(p["rows"], p["cols"])
    if lend:
        pool = server.reply_pool
        return [
            b.get(p["rows"], p["cols"], lend=True, pool=pool)  # type: ignore[call-arg]
            if isinstance(b, DenseBlock)
            else b.get(p["rows"], p["cols"])
            for b, p in zip(blocks, parts, strict=True)
        ]
    return [b.get(p["rows"], p["cols"]) for b, p in zip(blocks, parts, strict=True)]


@server_op("get_rows")
def _get_rows(
    server: PSServer, array: str, rows: Any, blocks: list[int], counts: list[int]
) -> np.ndarray:
    """Whole rows of this server's dense blocks of a matrix cut only by rows, in
    one reply array (one frame): ``rows`` holds ``counts[k]`` local rows of
    ``blocks[k]`` after those of the blocks before it, each run in the caller's
    order, gathered into a buffer of the server's ``reply_pool`` from
    ``daskangel.server.reply-frame-bytes`` on (see :mod:`._rowget`, the
    caller's side)."""
    rows = as_index(rows)
    if rows is None or not blocks or len(blocks) != len(counts) or sum(counts) != rows.shape[0]:
        raise InvalidArgumentError(
            f"get_rows: expected rows in runs of counts {str(counts)[:80]} (one per block "
            f"of {str(blocks)[:80]}), got {None if rows is None else rows.shape[0]} rows"
        )
    held: list[DenseBlock] = []
    for k in blocks:
        b = server.block(array, int(k))
        if not isinstance(b, DenseBlock):
            raise InvalidArgumentError(f"get_rows: array {array!r}: expected dense blocks")
        held.append(b)
    d0 = held[0].data
    shape = (rows.shape[0], d0.shape[1])
    if rows.shape[0] * d0.shape[1] * d0.itemsize >= config.get_bytes(
        "daskangel.server.reply-frame-bytes"
    ):
        out = pooled(server.reply_pool, shape, d0.dtype)
    else:
        out = np.empty(shape, d0.dtype)
    s = 0
    for b, c in zip(held, counts, strict=True):
        e = s + int(c)
        bad = take_rows(b.data, rows[s:e], out[s:e])  # checks each index as it copies
        if bad >= 0:
            raise PSIndexError(
                f"rows: local index {int(rows[s + bad])} outside [0, {b.data.shape[0]})"
            )
        s = e
    return out


def seen_tag(server: PSServer, tag: list[Any] | None) -> bool:
    """True if a write with this ``[writer_id, seq]`` tag was applied here already."""
    if tag is None:
        return False
    return int(tag[1]) in server.applied.get(str(tag[0]), ())


def unapplied(
    server: PSServer, tag: list[Any] | None, array: str, parts: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The parts of a tagged write this server has not applied yet.

    Tags are remembered per block: a write resent after some of its blocks moved
    here (recovery) applies those parts even though this server applied the same
    tag to its other blocks before.
    """
    if tag is None:
        return parts
    seqs = server.applied.get(str(tag[0]))
    done = seqs.get(int(tag[1])) if seqs is not None else None
    if not done:
        return parts
    return [p for p in parts if (array, int(p["block"])) not in done]


def record_tag(
    server: PSServer,
    tag: list[Any] | None,
    array: str = "",
    parts: list[dict[str, Any]] = (),  # type: ignore[assignment]
) -> None:
    """Remember that ``parts`` of a tagged write were applied (the most recent
    ``write-tag-memory`` tags per writer are kept)."""
    if tag is None:
        return
    seqs = server.applied.setdefault(str(tag[0]), OrderedDict())
    done = seqs.setdefault(int(tag[1]), set())
    done.update((array, int(p["block"])) for p in parts)
    limit = int(config.get("daskangel.server.write-tag-memory"))
    while len(seqs) > limit:
        seqs.popitem(last=False)


def _deferrable_update(server: PSServer, kwargs: dict[str, Any]) -> bool:
    """Write-behind for updates of dense blocks: by dense values (memory-bound adds
    and copies) and, with ``daskangel.server.behind-scattered``, by compressed-row,
    coordinate or packed parts (scatters); updates of sparse blocks apply in place."""
    array = kwargs["array"]
    scattered = None
    for p in kwargs["parts"]:
        if "coo_rows" in p or "packed" in p or "csr_rows" in p:
            if scattered is None:
                scattered = bool(config.get("daskangel.server.behind-scattered"))
            if not scattered:
                return False
        if not isinstance(server.blocks.get((array, int(p["block"]))), DenseBlock):
            return False
    return True


@server_op("update", writes=True, defer=_deferrable_update)
def _update(
    server: PSServer,
    array: str,
    parts: list[dict[str, Any]],
    add: bool,
    tag: list[Any] | None = None,
    clock: int | None = None,
    defer: bool = False,
    fence: list[Any] | None = None,
) -> bool | Deferred:
    """Apply writes to blocks; ``False`` when ``tag`` shows it was applied before.

    ``clock`` is the writer's clock (``None`` outside training), for snapshot cuts;
    ``fence`` its run (``[job, epoch]``): a write of a run that a rollback abandoned
    is refused (:meth:`PSServer.check_fence`), also when it is a resend.
    With ``defer``, every part is checked now and a :class:`Deferred` returned whose
    ``apply`` writes them (the tag counts as applied from now on).
    """
    server.check_fence(fence, array)
    parts = unapplied(server, tag, array, _plain_indices(parts))
    if not parts:
        return False
    blocks = [server.block(array, int(p["block"])) for p in parts]
    for b, p in zip(blocks, parts, strict=True):
        if "coo_rows" in p:
            b.check(p["coo_rows"], p["coo_cols"])
        elif "csr_rows" in p:
            if not isinstance(b, DenseBlock):
                raise InvalidArgumentError(
                    f"csr_rows: compressed-row parts write dense blocks; block "
                    f"{p['block']} of array {array!r} is sparse"
                )
            b.check_csr(p["csr_rows"], p["csr_len"], p["csr_cols"], p["values"])
        elif "packed" in p:
            _check_packed(b, p, add)
        else:
            b.check(p["rows"], p["cols"])

    def apply() -> None:
        for b, p in zip(blocks, parts, strict=True):
            if "packed" in p:
                fn = lambda blk, p=p: blk.update_packed(int(p["rows"][0]), p["packed"])  # noqa: E731
            elif "coo_rows" in p:
                fn = lambda blk, p=p: blk.update_coo(p["coo_rows"], p["coo_cols"], p["values"], add)  # noqa: E731
            elif "csr_rows" in p:
                fn = lambda blk, p=p: blk.update_csr(  # noqa: E731
                    p["csr_rows"], p["csr_len"], p["csr_cols"], p["values"], add
                )
            else:
                fn = lambda blk, p=p: blk.update(p["rows"], p["cols"], p["values"], add)  # noqa: E731
            before = b.version
            server.write_block((array, int(p["block"])), b, clock, fn)
            note_write(server, array, int(p["block"]), b, before, p)  # for eager refresh

    if defer:
        record_tag(server, tag, array, parts)
        return Deferred(True, apply)
    apply()
    record_tag(server, tag, array, parts)
    return True


def _check_packed(b: Block, p: dict[str, Any], add: bool) -> None:
    """A packed part (one row, ``col << 32 | value bits``) is an add of 4-byte values."""
    packed = p["packed"]
    if not add or b.dtype.itemsize != 4 or len(p["rows"]) != 1:
        raise InvalidArgumentError(
            "packed: packed columns and values are for increments of one row of a 4-byte dtype"
        )
    b.check(p["rows"], None)
    if packed.shape[0]:
        if packed.dtype == np.int64:  # the keys are the high bits: one pass for both
            lo, hi = min_max(packed)
        else:
            lo, hi = packed.min(), packed.max()
        b.check(None, np.array([int(lo) >> PACK_SHIFT, int(hi) >> PACK_SHIFT]))


@server_op("fill", writes=True)
def _fill(
    server: PSServer,
    array: str,
    parts: list[dict[str, Any]],
    value: Any,
    clock: int | None = None,
    fence: list[Any] | None = None,
) -> None:
    server.check_fence(fence, array)
    found = [server.block(array, int(p["block"])) for p in parts]
    for b, p in zip(found, parts, strict=True):
        server.write_block((array, int(p["block"])), b, clock, lambda blk: blk.fill(value))


@server_op("versions")
def _versions(server: PSServer, array: str, parts: list[dict[str, Any]]) -> list[int]:
    return [server.block(array, int(p["block"])).version for p in parts]


@server_op("read_block")
def _read_block(server: PSServer, array: str, parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Whole blocks: dense data, or the stored entries of a sparse block."""
    out = []
    for p in parts:
        b = server.block(array, int(p["block"]))
        if isinstance(b, DenseBlock):
            out.append({"kind": "dense", "data": b.data.copy()})
        else:
            r, c, v = b.entries()
            out.append(
                {
                    "kind": "sparse",
                    "shape": list(b.shape),
                    "rows": r,
                    "cols": c,
                    "values": v,
                    "default": b.default.item(),
                }
            )
    return out


@server_op("stats")
def _stats(server: PSServer) -> dict[str, Any]:
    per_array: dict[str, int] = defaultdict(int)
    for (name, _), b in server.blocks.items():
        per_array[name] += b.nbytes
    return {
        "address": server.address,
        "index": server.index,
        "n_blocks": len(server.blocks),
        "nbytes": server.nbytes,
        "arrays": dict(per_array),
        "waiting": server.waiting,
        "ops": {k: list(v) for k, v in server.op_stats.items()},
        # eager refresh (``_refresh_ops``): budget, bytes sent, held back, rate
        "refresh": refresh.status() if (refresh := getattr(server, "refresh", None)) else {},
    }
