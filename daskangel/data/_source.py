"""Input files over fsspec: listing, compression, byte-range splits, whole-line blocks.

A :class:`Split` is a piece of one file a task reads: a byte range ``[start,
stop)`` of an uncompressed file, or, for a compressed file (which cannot be
entered in the middle), the share of its lines ``k`` of ``n``.  A byte-range split
owns the lines that *start* inside its range (the Hadoop convention): it skips
the partial line at its start and reads past its end to finish its last line, so
splits cut anywhere tile the file's lines exactly once.

:func:`iter_blocks` reads a split as blocks of whole lines of about
``daskangel.data.block-bytes`` for the parsers; a line longer than
``daskangel.data.max-line-bytes`` is never buffered whole: it is skipped while
streaming and reported.

Example
-------
>>> import fsspec
>>> with fsspec.open("memory://doc/a.txt", "wb") as f:
...     _ = f.write(b"1 1:1\\n2 2:1\\n3 3:1\\n")
>>> files = list_files("memory://doc/a.txt")
>>> [s.start for s in make_splits(files, 3, split_bytes=6)]
[0, 6, 12]
>>> b"".join(bytes(b.data) for b in iter_blocks(make_splits(files, 3, split_bytes=6)[1]))
b'2 2:1\\n'
"""

from __future__ import annotations

import io
import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import fsspec
import fsspec.compression
import numpy as np
from fsspec.core import url_to_fs

from .. import config
from ..errors import MissingDependencyError

__all__ = ["Block", "FileInfo", "Split", "iter_blocks", "list_files", "make_splits", "read_head"]

# extension -> fsspec compression name
COMPRESSIONS = {".gz": "gzip", ".bz2": "bz2", ".zst": "zstd", ".xz": "xz"}


@dataclass(frozen=True, slots=True)
class FileInfo:
    """One input file: its URL, size in bytes and compression (``None``: plain)."""

    url: str
    size: int
    compression: str | None
    order: int  # position of the file in the input list


@dataclass(frozen=True, slots=True)
class Split:
    """A piece of one file read by one task (see the module docstring)."""

    file: FileInfo
    start: int
    stop: int
    share: int = 0
    shares: int = 1

    @property
    def size(self) -> int:
        """Bytes this split costs to parse (a share of a compressed file: its part)."""
        return (
            (self.stop - self.start) // self.shares
            if self.file.compression
            else (self.stop - self.start)
        )

    @property
    def key(self) -> tuple[int, int, int]:
        """Sort key: file order, then position in the file."""
        return (self.file.order, self.start, self.share)

    def cut(self) -> list[Split]:
        """Two finer splits covering this one (halves, or twice as many shares)."""
        if self.file.compression:
            n = self.shares * 2
            return [
                replace(self, share=self.share, shares=n),
                replace(self, share=self.share + self.shares, shares=n),
            ]
        mid = self.start + (self.stop - self.start) // 2
        return [replace(self, stop=mid), replace(self, start=mid)]


def _compression(url: str, compression: str | None) -> str | None:
    if compression == "infer":
        ext = "." + url.rsplit(".", 1)[-1].lower() if "." in url.rsplit("/", 1)[-1] else ""
        compression = COMPRESSIONS.get(ext)
    if compression is not None and compression not in fsspec.compression.compr:
        if compression == "zstd":
            raise MissingDependencyError(
                f"{url}: reading .zst files needs the 'zstandard' package, which is not "
                "installed; install it with `pip install zstandard` (or "
                "`pip install daskangel[zstd]`)"
            )
        raise MissingDependencyError(f"{url}: compression {compression!r} is not available")
    return compression


