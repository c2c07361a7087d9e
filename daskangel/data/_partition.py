"""Partition: one piece of a Dataset, held by its worker for the whole training.

A :class:`Partition` is what a training task receives: the rows of its share of
the data, stored at a storage level (see :mod:`._storage`), with one reader for
every level: :meth:`Partition.batches` yields minibatches of ``batch_size`` rows
as :class:`~._batch.CSRBatch`, in file order or shuffled per epoch with a seed,
as many passes as wanted.

Example
-------
>>> import numpy as np
>>> from daskangel.data._batch import CSRBatch
>>> rows = CSRBatch.from_arrays(np.arange(6), np.arange(5), np.ones(5), np.arange(5), 5)
>>> p = Partition("ds", 0, "memory", [rows], 5, True, "local")
>>> [b.labels.tolist() for b in p.batches(2)]
[[0.0, 1.0], [2.0, 3.0], [4.0]]
>>> sorted(np.concatenate([b.labels for b in p.batches(2, shuffle=True, seed=1)]).tolist())
[0.0, 1.0, 2.0, 3.0, 4.0]
>>> half = p.member_share(1, 2, "horizontal").settle()  # rank 1 of a group of 2
>>> half.share, half.csr().labels.tolist()
(Share(placement='horizontal', rank=1, size=2, lo=2, hi=5), [2.0, 3.0, 4.0])
>>> p.member_share(0, 2, "vertical").settle().csr().indices.tolist()  # features [0, 2)
[0, 1]
"""

from __future__ import annotations

import contextlib
import os
import uuid
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
from dask.sizeof import sizeof

from .. import config
from ..errors import InvalidArgumentError
from ._batch import CSRBatch, DenseBatch, concat, rebatch
from ._storage import Chunk, ChunkSink, DiskChunk, load_chunk

__all__ = ["Partition", "Share", "Transit"]

SHARES = ("replicated", "horizontal", "vertical")


@dataclass(frozen=True, slots=True)
class Share:
    """Which share of its group's partition a member of a training group holds.

    ``horizontal``: rows ``[lo, hi)`` of the partition; ``vertical``: every row,
    only the entries of features ``lo <= index < hi`` (indices stay global);
    ``replicated``: everything (``lo, hi`` = ``0, n_rows``).
    """

    placement: str
    rank: int
    size: int
    lo: int
    hi: int


