"""Storage levels on a worker: where a partition's rows live between passes.

Angel keeps training data inside the worker that reads it, at one of three levels,
behind one reader:

* ``"memory"``: one CSR array set in memory (fastest).
* ``"disk"``: rows serialised in chunks to files under the worker's local
  directory and read back sequentially, one window of chunks at a time; only the
  window is in memory.
* ``"memory_disk"``: chunks stay in memory while the worker's budget for the
  dataset (``memory_budget`` bytes, shared by every partition of that dataset on
  the worker) lasts; the rest spill to disk.

A :class:`ChunkSink` receives parsed chunks and stores them at a level; the
budget ledger is per worker process (``_BUDGETS``).

Example
-------
>>> import numpy as np
>>> from daskangel.data._batch import CSRBatch
>>> sink = ChunkSink("disk", "ds-doc", "p0")
>>> sink.add(CSRBatch.from_arrays([0, 1, 2], [3, 1], [1.0, 2.0], [0.0, 1.0], 4))
>>> chunks = sink.finish()
>>> load_chunk(chunks[0]).indices.tolist()
[3, 1]
>>> release_dataset("ds-doc")
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import config
from ..errors import InvalidArgumentError
from ._batch import CSRBatch

__all__ = [
    "LEVELS",
    "Chunk",
    "ChunkSink",
    "DiskChunk",
    "data_dir",
    "load_chunk",
    "release_dataset",
    "set_budget",
]

LEVELS = ("memory", "disk", "memory_disk")

_lock = threading.Lock()
# {dataset_id: bytes still free for in-memory chunks on this worker}
_BUDGETS: dict[str, int] = {}


@dataclass(frozen=True, slots=True)
class DiskChunk:
    """Rows serialised at ``offset`` of ``path``: indptr, indices, data, labels,
    row_ids (if any), one after the other.  ``shift`` is subtracted from indices
    when read (a 1-based file detected after the chunk was written)."""

    path: str
    offset: int
    n_rows: int
    nnz: int
    index_dtype: str
    has_row_ids: bool
    n_features: int
    shift: int = 0

    @property
    def nbytes(self) -> int:
        isz = np.dtype(self.index_dtype).itemsize
        return (
            (self.n_rows + 1) * 8
            + self.nnz * (isz + 4)
            + self.n_rows * (4 + (8 if self.has_row_ids else 0))
        )


Chunk = CSRBatch | DiskChunk


def data_dir(dataset_id: str) -> str:
    """Directory for a dataset's spilled chunks on this worker (created on demand)."""
    path = os.path.join(_base_dir(), "daskangel-data", dataset_id)
    os.makedirs(path, exist_ok=True)
    return path


def set_budget(dataset_id: str, nbytes: int) -> None:
    """Set this worker's in-memory budget for a ``memory_disk`` dataset (once)."""
    with _lock:
        _BUDGETS.setdefault(dataset_id, int(nbytes))


def _claim(dataset_id: str, nbytes: int) -> bool:
    with _lock:
        free = _BUDGETS.get(dataset_id, 0)
        if nbytes <= free:
            _BUDGETS[dataset_id] = free - nbytes
            return True
        return False


def _base_dir(worker: Any = None) -> str:
    if worker is None:
        try:
            from distributed import get_worker

            worker = get_worker()
        except ValueError:
            return os.path.join(tempfile.gettempdir(), f"daskangel-{os.getpid()}")
    return str(worker.local_directory)


def release_dataset(dataset_id: str, dask_worker: Any = None) -> None:
    """Forget the budget and delete the spilled files of a dataset on this worker.

    Run on every worker with ``client.run(release_dataset, id)`` (which passes
    ``dask_worker``).
    """
    with _lock:
        _BUDGETS.pop(dataset_id, None)
    shutil.rmtree(
        os.path.join(_base_dir(dask_worker), "daskangel-data", dataset_id), ignore_errors=True
    )


class ChunkSink:
    """Stores parsed chunks of one piece at a storage level (see the module docstring)."""

    def __init__(
        self, level: str, dataset_id: str, name: str, chunk_bytes: int | None = None
    ) -> None:
        if level not in LEVELS:
            raise InvalidArgumentError(f"storage: expected one of {LEVELS}, got {level!r}")
        self.level = level
        self.dataset_id = dataset_id
        self.name = name
        self.chunk_bytes = chunk_bytes or config.get_bytes("daskangel.data.chunk-bytes")
        self.chunks: list[Chunk] = []
        self._file: Any = None
        self._path = ""
        self._offset = 0

    def add(self, batch: CSRBatch) -> None:
        """Take a parsed block's rows; chunks of about ``daskangel.data.chunk-bytes``."""
        if batch.n_rows == 0:
            return
        if self.level == "memory":
            self.chunks.append(batch)
            return
        limit = self.chunk_bytes
        if batch.nbytes > limit and batch.n_rows > 1:
            per = max(1, int(batch.n_rows * limit / batch.nbytes))
            for s in range(0, batch.n_rows, per):
                self.add(batch.slice(s, min(batch.n_rows, s + per)))
            return
        if self.level == "memory_disk" and _claim(self.dataset_id, batch.nbytes):
            self.chunks.append(batch.compact())
        else:
            self.chunks.append(self._write(batch))

    def _write(self, b: CSRBatch) -> DiskChunk:
        if self._file is None:
            self._path = os.path.join(data_dir(self.dataset_id), f"{self.name}.bin")
            self._file = open(self._path, "wb")  # noqa: SIM115 - closed in finish()
        start = self._offset
        for arr in (
            b.indptr - b.indptr[0],
            b.indices[b.indptr[0] : b.indptr[-1]],
            b.data[b.indptr[0] : b.indptr[-1]],
            b.labels,
            b.row_ids,
        ):
            if arr is None:
                continue
            a = np.ascontiguousarray(arr)
            a.tofile(self._file)
            self._offset += a.nbytes
        return DiskChunk(
            self._path,
            start,
            b.n_rows,
            b.nnz,
            b.indices.dtype.name,
            b.row_ids is not None,
            b.n_features,
        )

    def finish(self) -> list[Chunk]:
        if self._file is not None:
            self._file.close()
            self._file = None
        return self.chunks


def load_chunk(c: Chunk) -> CSRBatch:
    """The rows of a chunk in memory (a disk chunk is read sequentially)."""
    if isinstance(c, CSRBatch):
        return c
    with open(c.path, "rb") as f:
        f.seek(c.offset)
        indptr = np.fromfile(f, np.int64, c.n_rows + 1)
        indices = np.fromfile(f, np.dtype(c.index_dtype), c.nnz)
        data = np.fromfile(f, np.float32, c.nnz)
        labels = np.fromfile(f, np.float32, c.n_rows)
        rid = np.fromfile(f, np.int64, c.n_rows) if c.has_row_ids else None
    if c.shift:
        indices -= indices.dtype.type(c.shift)
    return CSRBatch(indptr, indices, data, labels, c.n_features, rid)
