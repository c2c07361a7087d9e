"""Server side of PS functions: resolve a psf, run its partition code, stage, commit.

The server does not know any particular psf (it never imports ``daskangel.ops``).
A call carries a *spec*: the psf's importable name (``"module:QualName"``) and its
parameters as plain values, or, only where ``daskangel.ops.allow-pickled-psf`` is
true on the server, a pickled object.  Named psfs must be registered
(:func:`register_psf`; subclasses of ``ops.GetFunc`` / ``ops.UpdateFunc`` register
themselves), so importing a name can never run an arbitrary callable.

The resolved object is any object with ``partition_get(*parts, **params)`` or
``partition_update(*parts, **params)``; each ``part`` is a
:class:`~daskangel.psarray._partition.Partition` of one array of the call.

Updates are all-or-nothing: partition code runs on every block of the request
against staged views, every staged change is validated, and only then are they
committed.  Across servers the caller runs ``psf_prepare`` everywhere (stage and
hold the blocks) and ``psf_commit`` only if every server prepared, else
``psf_abort``.

Example
-------
>>> spec = {"name": "daskangel.ops._reduce:Sum", "params": {"axis": None}}
>>> sorted(spec)
['name', 'params']
"""

from __future__ import annotations

import importlib
import pickle
import traceback
from dataclasses import replace
from typing import Any

from .. import config
from ..errors import PSFError, PSFNotAllowedError, RolledBackError
from ._dataops import record_tag, seen_tag, unapplied
from ._partition import Partition
from ._server import PSServer, server_op

__all__ = ["PSF_REGISTRY", "psf_name", "register_psf", "resolve_psf"]

# {"module:QualName": class}: psfs a server may run by name
PSF_REGISTRY: dict[str, type] = {}


def psf_name(cls: type) -> str:
    """The importable name a psf class is addressed by: ``"module:QualName"``."""
    return f"{cls.__module__}:{cls.__qualname__}"


def importable(cls: type) -> bool:
    """True when servers can import ``cls`` by name (not ``__main__``, not local)."""
    return cls.__module__ != "__main__" and "<locals>" not in cls.__qualname__


def register_psf(cls: type) -> type:
    """Allow servers to run ``cls`` by its importable name (a class decorator)."""
    PSF_REGISTRY[psf_name(cls)] = cls
    return cls


def resolve_psf(spec: dict[str, Any]) -> Any:
    """The psf object a spec names; refuses unregistered names and, unless allowed, pickles."""
    if "pickled" in spec:
        if not bool(config.get("daskangel.ops.allow-pickled-psf")):
            raise PSFNotAllowedError(
                "psf: this server refuses pickled psfs; address psfs by importable name, "
                "or set daskangel.ops.allow-pickled-psf: true on the workers"
            )
        return pickle.loads(spec["pickled"])
    name = str(spec["name"])
    cls = PSF_REGISTRY.get(name)
    if cls is None:
        module, _, _ = name.partition(":")
        try:
            importlib.import_module(module)
        except ImportError as e:
            raise PSFError(f"psf: cannot import module {module!r} of psf {name!r}: {e}") from None
        cls = PSF_REGISTRY.get(name)
        if cls is None:
            raise PSFError(
                f"psf: {name!r} is not a registered psf (subclass ops.GetFunc/UpdateFunc "
                "or decorate it with ops.register_psf)"
            )
    params = spec.get("params") or {}
    make = getattr(cls, "from_params", None)
    return make(params) if make is not None else cls(**params)


def _views(
    server: PSServer,
    arrays: list[str],
    geometry: list[list[Any]],
    part: dict[str, Any],
    writes: list[int],
    cut: bool = False,
) -> list[Partition]:
    """One view per array of a part (over the snapshot cut's copies with ``cut``)."""
    b = int(part["block"])
    out = []
    for i, (a, g) in enumerate(zip(arrays, geometry, strict=True)):
        blk = server.block(a, b)
        if cut:
            blk = server.shadows.get((a, b), blk)
        out.append(
            Partition(
                a,
                b,
                blk,
                writable=i in writes,
                n_rows=int(g[0]),
                hashed=bool(g[1]),
                n_col_blocks=int(g[2]),
            )
        )
    return out


