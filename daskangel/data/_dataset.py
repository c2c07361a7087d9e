"""Dataset: a lazy description of input that ``persist()`` places on the workers.

``persist`` cuts the input into pieces, assigns them to tasks with Angel's greedy
(:mod:`._assign`), parses every piece on the worker of its task, and combines a
task's pieces into one :class:`~._partition.Partition` there.  Each partition is
a Dask future pinned to its worker (``allow_other_workers=False``) and stays there
for the whole training: nothing moves rows between workers.

Example
-------
>>> import daskangel as angel                                   # doctest: +SKIP
>>> ds = angel.data.read_libsvm("data/a9a").persist(n_partitions=4)  # doctest: +SKIP
>>> ds.n_rows, ds.n_features, ds.skipped  # doctest: +SKIP
(32561, 123, {})
"""

from __future__ import annotations

import uuid
import weakref
from typing import Any

import numpy as np
from distributed import Client, Future, default_client

from .. import config
from .._compat import training_workers, workers_info
from ..errors import InvalidArgumentError, InvalidStateError, MalformedInputError
from ._assign import assign, task_workers
from ._build import BuildSpec, combine, describe, finalize
from ._positions import positions
from ._report import ERROR_MODES, BadLine, SplitReport, resolve_lines, total_counts
from ._sources import (
    Derived,
    FileSource,
    PartitionInfo,
    Piece,
    Source,
    budget_bytes,
    cleanup,
)
from ._storage import LEVELS

__all__ = ["Dataset", "FileSource", "PartitionInfo", "Piece", "Source"]


