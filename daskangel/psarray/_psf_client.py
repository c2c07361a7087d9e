"""Caller side of PS functions: co-partitioning, split, call, merge, two-phase commit.

``PSArray.psf`` and ``PSContext.psf`` run any object following this protocol
(``daskangel.ops.GetFunc`` / ``UpdateFunc`` implement it; only ``psf_kind``,
``psf_spec`` and the partition method are required):

``psf_kind``
    ``"get"`` or ``"update"``.
``psf_spec() -> dict``
    ``{"name": "module:QualName", "params": {...}}`` (plain values and numpy
    arrays), or ``{"pickled": bytes}``.
``split(metas) -> {block_id: params}``
    The blocks to touch and each one's parameters (default: every block, none).
``merge(partials, metas)``
    Combine ``{block_id: partial}`` into the result (get psfs).
``writes_for(n_arrays) -> tuple[int, ...]``
    Which of the call's arrays an update writes (default: the first).
``merge_update(partials, metas)`` (optional, update psfs)
    Combine ``{block_id: partial}`` of an update whose ``partition_update``
    returns values (``None`` counts as ``True``; a part a resend found applied
    already reads ``True``), e.g. an optimiser step that returns the weights of
    the next minibatch in the same message; without it an update returns ``None``.
``check(metas)``, ``output(metas)``, ``cost(metas, block, params)``
    Validate the call before anything is sent; the expected ``(shape, dtype)``
    of the merged result (or a list of them for a tuple result); the byte cost
    of one block's work (decides inline vs. server thread).

An update touching blocks on several servers runs in two phases: every server
computes and stages its blocks and holds them (``psf_prepare``); only if all
succeed does each commit (``psf_commit``), otherwise all abort.  If a prepare
finds its blocks held by another update, all abort and the prepares are redone
one server at a time in a fixed order, each waiting for the blocks to be free
(ordered locking, so two updates never deadlock).

Co-partitioning is checked on this process's cached layouts; when they differ
(one array's refreshed after a move of the group, another's not) they are
fetched again first: the scheduler moves co-partitioned arrays as one group and
switches their routing at once, so the fresh ones agree.

Example
-------
>>> from daskangel.psarray._layout import BlockPartitioner
>>> from daskangel.psarray._meta import ArrayMeta, ServerId
>>> from daskangel.psarray._initspec import InitSpec
>>> lay = BlockPartitioner((1, 4)).layout((1, 8), 4, 2, False)
>>> a = ArrayMeta.new("a", (8,), "float32", False, lay, InitSpec())
>>> a = a.with_servers((ServerId("w1", 0), ServerId("w2", 0)), 1)
>>> check_copartitioned([a, a])
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import config
from ..errors import (
    BlockBusyError,
    InvalidTypeError,
    NotCoPartitionedError,
    PSFError,
    ShapeMismatchError,
    StaleLayoutError,
)
from ._meta import ArrayMeta

if TYPE_CHECKING:
    from ._binding import Binding

__all__ = ["check_copartitioned", "run_psf"]

logger = logging.getLogger(__name__)


def _describe(m: ArrayMeta) -> str:
    shape = (m.shape[1],) if m.ndim == 1 else m.shape
    servers = [str(s) for s in m.servers[:4]]
    more = f" ... ({len(m.servers)} blocks)" if len(m.servers) > 4 else ""
    kind = "sparse" if m.sparse else "dense"
    return f"{m.name!r}: shape {shape} {kind}, {m.layout.describe()}, block servers {servers}{more}"


def check_copartitioned(metas: list[ArrayMeta]) -> None:
    """Raise :class:`NotCoPartitionedError` unless all arrays share blocks and servers."""
    first = metas[0]
    for m in metas[1:]:
        if m.layout != first.layout or m.servers != first.servers:
            what = "block layouts" if m.layout != first.layout else "block placements"
            raise NotCoPartitionedError(
                f"arrays: {first.name!r} and {m.name!r} are not co-partitioned (their "
                f"{what} differ), which this psf needs:\n  {_describe(first)}\n  "
                f"{_describe(m)}\nmake the second with ps.zeros_like({first.name!r}) "
                "or ps.full_like(...)"
            )


def _copartitioned(metas: list[ArrayMeta]) -> bool:
    try:
        check_copartitioned(metas)
    except NotCoPartitionedError:
        return False
    return True


def _default_cost(metas: list[ArrayMeta], block: int) -> int:
    r, c = metas[0].layout.block_shape(block)
    if metas[0].sparse:
        c = min(c, 1 << 16)
    return int(r * c * sum(m.itemsize for m in metas))


def _check_output(name: str, result: Any, want: Any) -> None:
    if want is None:
        return
    if isinstance(want, list):
        if not isinstance(result, tuple) or len(result) != len(want):
            raise PSFError(f"psf {name}: merge returned {type(result).__name__}, expected a tuple")
        for r, w in zip(result, want, strict=True):
            _check_output(name, r, w)
        return
    shape, dtype = want
    got = np.asarray(result)
    if got.shape != tuple(shape):
        raise PSFError(f"psf {name}: result has shape {got.shape}, expected {tuple(shape)}")
    if dtype is not None and got.dtype != np.dtype(dtype):
        raise PSFError(f"psf {name}: result has dtype {got.dtype}, expected {np.dtype(dtype)}")


async def run_psf(
    binding: Binding,
    func: Any,
    names: list[str],
    atomic: bool = True,
    clock: int | None = None,
    fence: list[Any] | None = None,
) -> Any:
    """Run ``func`` over the arrays ``names`` (co-partitioned); see the module docstring."""
    kind = getattr(func, "psf_kind", None)
    if kind not in ("get", "update"):
        raise InvalidTypeError(
            f"func: expected a psf (an ops.GetFunc or ops.UpdateFunc), got {type(func).__name__}"
        )
    metas = [await binding.meta(n) for n in names]
    for _ in range(3):
        if len(metas) == 1 or _copartitioned(metas):
            break
        # layouts cached or fetched at different moments (a move of the group in
        # between; a resend refreshes the first array's only): fetch them again,
        # the registry switches a group's routing at once
        metas = [await binding.meta(n, refresh=True) for n in names]
    check_copartitioned(metas)
    if hasattr(func, "check"):
        func.check(metas)
    if hasattr(func, "split"):
        split = func.split(metas)
    else:
        split = {b: {} for b in range(metas[0].layout.n_blocks)}
    n_blocks = metas[0].layout.n_blocks
    parts: dict[int, dict[str, Any]] = {}
    for b, params in split.items():
        if not 0 <= int(b) < n_blocks:
            raise ShapeMismatchError(f"split: block {b} outside [0, {n_blocks})")
        parts[int(b)] = {"block": int(b), "params": params or {}}
    cost_fn = getattr(func, "cost", None)
    cost = {
        b: int(cost_fn(metas, b, p["params"])) if cost_fn else _default_cost(metas, b)
        for b, p in parts.items()
    }
    spec = func.psf_spec()
    label = spec.get("name", type(func).__name__)
    geometry = [[m.shape[0], m.layout.col_mode == "hash", m.layout.n_col_blocks] for m in metas]
    extra: dict[str, Any] = {"spec": spec, "arrays": list(names), "geometry": geometry}
    if kind == "get":
        partials = (
            await binding.call_blocks(names[0], "psf_get", parts, cost, extra) if parts else {}
        )
        result = func.merge(partials, metas) if hasattr(func, "merge") else partials
        if hasattr(func, "output"):
            _check_output(label, result, func.output(metas))
        return result
    merge = getattr(func, "merge_update", None)
    if not parts:
        return None if merge is None else merge({}, metas)
    writes = sorted(func.writes_for(len(names))) if hasattr(func, "writes_for") else [0]
    extra["writes"] = writes
    extra["written"] = [names[i] for i in writes]
    extra["clock"] = clock  # the writing task's clock, for snapshot cuts
    if fence is not None:  # the writing task's run: refused once a rollback abandoned it
        extra["fence"] = fence
    servers = sorted({metas[0].servers[b] for b in parts})
    if len(servers) == 1 or not atomic:
        extra["tag"] = binding.next_tag()
        partials = await binding.call_blocks(names[0], "psf_update", parts, cost, extra)
    else:
        partials = await _two_phase(binding, names[0], parts, cost, extra, metas[0], servers)
    return None if merge is None else merge(partials, metas)


async def _two_phase(
    binding: Binding,
    name: str,
    parts: dict[int, dict[str, Any]],
    cost: dict[int, int],
    extra: dict[str, Any],
    meta: ArrayMeta,
    servers: list[Any],
) -> dict[int, Any]:
    """Prepare on every server, then commit; prepared again from the start, under a
    new transaction, when a block turns out to be moving or moved (see :func:`_prepare`).
    Returns the prepares' partial results (what ``partition_update`` returned)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + config.get_seconds("daskangel.client.recovery-wait")
    bare = {b: {"block": b} for b in parts}
    if binding.local_worker is not None:  # should this worker die between the phases,
        # the scheduler aborts what it prepared (``release_origin``), in either recovery mode
        extra = {**extra, "origin": binding.local_worker.address}
    while True:
        txn = uuid.uuid4().hex
        try:
            partials = await _prepare(binding, name, parts, cost, extra, txn, meta, servers)
            break
        except StaleLayoutError:
            # a block is being handed to another server (that move waits for the blocks
            # this transaction holds: hold none while waiting for the routing), or it
            # moved: everything is released and prepared again where the blocks are
            await _abort(binding, name, bare, txn)
            fresh = await binding.meta(name)
            remaining = deadline - loop.time()
            if fresh.uid != meta.uid or remaining <= 0:  # dropped and made again: no retry
                raise
            meta = await binding._wait(name, meta.generation, remaining)
            servers = sorted({meta.servers[b] for b in parts})
        except BaseException:
            await _abort(binding, name, bare, txn)
            raise
    # the run rides on the commit too: a rollback's fence aborted the transaction
    # of an abandoned run, whose late commit is then refused (RolledBackError)
    run = {"fence": extra["fence"]} if "fence" in extra else {}
    await binding.call_blocks(name, "psf_commit", bare, {}, {"txn": txn, **run})
    return partials