def _fail(server: PSServer, spec: dict[str, Any], arrays: list[str], block: int) -> PSFError:
    what = spec.get("name", "pickled psf")
    return PSFError(
        f"psf {what} failed on block {block} of {arrays} on server "
        f"{server.address}#{server.index}; remote traceback:\n{traceback.format_exc()}"
    )


# [(view of the live block, view of the pending snapshot cut's copy or None)]
Staged = list[tuple[Partition, Partition | None]]


def _before_cut(server: PSServer, clock: int | None) -> bool:
    """True when a write of ``clock`` belongs in the pending snapshot cut."""
    cut = server.cut_clock
    return server.cut_active and cut is not None and (clock is None or clock <= cut)


def _run(
    server: PSServer,
    kind: str,
    spec: dict[str, Any],
    arrays: list[str],
    geometry: list[list[Any]],
    parts: list[dict[str, Any]],
    writes: list[int],
    clock: int | None = None,
) -> tuple[list[Any], Staged]:
    """Run partition code on every part; return results and the views to commit.

    An update that belongs in a pending snapshot cut while some of its blocks
    already changed after the cut runs a second time on the cut's copies, so the
    snapshot holds what the psf computes from the cut's state.
    """
    for p in parts:  # StaleLayoutError before any work
        for a in arrays:
            server.block(a, int(p["block"]))
    func = resolve_psf(spec)
    results: list[Any] = []
    staged: Staged = []
    in_cut = kind == "update" and _before_cut(server, clock)
    for p in parts:
        b = int(p["block"])
        params = p.get("params") or {}
        try:
            vs = _views(server, arrays, geometry, p, writes)
            if kind == "get":
                results.append(func.partition_get(*vs, **params))
                continue
            out = func.partition_update(*vs, **params)
            results.append(True if out is None else out)  # values for merge_update
            cut_vs: list[Partition | None] = [None] * len(vs)
            if in_cut and any((a, b) in server.shadows for a in arrays):
                cut_vs = list(_views(server, arrays, geometry, p, writes, cut=True))
                func.partition_update(*cut_vs, **params)
            for v, c in zip(vs, cut_vs, strict=True):
                if v.changed or (c is not None and c.changed):
                    v.validate()
                    if c is not None:
                        c.validate()
                    staged.append((v, c))
        except Exception:  # noqa: BLE001 - every failure goes back with its traceback
            raise _fail(server, spec, arrays, b) from None
    return results, staged


@server_op("psf_get")
def _psf_get(
    server: PSServer,
    array: str,
    parts: list[dict[str, Any]],
    spec: dict[str, Any],
    arrays: list[str],
    geometry: list[list[Any]],
) -> list[Any]:
    """Partial results of a get psf, one per part."""
    results, _ = _run(server, "get", spec, arrays, geometry, parts, [])
    return results


def _commit(server: PSServer, staged: Staged, clock: int | None) -> None:
    """Commit staged views, keeping a pending snapshot cut consistent."""
    for v, _ in staged:
        if server.blocks.get((v.name, v.block)) is not v.source:
            raise PSFError(
                f"psf commit: block {v.block} of {v.name!r} on server {server.address}#"
                f"{server.index} was replaced (restored or dropped) since it was computed; "
                "nothing of this commit was applied here, other servers may have committed"
            )
    for live, cut in staged:
        key = (live.name, live.block)
        if cut is not None and key not in server.shadows:
            server.shadows[key] = live.source.copy()  # the cut gets its own version

        def apply(target: Any, live: Partition = live, cut: Partition | None = cut) -> None:
            (live if target is live.source or cut is None else cut).apply_to(target)

        server.write_block(key, live.source, clock, apply)