class Partition:
    """The rows of one partition, on its worker (see the module docstring).

    Attributes
    ----------
    index
        Position of the partition in its Dataset.
    level
        ``"memory"``, ``"disk"`` or ``"memory_disk"``.
    n_rows, nnz, n_features
        Rows, stored entries and the dataset's number of features.
    col_range
        ``(min, max + 1)`` of the feature indices present (``(0, 0)`` if none).
    indexed
        ``False`` while indices are raw 63-bit hashed keys awaiting the feature
        indexer (:class:`~daskangel.data.FeatureIndexer`).
    worker
        Address of the worker holding the partition.
    share
        ``None`` for a whole partition; for a member of a training group, which
        :class:`Share` of its group's partition it holds (see :meth:`member_share`).
    """

    __slots__ = (
        "__weakref__",  # caches of derived data (models._core._cache) follow the partition's life
        "chunks",
        "col_range",
        "dataset_id",
        "index",
        "indexed",
        "level",
        "n_features",
        "n_rows",
        "nnz",
        "origin",
        "reports",
        "share",
        "worker",
    )

    def __init__(
        self,
        dataset_id: str,
        index: int,
        level: str,
        chunks: list[Chunk],
        n_features: int,
        indexed: bool,
        worker: str,
        reports: list[Any] | None = None,
        col_range: tuple[int, int] | None = None,
        share: Share | None = None,
        origin: tuple[tuple[int, int], ...] | None = None,
    ) -> None:
        self.dataset_id = dataset_id
        self.index = index
        self.level = level
        self.chunks = chunks
        self.n_features = int(n_features)
        self.indexed = indexed
        self.worker = worker
        self.reports = reports or []
        self.n_rows = sum(c.n_rows for c in chunks)
        self.nnz = sum(c.nnz for c in chunks)
        if col_range is None:
            col_range = _col_range(chunks)
        self.col_range = col_range
        self.share = share
        # (rows, stride) of each piece, in order (see data._positions); None: unknown
        self.origin = origin

    # -- sizes --------------------------------------------------------------------------

    @property
    def memory_nbytes(self) -> int:
        """Bytes of rows held in memory."""
        return sum(c.nbytes for c in self.chunks if isinstance(c, CSRBatch))

    @property
    def disk_nbytes(self) -> int:
        """Bytes of rows spilled to this worker's local disk."""
        return sum(c.nbytes for c in self.chunks if isinstance(c, DiskChunk))

    # -- reading ------------------------------------------------------------------------

    def _load(self, c: Chunk) -> CSRBatch:
        if isinstance(c, DiskChunk) and not os.path.exists(c.path):
            raise FileNotFoundError(
                f"partition {self.index}: its spilled rows live on worker {self.worker} "
                f"({c.path}); a partition must be read on the worker holding it"
            )
        return load_chunk(c).with_features(self.n_features)

    def pieces(self) -> list[CSRBatch]:
        """Every chunk as a CSRBatch, in order, not concatenated (a disk level reads each)."""
        return [self._load(c) for c in self.chunks]

    def csr(self) -> CSRBatch:
        """Every row as one CSRBatch (a disk level reads all of it into memory)."""
        if not self.chunks:
            return CSRBatch.empty(self.n_features)
        return concat([self._load(c) for c in self.chunks], self.n_features)

    def _pieces(
        self, batch_size: int, shuffle: bool, seed: int, epoch: int, window: int | None
    ) -> Iterator[CSRBatch]:
        n = len(self.chunks)
        if not shuffle:
            for c in self.chunks:
                yield self._load(c)
            return
        rng = np.random.default_rng([int(seed) & 0xFFFFFFFF, int(epoch), self.index])
        order = rng.permutation(n)
        w = max(1, int(window or config.get("daskangel.data.shuffle-window")))
        for s in range(0, n, w):
            loaded = [self._load(self.chunks[i]) for i in order[s : s + w]]
            rows = loaded[0] if len(loaded) == 1 else concat(loaded, self.n_features)
            del loaded
            perm = rng.permutation(rows.n_rows)
            for k in range(0, rows.n_rows, batch_size):
                yield rows.take(perm[k : k + batch_size])

    def batches(
        self,
        batch_size: int,
        *,
        shuffle: bool = False,
        seed: int = 0,
        epoch: int = 0,
        window: int | None = None,
    ) -> Iterator[CSRBatch]:
        """Minibatches of ``batch_size`` rows (the last may be smaller), one pass.

        With ``shuffle`` the order is a pseudo-random function of ``(seed, epoch,
        partition index)``: call with ``epoch=e`` for pass ``e``.

        .. warning::
           At the ``memory`` level a shuffled pass is a full permutation of the
           partition's rows.  At ``disk`` and ``memory_disk`` it permutes the order
           of the chunks (about ``daskangel.data.chunk-bytes`` each) and the rows
           inside windows of ``daskangel.data.shuffle-window`` chunks, so that only
           a window is in memory: rows far apart in the file never share a batch
           unless their chunks share a window.  ``window`` overrides that config
           key (read on the worker).
        """
        if batch_size < 1:
            raise InvalidArgumentError(
                f"batch_size: expected a positive integer, got {batch_size!r}"
            )
        return rebatch(self._pieces(int(batch_size), shuffle, seed, epoch, window), int(batch_size))

    # -- rewriting ------------------------------------------------------------------------

    def map_chunks(
        self,
        fn: Callable[[CSRBatch], CSRBatch],
        sink: Any,
        n_features: int | None = None,
        indexed: bool | None = None,
    ) -> Partition:
        """A new partition with ``fn`` applied to every chunk, stored through ``sink``."""
        lo, hi = None, None
        for c in self.chunks:
            out = fn(self._load(c))
            if out.nnz:
                a = out.indices[out.indptr[0] : out.indptr[-1]]
                lo = int(a.min()) if lo is None else min(lo, int(a.min()))
                hi = int(a.max()) + 1 if hi is None else max(hi, int(a.max()) + 1)
            sink.add(out)
        return Partition(
            self.dataset_id,
            self.index,
            self.level,
            sink.finish(),
            self.n_features if n_features is None else n_features,
            self.indexed if indexed is None else indexed,
            self.worker,
            self.reports,
            (lo or 0, hi or 0),
            self.share,
            self.origin,
        )

    # -- sharing among the members of a training group ------------------------------------

    def member_share(self, rank: int, size: int, placement: str) -> Transit:
        """Member ``rank`` of ``size``'s share of the rows, read on this worker.

        Angel's hybrid parallelism: a group of ``size`` tasks shares one partition,
        ``"horizontal"`` by rows (member ``r`` gets rows ``[r n / size, (r + 1) n /
        size)``), ``"vertical"`` by features (every row, only the entries of features
        ``[r F / size, (r + 1) F / size)``, indices kept global, so they address the
        model's columns directly) or ``"replicated"`` (all of it).  Only the share is
        read (a disk chunk outside it is not touched) and returned in memory as a
        :class:`Transit`, which the member's worker stores with :meth:`Transit.settle`.
        """
        if placement not in SHARES:
            raise InvalidArgumentError(f"placement: expected one of {SHARES}, got {placement!r}")
        if not 0 <= rank < size:
            raise InvalidArgumentError(f"rank: expected 0 <= rank < {size}, got {rank!r}")
        chunks: list[CSRBatch] = []
        spill: list[bool] = []
        if placement == "vertical":
            lo, hi = rank * self.n_features // size, (rank + 1) * self.n_features // size
            for c in self.chunks:
                chunks.append(self._load(c).select_columns(lo, hi))
                spill.append(isinstance(c, DiskChunk))
        else:
            lo, hi = 0, self.n_rows
            if placement == "horizontal":
                lo, hi = rank * self.n_rows // size, (rank + 1) * self.n_rows // size
            start = 0
            for c in self.chunks:
                a, b = max(lo, start), min(hi, start + c.n_rows)
                if a < b:  # chunks outside the share are never read
                    rows = self._load(c)
                    whole = b - a == c.n_rows
                    chunks.append(rows if whole else rows.slice(a - start, b - start))
                    spill.append(isinstance(c, DiskChunk))
                start += c.n_rows
        part = Partition(
            self.dataset_id,
            self.index,
            self.level,
            list(chunks),
            self.n_features,
            self.indexed,
            self.worker,
            self.reports,
            share=Share(placement, int(rank), int(size), lo, hi),
        )
        return Transit(part, tuple(spill))

    def __repr__(self) -> str:
        return (
            f"Partition<{self.index} of {self.dataset_id}, {self.n_rows} rows, nnz={self.nnz}, "
            f"{self.level}, on {self.worker}>"
        )