async def _prepare(
    binding: Binding,
    name: str,
    parts: dict[int, dict[str, Any]],
    cost: dict[int, int],
    extra: dict[str, Any],
    txn: str,
    meta: ArrayMeta,
    servers: list[Any],
) -> dict[int, Any]:
    """Phase one of ``txn`` (its partial results); raises :class:`StaleLayoutError` (``BlockMovingError``
    at once for a moving block) instead of resending (the caller aborts what was
    prepared and starts again)."""
    try:
        return await binding.call_blocks(
            name,
            "psf_prepare",
            parts,
            cost,
            {**extra, "txn": txn, "txn_wait": False},
            resend=False,
        )
    except BlockBusyError:
        # another update holds some of the blocks: free ours, then take the
        # servers one at a time in a fixed order, waiting for each
        await _abort(binding, name, {b: {"block": b} for b in parts}, txn)
        out: dict[int, Any] = {}
        for s in servers:
            mine = {b: p for b, p in parts.items() if meta.servers[b] == s}
            out |= await binding.call_blocks(
                name,
                "psf_prepare",
                mine,
                cost,
                {**extra, "txn": txn, "txn_wait": True},
                resend=False,
            )
        return out


async def _abort(binding: Binding, name: str, bare: dict[int, Any], txn: str) -> None:
    try:
        await binding.call_blocks(name, "psf_abort", bare, {}, {"txn": txn})
    except Exception as e:  # noqa: BLE001 - the prepare error matters more; holds expire
        logger.warning("daskangel: could not abort psf transaction %s: %r", txn, e)
