"""What a Dataset reads from: sources, the pieces they are cut into, facts about
persisted partitions, and the clean-up that runs when a dataset is released.

A :class:`Source` cuts its input into :class:`Piece` s (with the workers already
holding each, for the locality half of Angel's greedy) and submits the task that
parses one piece on a given worker.  :class:`FileSource` reads text files; the
in-memory sources live in :mod:`._inmemory`.

Example
-------
>>> Piece(1024, frozenset({"tcp://w1:1234"}), "split-0").size
1024
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from dask.utils import parse_bytes
from distributed import Client, Future

from ..errors import InvalidArgumentError
from ._build import BuildSpec, build_piece
from ._source import FileInfo, Split, make_splits
from ._storage import release_dataset

__all__ = ["FileSource", "PartitionInfo", "Piece", "Source"]


@dataclass(frozen=True, slots=True)
class Piece:
    """A unit of input to parse: its cost in bytes, workers holding it, what it is."""

    size: int
    holders: frozenset[str]
    payload: Any


class Source(Protocol):
    """Where a Dataset's rows come from (files, in-memory arrays, dask collections)."""

    @property
    def indexed(self) -> bool: ...  # False: indices are raw hashed keys

    @property
    def base(self) -> int: ...  # -1: detect 0/1-based from the data; 0 or 1: known

    @property
    def n_features(self) -> int: ...  # declared, or -1

    def pieces(self, client: Client, n_tasks: int) -> list[Piece]: ...

    def submit(
        self, client: Client, piece: Piece, spec: BuildSpec, worker: str, key: str
    ) -> Future: ...


@dataclass(frozen=True, slots=True)
class FileSource:
    """Text files read through fsspec with a format from :mod:`._formats`."""

    files: tuple[FileInfo, ...]
    fmt: Any
    header_lines: int = 0
    base: int = 0
    n_features: int = -1

    @property
    def indexed(self) -> bool:
        return bool(self.fmt.indexed)

    def pieces(self, client: Client, n_tasks: int) -> list[Piece]:
        return [Piece(s.size, frozenset(), s) for s in make_splits(list(self.files), n_tasks)]

    def submit(
        self, client: Client, piece: Piece, spec: BuildSpec, worker: str, key: str
    ) -> Future:
        split: Split = piece.payload
        return client.submit(
            build_piece,
            spec,
            split,
            key,
            key=key,
            workers=[worker],
            allow_other_workers=False,
            pure=False,
        )


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """Facts about one persisted partition (its rows stay on ``worker``)."""

    index: int
    worker: str
    n_rows: int
    nnz: int
    col_range: tuple[int, int]
    memory_nbytes: int
    disk_nbytes: int


def budget_bytes(storage: str, memory_budget: Any) -> int:
    if storage != "memory_disk":
        return 0
    if memory_budget is None:
        raise InvalidArgumentError(
            "memory_budget: storage='memory_disk' needs a budget in bytes per worker"
        )
    b = parse_bytes(memory_budget) if isinstance(memory_budget, str) else int(memory_budget)
    if b < 0:
        raise InvalidArgumentError(
            f"memory_budget: expected a non-negative size, got {memory_budget!r}"
        )
    return int(b)


@dataclass(frozen=True, slots=True)
class Derived:
    """The source of a dataset rewritten from another one (e.g. indexed features)."""

    parent: Any
    indexed: bool
    n_features: int
    base: int = 0

    @property
    def fmt(self) -> Any:
        return getattr(self.parent, "fmt", None)


async def _release_async(dataset_id: str, dask_worker: Any = None) -> None:
    release_dataset(dataset_id, dask_worker)


def cleanup(client: Client, dataset_id: str, parts: list[Future], wait: bool = False) -> None:
    """Release a dataset's partitions and delete its spilled files on every worker.

    The garbage collector calls it with ``wait=False`` (it must not block); an
    explicit :meth:`Dataset.release` waits until every worker has deleted its
    files, so a caller may reuse the disk space at once.
    """
    for p in parts:
        p.release()
    try:
        if client.status == "running":
            client.run(_release_async, dataset_id, wait=wait and not client.asynchronous)
    except Exception:  # noqa: BLE001 - best effort at garbage collection
        pass
