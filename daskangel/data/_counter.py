"""Angel's distributed counter, as a feature indexer on the PS: WRITE -> READ -> CLEAN.

Raw categorical logs become dummy variables without a shuffle:

1. **WRITE** - each worker counts the raw keys of *its own* partitions (63-bit
   hashes of strings, or non-negative integers), merges the counts of all its
   partitions locally, and pushes one sparse increment to a hash-partitioned
   count array on the PS (:meth:`FeatureIndexer.count`, or
   :meth:`FeatureIndexer.increment` from any task).
2. :meth:`FeatureIndexer.aggregate` is the barrier: every key with
   ``count >= min_count`` gets a dense index, assigned on the servers holding the
   keys (server ops ``count_selected`` / ``rank_into``); no key list crosses the
   network.  **READ**: :meth:`get_with_index` and :meth:`transform`, which rewrites
   each partition on its own worker (pulling only the indices of the keys it
   holds), so the training rows never move.
3. :meth:`clean` frees the PS arrays (**CLEAN**).

Example
-------
>>> ds = angel.data.read_text("s3://logs/*.txt").persist()      # doctest: +SKIP
>>> idx = angel.data.FeatureIndexer(ps)                          # doctest: +SKIP
>>> idx.count(ds); idx.aggregate(min_count=5)                    # doctest: +SKIP
>>> indexed = idx.transform(ds); idx.clean()                     # doctest: +SKIP
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from typing import Any

import numpy as np

from .. import config
from ..errors import InvalidArgumentError, InvalidStateError
from ..psarray import HashPartitioner, PSArray
from ..psarray._taskclock import current_fence
from ._batch import CSRBatch
from ._dataset import Dataset
from ._formats import HASH_SPACE
from ._partition import Partition
from ._storage import ChunkSink, set_budget
from ._tabular import hash_keys

__all__ = ["FeatureIndexer"]

STATES = ("WRITE", "READ", "CLEAN")


def _unique_counts(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return np.unique(keys, return_counts=True)


def _local_counts(parts: tuple[Partition, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Distinct keys and their counts over partitions on this worker (chunk by chunk)."""
    ks: list[np.ndarray] = []
    cs: list[np.ndarray] = []
    for p in parts:
        for c in p.chunks:
            b = p._load(c)
            k, n = _unique_counts(b.indices[b.indptr[0] : b.indptr[-1]].astype(np.int64))
            ks.append(k)
            cs.append(n)
    if not ks:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    keys = np.concatenate(ks)
    cnts = np.concatenate(cs).astype(np.int64)
    uniq, inv = np.unique(keys, return_inverse=True)
    return uniq, np.bincount(inv, weights=cnts, minlength=uniq.shape[0]).astype(np.int64)


def _count_task(count_name: str, *parts: Partition) -> int:
    """WRITE on a worker: merge the counts of its partitions, one push to the PS."""
    keys, cnts = _local_counts(parts)
    if keys.shape[0]:
        PSArray(count_name).increment(cnts, cols=keys)
    return int(keys.shape[0])


def _index_task(
    part: Partition,
    index_name: str,
    new_id: str,
    level: str,
    budget: int,
    n_indexed: int,
    chunk_bytes: int,
) -> Partition:
    """READ on a worker: rewrite one partition's raw keys to dense indices, in place."""
    keys, _ = _local_counts((part,))
    idx = PSArray(index_name).get(cols=keys).astype(np.int64) - 1 if keys.shape[0] else keys

    def rewrite(b: CSRBatch) -> CSRBatch:
        raw = b.indices[b.indptr[0] : b.indptr[-1]].astype(np.int64)
        new = idx[np.searchsorted(keys, raw)]
        keep = new >= 0
        row = np.repeat(np.arange(b.n_rows), np.diff(b.indptr))
        indptr = np.concatenate([[0], np.cumsum(np.bincount(row[keep], minlength=b.n_rows))])
        dt = np.int32 if n_indexed <= np.iinfo(np.int32).max else np.int64
        return CSRBatch(
            indptr.astype(np.int64),
            new[keep].astype(dt),
            b.data[b.indptr[0] : b.indptr[-1]][keep],
            b.labels,
            n_indexed,
            b.row_ids,
        )

    if level == "memory_disk":
        set_budget(new_id, budget)
    sink = ChunkSink(level, new_id, f"p{part.index}", chunk_bytes)
    out = part.map_chunks(rewrite, sink, n_features=n_indexed, indexed=True)
    out.dataset_id = new_id
    if level == "memory" and len(out.chunks) > 1:
        from ._batch import concat

        out.chunks = [concat([c for c in out.chunks if isinstance(c, CSRBatch)], n_indexed)]
    return out


