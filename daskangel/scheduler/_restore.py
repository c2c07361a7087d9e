"""Restoring arrays from snapshots and saved models: the restore half of
:class:`~daskangel.scheduler._snapshots.SnapshotService`.

Every block is staged (read and verified) on its server before any is installed,
so a damaged or mismatching snapshot changes nothing (``restore_stage``, then
``restore_commit`` or ``restore_abort`` on every server).

Example
-------
::

    await scheduler.daskangel_restore(ctx="c1", url="/tmp/ckpt")
"""

from __future__ import annotations

import asyncio
import uuid
from typing import TYPE_CHECKING, Any

from .. import _snapshot_format as fmt
from ..errors import SnapshotError

if TYPE_CHECKING:
    from ._registry import ArrayRegistry

__all__ = ["RestoreMixin"]

ServerId = tuple[str, int]


class RestoreMixin:
    """``restore`` for :class:`SnapshotService` (which provides the attributes below)."""

    registry: ArrayRegistry

    if TYPE_CHECKING:  # provided by SnapshotService

        def _arrays(self, ctx: str, names: list[str] | None) -> dict[str, dict[str, Any]]: ...

        async def _call(self, ctx: str, server: ServerId, op: str, **kwargs: Any) -> Any: ...

    async def restore(
        self,
        ctx: str,
        url: str,
        arrays: list[str] | None = None,
        blocks: dict[str, list[int]] | None = None,
        targets: dict[str, list[list[Any]]] | None = None,
        rename: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """Load arrays (or some of their blocks) from a snapshot or saved model.

        Every block is read and verified on its server before any is installed,
        so a damaged or mismatching snapshot changes nothing.  ``targets`` gives,
        per array, the server of each restored block when it moves; ``rename``
        (``{array: stored name}``) loads a stored array into one of another name.
        """
        version_url, manifest = await asyncio.to_thread(fmt.resolve, url)
        metas = self._arrays(ctx, arrays)
        stored = {n: (rename or {}).get(n, n) for n in metas}
        for name, m in metas.items():
            self._check_compatible(stored[name], m, manifest, version_url)
        token = uuid.uuid4().hex
        staged: list[ServerId] = []
        try:
            for name, m in metas.items():
                info = manifest["arrays"][stored[name]]
                want = set(blocks[name]) if blocks and name in blocks else None
                servers = targets[name] if targets and name in targets else m["servers"]
                per_server: dict[ServerId, list[dict[str, Any]]] = {}
                for spec, s in zip(m["blocks"], servers, strict=True):
                    if want is None or spec["block"] in want:
                        per_server.setdefault((s[0], int(s[1])), []).append(spec)
                await asyncio.gather(
                    *(
                        self._call(
                            ctx,
                            s,
                            "restore_stage",
                            url=version_url,
                            array=name,
                            storage=info["storage"],
                            ndim=m["ndim"],
                            parts=parts,
                            checksums=info["checksums"],
                            token=token,
                            stored=stored[name],
                        )
                        for s, parts in per_server.items()
                    )
                )
                staged.extend(per_server)
        except BaseException:
            await asyncio.gather(
                *(self._call(ctx, s, "restore_abort", token=token) for s in set(staged)),
                return_exceptions=True,
            )
            raise
        await asyncio.gather(
            *(self._call(ctx, s, "restore_commit", token=token) for s in set(staged))
        )
        return {"url": version_url, "clock": manifest.get("clock"), "arrays": sorted(metas)}

    @staticmethod
    def _check_compatible(
        name: str, meta: dict[str, Any], manifest: dict[str, Any], url: str
    ) -> None:
        info = manifest["arrays"].get(name)
        if info is None:
            raise SnapshotError(
                f"snapshot {url}: has no array {name!r} (it has {sorted(manifest['arrays'])})"
            )
        for key in ("shape", "dtype", "sparse"):
            there, here = _plain(info[key]), _plain(meta[key])
            if there != here:
                raise SnapshotError(
                    f"snapshot {url}: array {name!r} has {key} {there!r} there but {here!r} here"
                )
        if _plain(info["layout"]) != _plain(meta["layout"]):
            raise SnapshotError(
                f"snapshot {url}: array {name!r} is partitioned differently there "
                f"({info['layout']}) than here ({meta['layout']}); load it into a new context"
            )


def _plain(x: Any) -> Any:
    """Tuples as lists, recursively (comms give tuples, JSON gives lists)."""
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    return x