@dataclass(frozen=True, slots=True)
class Transit:
    """A member's share on its way to the member's worker: rows in memory, and
    which of them were spilled to disk where they came from."""

    partition: Partition
    spill: tuple[bool, ...]

    def settle(self) -> Partition:
        """The share as a partition of the worker running this (a task on the
        member's worker): chunks that were on disk are written to this worker's
        disk again (the file is deleted with the partition), the others stay in
        memory, so each chunk keeps its storage level."""
        p = self.partition
        chunks: list[Chunk] = []
        sink = None
        if any(self.spill):
            name = f"share-{p.index}-{uuid.uuid4().hex[:8]}"
            sink = ChunkSink("disk", p.dataset_id, name)
        for c, spill in zip(p.chunks, self.spill, strict=True):
            assert isinstance(c, CSRBatch)
            if sink is None or not spill:
                chunks.append(c)
                continue
            before = len(sink.chunks)
            sink.add(c)
            chunks.extend(sink.chunks[before:])
        if sink is not None:
            sink.finish()
        out = Partition(
            p.dataset_id,
            p.index,
            p.level,
            chunks,
            p.n_features,
            p.indexed,
            worker_address(),
            p.reports,
            share=p.share,
        )
        if sink is not None and sink.chunks:
            path = sink.chunks[0].path  # type: ignore[union-attr]
            weakref.finalize(out, _remove, path)
        return out


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):  # the dataset's directory may be gone (released)
        os.remove(path)


def worker_address() -> str:
    try:
        from distributed import get_worker

        return str(get_worker().address)
    except ValueError:
        return "local"


def _col_range(chunks: list[Chunk]) -> tuple[int, int]:
    lo, hi = None, None
    for c in chunks:
        if isinstance(c, CSRBatch) and c.nnz:
            if isinstance(c, DenseBatch):  # every column stored
                cl, ch = 0, int(c.X.shape[1])
            else:
                a = c.indices[c.indptr[0] : c.indptr[-1]]
                cl, ch = int(a.min()), int(a.max()) + 1
            lo = cl if lo is None else min(lo, cl)
            hi = ch if hi is None else max(hi, ch)
    return (lo or 0, hi or 0)


@sizeof.register(Partition)
def _sizeof_partition(p: Partition) -> int:
    # Dask's memory accounting sees only the rows held in memory
    return p.memory_nbytes + 1024