class FeatureIndexer:
    """A distributed counter on the PS that gives raw keys dense indices.

    Parameters
    ----------
    ps
        The :class:`~daskangel.PSContext` holding the counts.
    name
        Prefix of the PS arrays (``<name>.count``, ``<name>.index``).
    n_blocks
        Hash blocks of the key space (default: ``blocks-per-server`` per server).
    """

    def __init__(self, ps: Any, name: str | None = None, n_blocks: int | None = None) -> None:
        self.ps = ps
        self.name = name or f"indexer-{uuid.uuid4().hex[:8]}"
        self.state = "WRITE"
        per = int(config.get("daskangel.partition.blocks-per-server"))
        part = HashPartitioner(n_blocks or max(1, per * len(ps.servers)))
        self.counts = ps.zeros(
            f"{self.name}.count", HASH_SPACE, "int64", sparse=True, partitioner=part
        )
        self.index: PSArray | None = None
        self.n_indexed = 0

    def _need(self, state: str) -> None:
        if self.state != state:
            raise InvalidStateError(
                f"FeatureIndexer {self.name!r} is in state {self.state}; this needs {state}"
            )

    # -- WRITE --------------------------------------------------------------------------

    def increment(self, keys: Any, counts: Any = None, field: str | None = None) -> None:
        """Add counts for raw keys (strings or ints, hashed with :func:`hash_keys`)."""
        self._need("WRITE")
        k = hash_keys(keys, field)
        c = np.ones(k.shape[0], np.int64) if counts is None else np.asarray(counts, np.int64)
        uniq, inv = np.unique(k, return_inverse=True)
        self.counts.increment(np.bincount(inv, weights=c).astype(np.int64), cols=uniq)

    def count(self, dataset: Dataset) -> int:
        """Count every key of a persisted raw-key dataset: one merged push per worker.

        Returns the number of (worker, key) pairs pushed.
        """
        self._need("WRITE")
        by_worker: dict[str, list[Any]] = defaultdict(list)
        for f, w in zip(dataset.partitions, dataset.workers, strict=True):
            by_worker[w].append(f)
        client = dataset.client
        assert client is not None
        futs = [
            client.submit(
                _count_task,
                self.counts.name,
                *fs,
                workers=[w],
                allow_other_workers=False,
                pure=False,
            )
            for w, fs in by_worker.items()
        ]
        return int(sum(client.gather(futs)))

    # -- barrier ------------------------------------------------------------------------

    def aggregate(self, min_count: int = 1) -> int:
        """Barrier: give every key with ``count >= min_count`` a dense index; -> READ.

        Indices run over ``0 .. n-1`` in (hash block, key) order.  Returns ``n``.
        """
        self._need("WRITE")
        if int(min_count) < 1:
            raise InvalidArgumentError(f"min_count: expected an integer >= 1, got {min_count!r}")
        b = self.ps.binding
        n_blocks = self.counts.meta.layout.n_blocks
        parts = {blk: {"block": blk} for blk in range(n_blocks)}
        th = {"threshold": int(min_count)}
        sel = b.run(b.call_blocks, self.counts.name, "count_selected", parts, {}, th)
        offsets = np.concatenate([[0], np.cumsum([sel[k] for k in range(n_blocks)])])
        self.index = self.ps.zeros_like(self.counts, f"{self.name}.index")
        parts = {blk: {"block": blk, "offset": int(offsets[blk])} for blk in range(n_blocks)}
        # a write of the index like any other: it waits for a hold on its blocks and
        # carries the caller's run (none on the driver; see psarray/_rank.py)
        extra = {
            "dst": self.index.name,
            "written": [self.index.name],
            "fence": current_fence(),
            **th,
        }
        b.run(b.call_blocks, self.counts.name, "rank_into", parts, {}, extra)
        self.n_indexed = int(offsets[-1])
        self.state = "READ"
        return self.n_indexed

    # -- READ ---------------------------------------------------------------------------

    def get_with_index(self, keys: Any, field: str | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``(counts, indices)`` of raw keys; index -1 for keys not indexed."""
        self._need("READ")
        assert self.index is not None
        k = hash_keys(keys, field)
        return self.counts.get(cols=k), self.index.get(cols=k).astype(np.int64) - 1

    def transform(self, dataset: Dataset) -> Dataset:
        """The dataset with raw keys replaced by dense indices (keys not indexed are
        dropped), each partition rewritten on its own worker at the same storage level."""
        self._need("READ")
        assert self.index is not None and dataset.client is not None
        new_id = f"ds-{uuid.uuid4().hex[:12]}"
        futs = [
            dataset.client.submit(
                _index_task,
                f,
                self.index.name,
                new_id,
                dataset.storage,
                dataset.memory_budget,
                self.n_indexed,
                config.get_bytes("daskangel.data.chunk-bytes"),
                workers=[w],
                allow_other_workers=False,
                pure=False,
                key=f"daskangel-data-{new_id}-part-{i}",
            )
            for i, (f, w) in enumerate(zip(dataset.partitions, dataset.workers, strict=True))
        ]
        return dataset.with_partitions(new_id, futs, self.n_indexed, True)

    # -- CLEAN --------------------------------------------------------------------------

    def clean(self) -> None:
        """Free the PS arrays (CLEAN)."""
        if self.state == "CLEAN":
            return
        self.ps.drop(self.counts.name)
        if self.index is not None:
            self.ps.drop(self.index.name)
        self.state = "CLEAN"

    def __repr__(self) -> str:
        return f"FeatureIndexer<{self.name!r}, {self.state}, {self.n_indexed} indexed>"
