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
from ..errors import PSFError, PSFNotAllowedError
from ._partition import Partition
from ._server import PSServer, record_tag, seen_tag, server_op

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
    parts: list[dict[str, Any]],
    writes: list[int],
) -> list[list[Partition]]:
    """One view per array for every part; raises StaleLayoutError before any work."""
    blocks = [[server.block(a, int(p["block"])) for a in arrays] for p in parts]
    out = []
    for p, blks in zip(parts, blocks, strict=True):
        b = int(p["block"])
        out.append(
            [
                Partition(
                    a,
                    b,
                    blk,
                    writable=i in writes,
                    n_rows=int(g[0]),
                    hashed=bool(g[1]),
                    n_col_blocks=int(g[2]),
                )
                for i, (a, blk, g) in enumerate(zip(arrays, blks, geometry, strict=True))
            ]
        )
    return out


def _fail(server: PSServer, spec: dict[str, Any], arrays: list[str], block: int) -> PSFError:
    what = spec.get("name", "pickled psf")
    return PSFError(
        f"psf {what} failed on block {block} of {arrays} on server "
        f"{server.address}#{server.index}; remote traceback:\n{traceback.format_exc()}"
    )


def _run(
    server: PSServer,
    kind: str,
    spec: dict[str, Any],
    arrays: list[str],
    geometry: list[list[Any]],
    parts: list[dict[str, Any]],
    writes: list[int],
) -> tuple[list[Any], list[Partition]]:
    """Run partition code on every part; return results and the views to commit."""
    views = _views(server, arrays, geometry, parts, writes)
    func = resolve_psf(spec)
    results: list[Any] = []
    staged: list[Partition] = []
    for p, vs in zip(parts, views, strict=True):
        try:
            if kind == "get":
                results.append(func.partition_get(*vs, **(p.get("params") or {})))
            else:
                func.partition_update(*vs, **(p.get("params") or {}))
                results.append(True)
                for v in vs:
                    if v.changed:
                        v.validate()
                        staged.append(v)
        except Exception:  # noqa: BLE001 - every failure goes back with its traceback
            raise _fail(server, spec, arrays, int(p["block"])) from None
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
) -> list[bool]:
    """Run an update psf on this server's blocks: compute all, then commit all."""
    if seen_tag(server, tag):
        return [True] * len(parts)
    results, staged = _run(server, "update", spec, arrays, geometry, parts, writes)
    for v in staged:
        v.commit()
    record_tag(server, tag)
    return results


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
) -> list[bool]:
    """Phase one: compute and stage every part, hold the written blocks for ``txn``."""
    if txn in server.txns:  # a resent prepare
        return [True] * len(parts)
    keys = [(a, int(p["block"])) for a in written for p in parts]
    timeout = config.get_seconds("daskangel.ops.prepare-timeout")
    server.reserve(txn, keys, None, timeout)  # raises BlockBusyError before any work
    try:
        results, staged = _run(server, "update", spec, arrays, geometry, parts, writes)
    except BaseException:
        server.release(txn)
        raise
    server.txns[txn] = replace(server.txns[txn], staged=staged)
    return results


@server_op("psf_commit")
def _psf_commit(server: PSServer, array: str, parts: list[dict[str, Any]], txn: str) -> list[bool]:
    """Phase two: apply the staged changes of ``txn`` and free its blocks."""
    p = server.release(txn)
    if p is None:
        if seen_tag(server, [txn, 0]):
            return [True] * len(parts)  # a resent commit
        raise PSFError(
            f"psf commit: transaction {txn} is unknown on server {server.address}#"
            f"{server.index}: its prepare expired (daskangel.ops.prepare-timeout) or the "
            "server restarted; other servers may have committed"
        )
    for v in p.staged:
        v.commit()
    record_tag(server, [txn, 0])
    return [True] * len(parts)


@server_op("psf_abort")
def _psf_abort(server: PSServer, array: str, parts: list[dict[str, Any]], txn: str) -> list[bool]:
    """Drop the staged changes of ``txn`` (nothing happens if it never prepared here)."""
    server.release(txn)
    return [True] * len(parts)
