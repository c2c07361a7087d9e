"""Building a Dataset's partitions on the workers, and rebuilding lost ones.

:class:`PartitionBuilder` is the part of :class:`~daskangel.data.Dataset` that
:meth:`~daskangel.data.Dataset.persist` runs: the source's pieces are assigned to
tasks with Angel's greedy (:mod:`._assign`), each task's pieces are parsed and
combined on its worker into one pinned partition future, bad lines are resolved
on the driver, the feature count is settled (index base, declared
``n_features``) and partitions are finalized where it moved; ``repair`` rebuilds
the partitions of workers that left from the same recipe.

Example
-------
>>> ds = angel.data.read_libsvm("data/a9a").persist(n_partitions=4)  # doctest: +SKIP
>>> ds.lost(), ds.repair()                                           # doctest: +SKIP
([], [])
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

from distributed import Client, Future

from .._compat import training_workers, workers_info
from ..errors import InvalidStateError, MalformedInputError
from ._assign import assign
from ._build import BuildSpec, combine, describe, finalize
from ._report import SplitReport, resolve_lines
from ._sources import Derived, PartitionInfo, Piece, Source, cleanup

__all__ = ["PartitionBuilder"]


class PartitionBuilder:
    """Placing and repairing the partitions of :class:`~daskangel.data.Dataset`
    (which provides the attributes below)."""

    source: Source
    id: str
    client: Client | None
    partitions: list[Future]
    info: list[PartitionInfo]
    errors_mode: str
    max_errors: int
    label_transform: str | None
    header_lines: int
    _n_features: int
    _reports: list[SplitReport]
    _finalizer: Any
    _recipe: tuple[Any, ...] | None
    _workers: list[str]
    _origins: list[tuple[Any, Any]]

    if TYPE_CHECKING:  # provided by Dataset

        def _check(self) -> None: ...

    def _spec(self, dataset_id: str, storage: str, budget: int) -> BuildSpec:
        return BuildSpec(
            dataset_id,
            getattr(self.source, "fmt", None),
            storage,
            self.errors_mode,
            self.max_errors,
            self.label_transform,
            self.header_lines,
            budget,
            **BuildSpec.sizes(),
        )

    def _build(self, client: Client, tasks: list[str], spec: BuildSpec) -> None:
        pieces = self.source.pieces(client, len(tasks))
        plan = assign([p.size for p in pieces], [set(p.holders) for p in pieces], tasks)
        parts = [
            self._submit_partition(client, t, w, idx, pieces, spec, "")
            for t, (w, idx) in enumerate(zip(tasks, plan, strict=True))
        ]
        self._set_parts(client, parts, tasks)
        metas = self._describe(client)
        self._reports = [r for m in metas for r in m["reports"]]
        if self.errors_mode == "raise":
            first = resolve_lines(self._reports, limit=1)
            if first:
                raise MalformedInputError(first[0].message)
        shift, nf = self._resolve_features(metas)
        if shift or any(m["n_features"] != nf for m in metas):
            parts = [
                client.submit(
                    finalize,
                    p,
                    shift,
                    nf,
                    key=f"daskangel-data-{self.id}-part-{i}-final",
                    workers=[w],
                    allow_other_workers=False,
                    pure=False,
                )
                for i, (p, w) in enumerate(zip(self.partitions, tasks, strict=True))
            ]
            self._set_parts(client, parts, tasks)
            metas = self._describe(client)
        self._n_features = nf
        # what repair() needs to rebuild a partition; not kept when pieces hold
        # futures of the input (that would pin a second copy of it in memory)
        keep = not any(_holds_future(p.payload) for p in pieces)
        self._recipe = (pieces, plan, spec, shift, nf) if keep else None
        self._set_info(metas)

    def _set_info(self, metas: list[dict[str, Any]]) -> None:
        self._origins = [(m["reports"], m.get("origin")) for m in metas]
        self.info = [
            PartitionInfo(
                m["index"],
                m["worker"],
                m["n_rows"],
                m["nnz"],
                tuple(m["col_range"]),
                m["memory_nbytes"],
                m["disk_nbytes"],
            )
            for m in metas
        ]

    def _submit_partition(
        self,
        client: Client,
        t: int,
        w: str,
        idx: list[int],
        pieces: list[Piece],
        spec: BuildSpec,
        tag: str,
        final: tuple[int, int] | None = None,
    ) -> Future:
        """Submit task ``t``'s pieces and their combine (and finalize) on worker ``w``."""
        base = f"daskangel-data-{self.id}{tag}"
        futs = [self.source.submit(client, pieces[i], spec, w, f"{base}-piece-{i}") for i in idx]
        opts: dict[str, Any] = {"workers": [w], "allow_other_workers": False, "pure": False}
        part = client.submit(
            combine, spec, t, self.source.indexed, *futs, key=f"{base}-part-{t}", **opts
        )
        if final is not None:
            part = client.submit(finalize, part, *final, key=f"{base}-part-{t}-final", **opts)
        return part

    def _set_parts(self, client: Client, parts: list[Future], tasks: list[str]) -> None:
        self.partitions = parts
        self._workers = list(tasks)
        if self._finalizer is not None:
            self._finalizer.detach()
        self._finalizer = weakref.finalize(self, cleanup, client, self.id, list(parts))

    def _describe(self, client: Client) -> list[dict[str, Any]]:
        metas = [
            client.submit(describe, p, workers=[w], allow_other_workers=False, pure=False)
            for p, w in zip(self.partitions, self._workers, strict=True)
        ]
        return list(client.gather(metas))

    def _resolve_features(self, metas: list[dict[str, Any]]) -> tuple[int, int]:
        """(index shift, n_features) once every partition is parsed."""
        src = self.source
        filled = [m for m in metas if m["nnz"]]
        lo = min((m["col_range"][0] for m in filled), default=0)
        hi = max((m["col_range"][1] for m in filled), default=0)
        shift = 0
        if src.base == -1 and filled and lo > 0:
            shift = 1  # no index 0 anywhere: 1-based, as sklearn decides
        if src.base == -1 and shift == 0 and src.n_features > 0:
            at = [r for r in self._reports if r.at_limit[0]]
            if at:
                r = min(at, key=lambda r: r.key[1:])
                raise MalformedInputError(
                    f"{r.key[0]}: index {src.n_features} = the declared n_features appears "
                    f"(first near line {r.at_limit[1] + 1} of the split at byte {r.key[2]}) "
                    "although index 0 appears too, so the file is 0-based; pass "
                    "zero_based=False/True explicitly to skip such lines instead"
                )
        if src.n_features > 0:
            return shift, src.n_features
        if not src.indexed:
            return 0, max((m["n_features"] for m in metas), default=0)
        return shift, max(0, hi - shift)

    def lost(self) -> list[int]:
        """Partitions whose worker has left the cluster."""
        self._check()
        assert self.client is not None
        live = set(workers_info(self.client))
        return [i for i, w in enumerate(self._workers) if w not in live]

    def repair(self) -> list[int]:
        """Rebuild the partitions of workers that left, on the least loaded live
        workers (parsing their pieces again); return their indices.

        Partitions are pinned to their worker, so Dask cannot recompute them
        elsewhere by itself; call this (or let the training runtime call it) after
        losing a worker.  Datasets whose pieces were futures of a dask collection,
        or that were rewritten on the workers (:class:`FeatureIndexer`), cannot be
        rebuilt here: rebuild their input and redo the rewrite.
        """
        lost = self.lost()
        if not lost:
            return []
        if self._recipe is None or isinstance(self.source, Derived):
            raise InvalidStateError(
                f"repair: partitions {lost} lost their worker and this dataset cannot be "
                "rebuilt from its input here (a dask-collection source or a rewritten "
                "dataset); persist its input again"
            )
        assert self.client is not None
        client = self.client
        pieces, plan, spec, shift, nf = self._recipe
        live = sorted(training_workers(client))
        if not live:
            raise InvalidStateError("repair: the cluster has no workers")
        count = {w: 0 for w in live}
        for i, w in enumerate(self._workers):
            if i not in lost and w in count:
                count[w] += 1
        self._generation = getattr(self, "_generation", 0) + 1
        parts, workers = list(self.partitions), list(self._workers)
        for i in lost:
            w = min(live, key=lambda w: (count[w], w))
            count[w] += 1
            tag = f"-r{self._generation}"
            parts[i] = self._submit_partition(client, i, w, plan[i], pieces, spec, tag, (shift, nf))
            workers[i] = w
        self._set_parts(client, parts, workers)
        self._set_info(self._describe(client))
        return lost


def _holds_future(payload: Any) -> bool:
    """True if a piece's payload refers to Dask futures (a persisted collection)."""
    if isinstance(payload, Future):
        return True
    if isinstance(payload, tuple):
        return any(_holds_future(p) for p in payload)
    return any(isinstance(getattr(payload, f, None), Future) for f in ("x", "y"))