@server_op("psf_update", writes=True)
def _psf_update(
    server: PSServer,
    array: str,
    parts: list[dict[str, Any]],
    spec: dict[str, Any],
    arrays: list[str],
    geometry: list[list[Any]],
    writes: list[int],
    written: list[str],
    tag: list[Any] | None = None,
    clock: int | None = None,
    fence: list[Any] | None = None,
) -> list[bool]:
    """Run an update psf on this server's blocks: compute all, then commit all.

    ``clock`` is the writer's clock (``None`` outside training), for snapshot cuts;
    ``fence`` its run (``[job, epoch]``): a run a rollback abandoned is refused
    (:meth:`PSServer.check_fence`), also when this is a resend.
    """
    server.check_fence(fence, array)
    todo = unapplied(server, tag, array, parts)
    if not todo:
        return [True] * len(parts)
    results, staged = _run(server, "update", spec, arrays, geometry, todo, writes, clock)
    _commit(server, staged, clock)
    record_tag(server, tag, array, todo)
    if len(todo) == len(parts):
        return results
    done = iter(results)
    return [next(done) if p in todo else True for p in parts]


@server_op("psf_prepare", writes=True)
def _psf_prepare(
    server: PSServer,
    array: str,
    parts: list[dict[str, Any]],
    spec: dict[str, Any],
    arrays: list[str],
    geometry: list[list[Any]],
    writes: list[int],
    written: list[str],
    txn: str,
    txn_wait: bool = True,
    clock: int | None = None,
    fence: list[Any] | None = None,
    origin: str | None = None,
) -> list[bool]:
    """Phase one: compute and stage every part, hold the written blocks for ``txn``;
    a run a rollback abandoned (``fence``) is refused before anything is held, and
    so is a worker that left (``origin``: the preparing worker, see ``release_origin``)."""
    server.check_fence(fence, array)
    if origin is not None and origin in server.departed:
        raise PSFError(
            f"psf prepare: worker {origin} left the cluster; its transaction {txn} is not "
            f"held on server {server.address}#{server.index}"
        )
    if txn in server.txns:  # a resent prepare
        return [True] * len(parts)
    keys = [(a, int(p["block"])) for a in written for p in parts]
    timeout = config.get_seconds("daskangel.ops.prepare-timeout")
    # raises BlockBusyError before any work
    server.reserve(txn, keys, None, timeout, fence, origin)
    try:
        results, staged = _run(server, "update", spec, arrays, geometry, parts, writes, clock)
    except BaseException:
        server.release(txn)
        raise
    server.txns[txn] = replace(server.txns[txn], staged=(staged, clock))
    return results


@server_op("psf_commit")
def _psf_commit(
    server: PSServer,
    array: str,
    parts: list[dict[str, Any]],
    txn: str,
    fence: list[Any] | None = None,
) -> list[bool]:
    """Phase two: apply the staged changes of ``txn`` and free its blocks.

    ``fence``: the committing task's run.  A rollback's fence aborted the prepared
    transactions of the runs it abandons (``fence`` op); a commit of such a run
    arriving late is refused with :class:`~daskangel.errors.RolledBackError`, and
    its hold, if it is still there, goes with it.
    """
    try:
        server.check_fence(fence, array)
    except RolledBackError:
        server.release(txn)
        raise
    p = server.release(txn)
    if p is None:
        if seen_tag(server, [txn, 0]):
            return [True] * len(parts)  # a resent commit
        raise PSFError(
            f"psf commit: transaction {txn} is unknown on server {server.address}#"
            f"{server.index}: its prepare expired (daskangel.ops.prepare-timeout) or the "
            "server restarted; other servers may have committed"
        )
    staged, clock = p.staged
    _commit(server, staged, clock)
    record_tag(server, [txn, 0])
    return [True] * len(parts)


@server_op("release_origin")
def _release_origin(server: PSServer, worker: str) -> list[str]:
    """The scheduler says ``worker`` left: abort the transactions it prepared here
    (their commit cannot come; ``Holds.release_origin``)."""
    return server.release_origin(str(worker))


@server_op("psf_abort")
def _psf_abort(
    server: PSServer,
    array: str,
    parts: list[dict[str, Any]],
    txn: str,
    fence: list[Any] | None = None,
) -> list[bool]:
    """Drop the staged changes of ``txn`` (nothing happens if it never prepared here,
    or a rollback's fence aborted it already: ``fence`` is not checked)."""
    server.release(txn)
    return [True] * len(parts)
