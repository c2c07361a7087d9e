"""The tasks that build partitions on the workers: parse pieces, combine, finalise.

* :func:`build_piece` parses one split (a byte range or a line share of a file)
  block by block and stores the rows through a :class:`~._storage.ChunkSink`, so
  at most one block of text and its rows are in flight.  Bad lines are counted and
  described, never raised: a worker does not crash on bad data.
* :func:`combine` joins a task's pieces into its :class:`~._partition.Partition`
  (one CSR at the ``memory`` level: the rows are built once).
* :func:`finalize` applies what only the whole dataset reveals (1-based indices,
  the final ``n_features``) in place, without moving rows.

Example
-------
>>> import fsspec, numpy as np
>>> from daskangel.data._formats import Libsvm
>>> from daskangel.data._source import list_files, make_splits
>>> with fsspec.open("memory://build/a.txt", "wb") as f:
...     _ = f.write(b"1 1:1\\n-1 2:x\\n1 3:1\\n")
>>> spec = BuildSpec("ds-doc", Libsvm(), "memory", "collect", 10)
>>> piece = build_piece(spec, make_splits(list_files("memory://build/a.txt"), 1)[0], "p0")
>>> piece.report.counts, piece.report.details[0][:2]
({'non_numeric': 1}, (1, 'non_numeric'))
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from .. import config
from ._batch import CSRBatch, concat
from ._formats import transform_labels
from ._numbers import LINE_TOO_LONG, REASONS
from ._partition import Partition, worker_address
from ._report import SplitReport
from ._source import Split, align_groups, header_end, iter_blocks
from ._storage import Chunk, ChunkSink, DiskChunk, set_budget

__all__ = ["BuildSpec", "PieceResult", "build_piece", "combine", "describe", "finalize"]

_TEXT_LIMIT = 160


@dataclass(frozen=True, slots=True)
class BuildSpec:
    """What every piece of one dataset shares."""

    dataset_id: str
    fmt: Any
    level: str = "memory"
    errors: str = "raise"
    max_errors: int = 1000
    label_transform: str | None = None
    header_lines: int = 0
    memory_budget: int = 0
    # daskangel.data.* sizes read on the driver (workers may have other configs)
    block_bytes: int = 0
    max_line: int = 0
    chunk_bytes: int = 0

    @classmethod
    def sizes(cls) -> dict[str, int]:
        """The driver's ``block-bytes``, ``max-line-bytes`` and ``chunk-bytes``."""
        return {
            "block_bytes": config.get_bytes("daskangel.data.block-bytes"),
            "max_line": config.get_bytes("daskangel.data.max-line-bytes"),
            "chunk_bytes": config.get_bytes("daskangel.data.chunk-bytes"),
        }


@dataclass(frozen=True, slots=True)
class PieceResult:
    """The rows of one piece (chunks at the storage level) and its parse report."""

    chunks: list[Chunk]
    report: SplitReport
    lo: int
    hi: int
    stride: int = 1  # n: share k of n of a compressed file (lines L % n == k); 1: a run


def new_sink(spec: BuildSpec, name: str) -> ChunkSink:
    if spec.level == "memory_disk":
        set_budget(spec.dataset_id, spec.memory_budget)
    return ChunkSink(spec.level, spec.dataset_id, name, spec.chunk_bytes or None)


def _decode(b: bytes) -> str:
    s = b.decode("utf-8", errors="replace")
    return s if len(s) <= _TEXT_LIMIT else s[:_TEXT_LIMIT] + "..."


def _strip_header(data: np.ndarray, line0: int, header: int) -> tuple[np.ndarray, int]:
    """Drop the file's first ``header`` lines from a block that starts the file."""
    if line0 >= header or data.shape[0] == 0:
        return data, line0
    nl = np.flatnonzero(data == 10)
    k = header - line0
    if nl.shape[0] >= k:
        return data[int(nl[k - 1]) + 1 :], header
    partial = nl.shape[0] == 0 or int(nl[-1]) != data.shape[0] - 1
    return data[:0], line0 + nl.shape[0] + int(partial)


