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
from .._compat import training_workers
from ..errors import InvalidArgumentError, InvalidStateError
from ._assign import task_workers
from ._building import PartitionBuilder
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


class Dataset(PartitionBuilder):
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