def list_files(
    urls: Any, compression: str | None = "infer", storage_options: dict[str, Any] | None = None
) -> list[FileInfo]:
    """Expand paths, globs and directories into files with sizes, in a stable order."""
    if isinstance(urls, (str, bytes)) or hasattr(urls, "__fspath__"):
        urls = [urls]
    out: list[FileInfo] = []
    for u in urls:
        u = str(u)
        fs, path = url_to_fs(u, **(storage_options or {}))
        if fs.isdir(path):
            paths = sorted(
                p for p in fs.find(path) if not p.rsplit("/", 1)[-1].startswith((".", "_"))
            )
        elif any(c in path for c in "*?["):
            paths = sorted(fs.glob(path))
        else:
            paths = [path]
        if not paths:
            raise FileNotFoundError(f"paths: {u!r} matches no file")
        for p in paths:
            info = fs.info(p)
            # local files keep their plain path (as users name them in messages)
            full = (
                p
                if getattr(fs, "protocol", None) in ("file", ("file", "local"))
                else (fs.unstrip_protocol(p))
            )
            out.append(FileInfo(full, int(info["size"]), _compression(full, compression), len(out)))
    return out


def make_splits(files: list[FileInfo], n_tasks: int, split_bytes: int | None = None) -> list[Split]:
    """Cut files into splits of at most ``split_bytes``; at least ``n_tasks`` of them.

    When there are fewer splits than tasks the largest split is cut in two
    (compressed files into more line shares) until every task can get one.
    """
    if split_bytes is None:
        split_bytes = config.get_bytes("daskangel.data.split-bytes")
    total = sum(f.size for f in files)
    n_tasks = max(1, n_tasks)
    # a whole number of equal splits per task balances one big file exactly
    per_task = max(1, math.ceil(total / (n_tasks * max(1, split_bytes))))
    target = max(1, math.ceil(total / (n_tasks * per_task)))
    splits: list[Split] = []
    for f in files:
        if f.compression:
            splits.append(Split(f, 0, f.size))
            continue
        k = max(1, math.ceil(f.size / target))
        bounds = [f.size * i // k for i in range(k + 1)]
        splits.extend(Split(f, a, b) for a, b in itertools.pairwise(bounds))
    while len(splits) < n_tasks:
        big = max(range(len(splits)), key=lambda i: (splits[i].size, -i))
        splits[big : big + 1] = splits[big].cut()
    return sorted(splits, key=lambda s: s.key)


def _open(url: str, compression: str | None) -> Any:
    return fsspec.open(url, "rb", compression=compression).open()


def read_head(file: FileInfo, n_bytes: int = 1 << 16) -> bytes:
    """The first bytes of a (decompressed) file, for sniffing headers."""
    with _open(file.url, file.compression) as f:
        return bytes(f.read(n_bytes))


@dataclass(frozen=True, slots=True)
class Block:
    """Whole lines of a split: ``data`` (uint8), the index of its first line within
    the split, and lines reported too long while streaming (``[(line, bytes)]``)."""

    data: np.ndarray
    line0: int
    long_lines: tuple[tuple[int, bytes], ...] = ()


def _skip_line(f: Any, chunk: int) -> tuple[int, bytes]:
    """Consume up to and including the next newline; return (bytes consumed, leftover)."""
    used = 0
    while True:
        data = f.read(chunk)
        if not data:
            return used, b""
        k = data.find(b"\n")
        if k >= 0:
            return used + k + 1, data[k + 1 :]
        used += len(data)


def iter_blocks(
    split: Split, block_bytes: int | None = None, max_line: int | None = None
) -> Iterator[Block]:
    """Yield a split's lines as :class:`Block` s of whole lines."""
    block_bytes = block_bytes or config.get_bytes("daskangel.data.block-bytes")
    max_line = max_line or config.get_bytes("daskangel.data.max-line-bytes")
    block_bytes = max(block_bytes, 2 * max_line + 2)
    f = _open(split.file.url, split.file.compression)
    try:
        yield from _blocks(f, split, block_bytes, max_line)
    finally:
        f.close()


def _blocks(f: Any, split: Split, block_bytes: int, max_line: int) -> Iterator[Block]:
    plain = split.file.compression is None
    pos = split.start  # file offset of buf[0]
    buf = b""
    if plain and split.start > 0:
        f.seek(split.start - 1)
        used, buf = _skip_line(f, 1 << 16)
        pos = split.start - 1 + used
    stop = split.stop if plain else math.inf
    line = 0
    long_lines: list[tuple[int, bytes]] = []
    eof = False
    while not eof and pos < stop:
        data = f.read(block_bytes)
        eof = not data
        buf = buf + data if buf else bytes(data)
        if not buf:
            break
        if pos + len(buf) >= stop:
            # our last line is the one containing byte stop - 1
            k = buf.find(b"\n", max(0, int(stop - pos - 1)))
            if k >= 0:
                yield _block(buf[: k + 1], line, long_lines)
                return
            if eof:
                yield _last(buf, line, long_lines, max_line)
                return
        k = buf.rfind(b"\n")
        if k < 0:
            if eof:
                yield _last(buf, line, long_lines, max_line)
                return
            if len(buf) > max_line:
                # a line too long to buffer: stream past it and report it
                used, rest = _skip_line(f, 1 << 16)
                long_lines.append((line, buf[:200]))
                line += 1
                pos += len(buf) + used
                buf = rest
                if pos >= stop:
                    if long_lines:
                        yield _block(b"", line, long_lines)
                    return
            continue
        out = buf[: k + 1]
        yield _block(out, line, long_lines)
        line += out.count(b"\n")
        long_lines = []
        pos += k + 1
        buf = buf[k + 1 :]
    if buf and eof:
        yield _last(buf, line, long_lines, max_line)
    elif long_lines:
        yield _block(b"", line, long_lines)


def _last(buf: bytes, line: int, long_lines: list[tuple[int, bytes]], max_line: int) -> Block:
    """The file's last line, which has no newline: reported if too long."""
    if len(buf) > max_line and b"\n" not in buf:
        return _block(b"", line + 1, [*long_lines, (line, buf[:200])])
    return _block(buf, line, long_lines)


def _block(data: bytes, line0: int, long_lines: list[tuple[int, bytes]]) -> Block:
    return Block(np.frombuffer(data, np.uint8), line0, tuple(long_lines))


def text_io(data: np.ndarray) -> io.BytesIO:
    """A block's bytes as a file object (for pandas)."""
    return io.BytesIO(data.tobytes())


def first_line_at(file: FileInfo, pos: int) -> int:
    """Offset of the first line of a plain file starting at or after ``pos``."""
    if pos <= 0:
        return 0
    if pos >= file.size:
        return file.size
    with _open(file.url, None) as f:
        f.seek(pos - 1)
        used, _ = _skip_line(f, 1 << 16)
    return min(file.size, pos - 1 + used)


def _line_before(f: Any, pos: int, max_line: int) -> bytes:
    """The line ending with the newline at ``pos - 1`` (at most ``max_line`` bytes)."""
    lo = max(0, pos - 1 - max_line)
    f.seek(lo)
    data = f.read(pos - 1 - lo)
    return bytes(data[data.rfind(b"\n") + 1 :])


def _skip_group(f: Any, pos: int, stop: int, key: Any, key_of: Any) -> int:
    """From line start ``pos``, the first line start whose key differs from ``key``."""
    f.seek(pos)
    buf = b""
    while pos < stop:
        k = buf.find(b"\n")
        if k < 0:
            data = f.read(1 << 16)
            if not data:
                return stop
            buf += data
            continue
        if key_of(buf[:k]) != key:
            return pos
        pos += k + 1
        buf = buf[k + 1 :]
    return stop


def header_end(file: FileInfo, n_lines: int) -> int:
    """Byte offset just after a plain file's first ``n_lines`` lines."""
    pos = 0
    with _open(file.url, None) as f:
        for _ in range(n_lines):
            used, _rest = _skip_line(f, 1 << 12)
            pos += used
            f.seek(pos)
    return pos


def align_groups(split: Split, key_of: Any, max_line: int, header_lines: int = 0) -> Split:
    """Move a plain split's bounds so that runs of lines with the same key (a
    document's or a user's lines) are never cut: a split owns the runs whose first
    line starts inside it.  Adjacent splits move their common bound alike."""
    f_info = split.file
    if f_info.compression is not None:
        return split
    bounds = []
    head = header_end(f_info, header_lines) if header_lines else 0
    with _open(f_info.url, None) as f:
        for pos in (split.start, split.stop):
            start = first_line_at(f_info, pos)
            if head < start < f_info.size:
                key = key_of(_line_before(f, start, max_line))
                if key is not None:
                    start = _skip_group(f, start, f_info.size, key, key_of)
            bounds.append(start)
    a, b = bounds
    return replace(split, start=a, stop=max(a, b))