class Dataset:
    """Rows for training: lazy until :meth:`persist` places them on the workers.

    Build one with a reader (``angel.data.read_libsvm`` ...) or
    ``angel.data.from_array``.

    Parameters
    ----------
    source
        Where the rows come from.
    storage
        ``"memory"``, ``"disk"`` or ``"memory_disk"`` (see :mod:`._storage`).
    memory_budget
        Bytes per worker kept in memory under ``"memory_disk"`` (int or ``"1GiB"``).
    errors
        ``"raise"`` (default): a bad line raises :class:`MalformedInputError` naming
        the first bad line of the input; ``"skip"``: bad lines are dropped and
        counted per reason in :attr:`skipped`; ``"collect"``: also keep the first
        ``max_errors`` of them in :attr:`errors`.
    """

    def __init__(
        self,
        source: Source,
        *,
        storage: str = "memory",
        memory_budget: Any = None,
        errors: str = "raise",
        max_errors: int | None = None,
        label_transform: str | None = None,
        header_lines: int = 0,
    ) -> None:
        if storage not in LEVELS:
            raise InvalidArgumentError(f"storage: expected one of {LEVELS}, got {storage!r}")
        if errors not in ERROR_MODES:
            raise InvalidArgumentError(f"errors: expected one of {ERROR_MODES}, got {errors!r}")
        self.source = source
        self.storage = storage
        self.memory_budget = budget_bytes(storage, memory_budget)
        self.errors_mode = errors
        self.max_errors = int(
            max_errors if max_errors is not None else config.get("daskangel.data.max-errors")
        )
        self.label_transform = label_transform
        self.header_lines = header_lines
        self.id = ""
        self.client: Client | None = None
        self.partitions: list[Future] = []
        self.info: list[PartitionInfo] = []
        self._n_features = 0
        # the field of every feature, when the input says (``read_libffm``); else None
        self.fields: np.ndarray | None = None
        self._reports: list[SplitReport] = []
        self._finalizer: Any = None
        self._recipe: tuple[Any, ...] | None = None

    # -- persisting ---------------------------------------------------------------------

    @property
    def persisted(self) -> bool:
        return bool(self.id)

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

    def persist(
        self,
        client: Client | None = None,
        *,
        n_partitions: int | None = None,
        workers: list[str] | None = None,
        storage: str | None = None,
        memory_budget: Any = None,
    ) -> Dataset:
        """Parse the input on the workers; return the persisted Dataset.

        ``n_partitions`` (default: one per worker) partitions are spread
        round-robin over ``workers`` (default: all), each a pinned Dask future.
        Blocks until every partition is built, so errors surface here.  On a
        persisted dataset with the same layout it returns the dataset itself.
        """
        if (
            self.persisted
            and n_partitions in (None, len(self.partitions))
            and workers is None
            and storage in (None, self.storage)
            and memory_budget is None
        ):
            return self  # already on the workers as asked
        if self.persisted and isinstance(self.source, Derived):
            raise InvalidArgumentError(
                "persist: a dataset rewritten on the workers (e.g. by FeatureIndexer) "
                "cannot be re-read with other partitions or storage; persist its input "
                "that way and rewrite again"
            )
        client = client or default_client()
        storage = storage or self.storage
        if storage not in LEVELS:
            raise InvalidArgumentError(f"storage: expected one of {LEVELS}, got {storage!r}")
        if memory_budget is None and storage == "memory_disk" and self.memory_budget:
            memory_budget = self.memory_budget
        budget = budget_bytes(storage, memory_budget)
        ws = workers or list(training_workers(client))
        tasks = task_workers(ws, n_partitions or len(ws))
        out = Dataset.__new__(Dataset)
        out.__dict__.update(self.__dict__)
        out.id = f"ds-{uuid.uuid4().hex[:12]}"
        out.client = client
        out.storage = storage
        out.memory_budget = budget
        out._finalizer = weakref.finalize(out, cleanup, client, out.id, [])
        try:
            out._build(client, tasks, out._spec(out.id, storage, budget))
        except BaseException:
            out.release()
            raise
        return out

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

    def positions(self) -> list[np.ndarray]:
        """Each partition's rows' positions in the input (int64, 0-based).

        Rows are numbered in input order: files in the order given, lines in
        file order; arrays and dask collections in row order.  Scores computed
        partition by partition go back to input order with these
        (``predict`` on a Dataset does).

        Example
        -------
        >>> ds = angel.data.from_array(X, y).persist(n_partitions=2)  # doctest: +SKIP
        >>> np.concatenate(ds.positions()).tolist() == list(range(len(X)))  # doctest: +SKIP
        True
        """
        self._check()
        return positions(getattr(self, "_origins", []), self.header_lines)

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

    # -- facts ---------------------------------------------------------------------------

    def _check(self) -> None:
        if not self.persisted:
            raise InvalidStateError("Dataset is lazy: call .persist() to read it onto the workers")

    @property
    def workers(self) -> list[str]:
        """The worker holding each partition."""
        self._check()
        return list(self._workers)

    @property
    def n_partitions(self) -> int:
        self._check()
        return len(self.partitions)

    @property
    def n_splits(self) -> int:
        """Input pieces parsed (byte ranges, line shares, array blocks)."""
        self._check()
        return len(self._reports)

    @property
    def n_rows(self) -> int:
        self._check()
        return sum(i.n_rows for i in self.info)

    @property
    def nnz(self) -> int:
        self._check()
        return sum(i.nnz for i in self.info)

    @property
    def n_features(self) -> int:
        self._check()
        return self._n_features

    @property
    def indexed(self) -> bool:
        return bool(self.source.indexed)

    @property
    def skipped(self) -> dict[str, int]:
        """Bad lines dropped, per reason (empty under ``errors='raise'``)."""
        self._check()
        return total_counts(self._reports)

    @property
    def errors(self) -> list[BadLine]:
        """The first ``max_errors`` bad lines with file, line and reason."""
        self._check()
        return resolve_lines(self._reports, limit=self.max_errors)

    # -- using ---------------------------------------------------------------------------

    def map_partitions(self, fn: Any, *args: Any, **kwargs: Any) -> list[Future]:
        """Run ``fn(partition, *args, **kwargs)`` on each partition's own worker."""
        self._check()
        assert self.client is not None
        return [
            self.client.submit(
                fn, p, *args, workers=[w], allow_other_workers=False, pure=False, **kwargs
            )
            for p, w in zip(self.partitions, self._workers, strict=True)
        ]

    def compute(self) -> Any:
        """All rows gathered on the driver as one :class:`CSRBatch` (small data only)."""
        from ._batch import concat
        from ._partition import Partition

        def rows(p: Partition) -> Any:
            return p.csr()

        assert self.client is not None
        parts = self.client.gather(self.map_partitions(rows))
        return concat(parts, self.n_features)

    def with_partitions(
        self, dataset_id: str, parts: list[Future], n_features: int, indexed: bool
    ) -> Dataset:
        """A persisted Dataset (id ``dataset_id``) over new partitions on the same workers."""
        out = Dataset.__new__(Dataset)
        out.__dict__.update(self.__dict__)
        out.id = dataset_id
        out.source = Derived(self.source, indexed, n_features)  # type: ignore[assignment]
        out._finalizer = None
        out._set_parts(self.client, parts, self._workers)  # type: ignore[arg-type]
        out._n_features = n_features
        out._set_info(out._describe(self.client))  # type: ignore[arg-type]
        return out

    def release(self) -> None:
        """Free the partitions and delete spilled files now.

        Returns once every worker has deleted its files.
        """
        if self._finalizer is not None:
            detached = self._finalizer.detach()
            self._finalizer = None
            if detached is not None:
                _, func, args, kwargs = detached
                func(*args, **kwargs, wait=True)
        self.partitions = []

    def __enter__(self) -> Dataset:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def __repr__(self) -> str:
        if not self.persisted:
            return f"Dataset<lazy, {type(self.source).__name__}, storage={self.storage}>"
        return (
            f"Dataset<{self.id}, {self.n_rows} rows x {self.n_features} features, "
            f"nnz={self.nnz}, {len(self.partitions)} partitions, storage={self.storage}>"
        )


def _holds_future(payload: Any) -> bool:
    """True if a piece's payload refers to Dask futures (a persisted collection)."""
    if isinstance(payload, Future):
        return True
    if isinstance(payload, tuple):
        return any(_holds_future(p) for p in payload)
    return any(isinstance(getattr(payload, f, None), Future) for f in ("x", "y"))