def build_piece(spec: BuildSpec, split: Split, name: str) -> PieceResult:
    """Parse one split into stored chunks (runs on a worker; never raises on bad data)."""
    sink = new_sink(spec, name)
    plain = split.file.compression is None
    max_line = spec.max_line or config.get_bytes("daskangel.data.max-line-bytes")
    if plain and spec.header_lines:
        # the file's first split owns the whole header (its lines count there)
        end = header_end(split.file, spec.header_lines)
        if split.start == 0:
            split = replace(split, stop=max(split.stop, end))
        elif split.start < end:
            split = replace(split, start=min(end, max(split.stop, end)), stop=max(split.stop, end))
    if plain and hasattr(spec.fmt, "group_key"):
        split = align_groups(split, spec.fmt.group_key, max_line, spec.header_lines)
    report = SplitReport(
        (split.file.url, split.file.order, split.start, split.share), 0, plain=plain
    )
    stop = spec.errors == "raise"
    detail = {"raise": 1, "skip": 0, "collect": spec.max_errors}[spec.errors]
    lo, hi = 2**62, -1
    header = spec.header_lines if split.start == 0 else 0
    for block in iter_blocks(split, spec.block_bytes or None, max_line):
        for line, text in block.long_lines:
            report.counts["line_too_long"] = report.counts.get("line_too_long", 0) + 1
            if len(report.details) < detail and (
                split.shares == 1 or line % split.shares == split.share
            ):
                report.details.append((line, REASONS[LINE_TOO_LONG], "", _decode(text)))
        if stop and report.counts:
            report.stopped = True
            break
        data, line0 = _strip_header(block.data, block.line0, header)
        if data.shape[0] == 0:
            report.n_lines = max(report.n_lines, line0)
            continue
        left = max(0, detail - len(report.details))
        parsed = spec.fmt.parse(data, line0, split, stop, left, max_line)
        report.n_lines = line0 + parsed.n_lines
        report.add_counts(parsed.counts)
        if parsed.err.shape[0]:
            raw = data.tobytes()
            for ln, ls, ts, te, reason in parsed.err.tolist():
                le = raw.find(b"\n", ls)
                text = raw[ls : le if le >= 0 else len(raw)]
                report.details.append(
                    (line0 + ln, REASONS[reason], _decode(raw[ts:te]), _decode(text))
                )
        lo, hi = min(lo, int(parsed.stats[0])), max(hi, int(parsed.stats[1]))
        if parsed.stats[2]:
            n, first = report.at_limit
            report.at_limit = (
                n + int(parsed.stats[2]),
                first if first >= 0 else int(parsed.stats[3]),
            )
        if parsed.batch is not None:
            b = parsed.batch
            if spec.label_transform is not None:
                b = replace(b, labels=transform_labels(b.labels, spec.label_transform))
            sink.add(b)
        if parsed.stopped:
            report.stopped = True
            break
    stride = split.shares if not plain and split.shares > 1 else 1
    return PieceResult(sink.finish(), report, lo, hi, stride)


def combine(spec: BuildSpec, index: int, indexed: bool, *pieces: PieceResult) -> Partition:
    """Join a task's pieces into its partition (one CSR at the ``memory`` level)."""
    chunks: list[Chunk] = [c for p in pieces for c in p.chunks]
    origin = tuple((sum(c.n_rows for c in p.chunks), p.stride) for p in pieces)
    nf = max([c.n_features for c in chunks], default=0)
    if spec.level == "memory" and len(chunks) > 1:
        chunks = [concat([c for c in chunks if isinstance(c, CSRBatch)], nf)]
    lo = min([p.lo for p in pieces if p.hi >= 0], default=0)
    hi = max([p.hi + 1 for p in pieces if p.hi >= 0], default=0)
    return Partition(
        spec.dataset_id,
        index,
        spec.level,
        chunks,
        nf,
        indexed,
        worker_address(),
        [p.report for p in pieces],
        (lo, hi),
        origin=origin,
    )


def finalize(part: Partition, shift: int, n_features: int) -> Partition:
    """Shift indices down by ``shift`` (a 1-based file) and set ``n_features``, in place.

    Memory chunks are shifted in place (no copy); disk chunks record the shift and
    apply it when read.
    """
    chunks: list[Chunk] = []
    for c in part.chunks:
        if isinstance(c, CSRBatch):
            if shift:
                np.subtract(c.indices, c.indices.dtype.type(shift), out=c.indices)
            chunks.append(c.with_features(n_features))
        else:
            assert isinstance(c, DiskChunk)
            chunks.append(replace(c, shift=c.shift + shift, n_features=n_features))
    lo, hi = part.col_range
    rng = (lo - shift, hi - shift) if hi > lo else (0, 0)
    return Partition(
        part.dataset_id,
        part.index,
        part.level,
        chunks,
        n_features,
        part.indexed,
        part.worker,
        part.reports,
        rng,
        origin=part.origin,
    )


def describe(part: Partition) -> dict[str, Any]:
    """The small facts the driver needs about a partition (its rows stay put)."""
    return {
        "index": part.index,
        "worker": part.worker,
        "n_rows": part.n_rows,
        "nnz": part.nnz,
        "n_features": part.n_features,
        "col_range": part.col_range,
        "memory_nbytes": part.memory_nbytes,
        "disk_nbytes": part.disk_nbytes,
        "level": part.level,
        "indexed": part.indexed,
        "reports": part.reports,
        "origin": part.origin,
    }
