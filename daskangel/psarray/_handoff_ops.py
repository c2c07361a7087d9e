"""Server side of the hand-off: blocks move to another server, nothing is lost.

The scheduler's ``HandoffService`` moves the blocks of a leaving worker (or of a
rebalance) one ``(array, source server, target server)`` group at a time:

1. ``handoff_send`` on the source.  Under the server lock, after the writes
   queued behind earlier replies, the blocks leave ``server.blocks`` and are
   marked *moving* (``handoff_freeze``, a write op: it first waits for any
   prepared two-phase psf update holding them).  From then on every request
   for them fails with :class:`~daskangel.errors.BlockMovingError` before any
   part is applied; the caller waits for the new routing and resends.  The
   source sends the blocks (their data, the copy a pending snapshot cut keeps,
   the write tags applied to them, so a resent write is still applied once)
   straight to the target's ``handoff_put``, worker to worker, and returns once
   the target has installed them.
2. The scheduler switches the routing (the array's generation goes up); the
   waiting callers resend to the target.

If sending fails the blocks go back (``handoff_thaw``) and the source serves
them as before.  The source keeps its *moving* marks (one small entry a block),
so a caller that still routes there learns to wait instead of giving up; a
block arriving again, a drop or a new creation of the array clears them.

Example
-------
>>> import numpy as np
>>> from daskangel.psarray._blocks import DenseBlock
>>> b = unpack_block(pack_block(DenseBlock(np.ones((1, 3), "float32"))))
>>> b.data.tolist()
[[1.0, 1.0, 1.0]]
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import numpy as np

from ..errors import InvalidStateError
from ._blocks import DenseBlock, SparseBlock
from ._initspec import InitSpec
from ._server import Block, PSServer, server_async_op, server_op

__all__ = ["pack_block", "unpack_block"]


def pack_block(b: Block) -> dict[str, Any]:
    """A block as plain values and numpy arrays (framed without copies)."""
    out: dict[str, Any] = {
        "kind": b.kind,
        "row0": b.row0,
        "col0": b.col0,
        "n_cols": b.n_cols,
        "version": b.version,
    }
    if isinstance(b, DenseBlock):
        out["data"] = b.data
        out["lent"] = b.lent  # a reader may still hold the array: copy before writing
        return out
    out.update(
        shape=list(b.shape),
        dtype=b.dtype.name,
        keys=b.keys[: b.n],
        vals=b.vals[: b.n],
        default=b.default.item(),
        init=None if b.init is None else b.init.to_dict(),
    )
    return out


def unpack_block(d: dict[str, Any]) -> Block:
    """The block :func:`pack_block` described."""
    args = (int(d["row0"]), int(d["col0"]), int(d["n_cols"]))
    if d["kind"] == "dense":
        dense = DenseBlock(np.asarray(d["data"]), *args)
        dense.lent = bool(d.get("lent", False)) or not dense.data.flags.writeable
        block: Block = dense
    else:
        sb = SparseBlock(
            (int(d["shape"][0]), int(d["shape"][1])), np.dtype(d["dtype"]), 0.0, None, *args
        )
        sb.default = sb.dtype.type(d["default"])
        sb.init = None if d.get("init") is None else InitSpec.from_dict(d["init"])
        sb.load(np.asarray(d["keys"]), np.asarray(d["vals"]))
        block = sb
    block.version = int(d["version"])
    return block


def _tags_of(server: PSServer, keys: set[tuple[str, int]]) -> list[list[Any]]:
    """``[[writer, seq, [[array, block], ...]], ...]``: remembered write tags that
    touched ``keys``, oldest first per writer."""
    out: list[list[Any]] = []
    for writer, seqs in server.applied.items():
        for seq, done in seqs.items():
            hit = done & keys
            if hit:
                out.append([writer, seq, [list(k) for k in hit]])
    return out


@server_op("handoff_freeze", writes=True)
def _freeze(
    server: PSServer,
    array: str,
    parts: list[dict[str, Any]],
    to: str,
    cut: str | None = None,
) -> dict[str, Any]:
    """Take the blocks out of service (marked moving to ``to``); return them packed
    with their cut copies (when the pending cut is ``cut``) and write tags."""
    keys = [(array, int(p["block"])) for p in parts]
    blocks = [server.block(*k) for k in keys]  # StaleLayoutError before any change
    carry_cut = cut is not None and server.cut_active and server.cut_id == cut
    shadows = {}
    for k in keys:
        shadow = server.shadows.pop(k, None)
        if carry_cut and shadow is not None:
            shadows[str(k[1])] = pack_block(shadow)
    for k in keys:
        del server.blocks[k]
        server.moving[k] = to
    return {
        "blocks": [pack_block(b) for b in blocks],
        "held": blocks,  # kept on this side to put back if the send fails
        "shadows": shadows,
        "cut": {"id": server.cut_id, "clock": server.cut_clock} if carry_cut else None,
        "tags": _tags_of(server, set(keys)),
        "uid": server.uids.get(array),
    }


@server_op("handoff_thaw")
def _thaw(server: PSServer, array: str, blocks: dict[int, Block]) -> None:
    """Put back blocks whose hand-off failed."""
    for b, block in blocks.items():
        server.moving.pop((array, b), None)
        server.blocks[(array, b)] = block


@server_op("handoff_put", writes=True)
def _put(
    server: PSServer,
    array: str,
    parts: list[dict[str, Any]],
    blocks: list[dict[str, Any]],
    shadows: dict[str, dict[str, Any]] | None = None,
    cut: dict[str, Any] | None = None,
    tags: list[list[Any]] | None = None,
    uid: str | None = None,
) -> int:
    """Install handed-off blocks (with their cut copies and write tags)."""
    held = server.uids.get(array)
    if uid and held is not None and held != uid:
        raise InvalidStateError(
            f"array: server {server.address}#{server.index} holds another creation of "
            f"array {array!r} ({held}) than the blocks handed to it ({uid})"
        )
    made = {(array, int(p["block"])): unpack_block(d) for p, d in zip(parts, blocks, strict=True)}
    if cut is not None and not (server.cut_active and server.cut_id == cut["id"]):
        if not server.cut_active:  # the pending cut reaches this server with the blocks
            server.cut_active = True
            server.cut_clock = None if cut["clock"] is None else int(cut["clock"])
            server.cut_id = cut["id"]
            server.shadows.clear()
        else:
            cut = None  # another cut is pending here: the moved blocks join it as they are
    for key, block in made.items():
        server.blocks[key] = block
        server.moving.pop(key, None)
        shadow = (shadows or {}).get(str(key[1]))
        if cut is not None and shadow is not None:
            server.shadows[key] = unpack_block(shadow)
        else:
            server.shadows.pop(key, None)
    if uid:
        server.uids[array] = uid
    for writer, seq, keys in tags or ():
        seqs = server.applied.setdefault(str(writer), OrderedDict())
        seqs.setdefault(int(seq), set()).update((str(a), int(b)) for a, b in keys)
    return len(made)


@server_async_op("handoff_send")
async def _send(
    server: PSServer,
    array: str,
    parts: list[dict[str, Any]],
    target: list[Any],
    cut: str | None = None,
) -> int:
    """Hand this server's ``parts`` (blocks) of ``array`` to server ``target``
    (``[address, index]``); put them back if that fails."""
    if server.peer is None:
        raise InvalidStateError(
            f"server {server.address}#{server.index} cannot reach other servers (not on a "
            "Dask worker with the handlers transport)"
        )
    to = f"{target[0]}#{int(target[1])}"
    frozen = await server.run("handoff_freeze", array=array, parts=parts, to=to, cut=cut)
    held = dict(zip((int(p["block"]) for p in parts), frozen.pop("held"), strict=True))
    try:
        await server.peer(
            str(target[0]),
            int(target[1]),
            "handoff_put",
            {
                "array": array,
                "parts": [{"block": int(p["block"])} for p in parts],
                **frozen,
            },
        )
    except BaseException:
        await server.run("handoff_thaw", array=array, blocks=held)
        raise
    return sum(b.nbytes for b in held.values())


@server_op("handoff_discard")
def _discard(server: PSServer, array: str, parts: list[dict[str, Any]]) -> int:
    """Forget copies a failed hand-off may have installed here (the routing never
    pointed here for them)."""
    n = 0
    for p in parts:
        if server.blocks.pop((array, int(p["block"])), None) is not None:
            n += 1
    return n
