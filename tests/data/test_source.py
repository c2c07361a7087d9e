"""Splits over fsspec: byte ranges tile a file's lines exactly once; compression."""

from __future__ import annotations

import bz2
import gzip

import fsspec
import fsspec.compression
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daskangel.data._source import iter_blocks, list_files, make_splits
from daskangel.errors import MissingDependencyError


def _write(url: str, data: bytes) -> None:
    with fsspec.open(url, "wb") as f:
        f.write(data)


def _lines_of(files, n_tasks, split_bytes, block_bytes=64, max_line=16):
    splits = make_splits(files, n_tasks, split_bytes)
    out, longs = [], []
    for s in splits:
        for b in iter_blocks(s, block_bytes, max_line):
            out.append(bytes(b.data))
            longs.extend(t for _, t in b.long_lines)
    return splits, b"".join(out), longs


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.binary(max_size=12).map(lambda b: b.replace(b"\n", b"a")), max_size=40),
    st.booleans(),
    st.integers(1, 9),
    st.integers(1, 50),
)
def test_byte_ranges_tile_lines_exactly(lines, trailing, n_tasks, split_bytes):
    data = b"\n".join(lines) + (b"\n" if trailing and lines else b"")
    _write("memory://tile/f.txt", data)
    files = list_files("memory://tile/f.txt")
    splits, got, longs = _lines_of(files, n_tasks, split_bytes)
    assert len(splits) >= n_tasks
    assert not longs
    assert got == data


def test_long_lines_are_streamed_past_and_reported():
    # lines longer than a block are never buffered whole (shorter ones over the
    # limit reach the parser, which reports them)
    data = b"a b\n" + b"x" * 1000 + b"\nc d\n" + b"y" * 500
    _write("memory://long/f.txt", data)
    files = list_files("memory://long/f.txt")
    for n in (1, 3, 7):
        _splits, got, longs = _lines_of(files, n, 10)
        assert got.split(b"\n") == [b"a b", b"c d", b""]
        assert [t[:3] for t in longs] == [b"xxx", b"yyy"]


@pytest.mark.parametrize("ext, comp", [(".gz", gzip.compress), (".bz2", bz2.compress)])
def test_compressed_files_are_shared_by_lines(ext, comp):
    data = b"".join(b"%d\n" % i for i in range(100))
    _write(f"memory://comp/f{ext}", comp(data))
    files = list_files(f"memory://comp/f{ext}")
    assert files[0].compression is not None
    splits = make_splits(files, 3)
    assert len(splits) >= 3 and {s.shares for s in splits} >= {2}
    # every share reads the whole stream; the parsers keep their share of the lines
    assert all(b"".join(bytes(b.data) for b in iter_blocks(s)) == data for s in splits)
    shares = sorted((s.share, s.shares) for s in splits)
    covered = sorted(i for k, n in shares for i in range(100) if i % n == k)
    assert covered == list(range(100))


def test_zstd_without_zstandard_is_a_clear_error(monkeypatch):
    monkeypatch.delitem(fsspec.compression.compr, "zstd", raising=False)
    _write("memory://z/f.svm.zst", b"\x28\xb5\x2f\xfd")
    with pytest.raises(MissingDependencyError, match="zstandard"):
        list_files("memory://z/f.svm.zst")


def test_globs_directories_and_missing_paths(tmp_path):
    (tmp_path / "d").mkdir()
    for name in ("b.txt", "a.txt", ".hidden", "_SUCCESS"):
        (tmp_path / "d" / name).write_bytes(b"1\n")
    files = list_files(str(tmp_path / "d"))
    assert [f.url.rsplit("/", 1)[1] for f in files] == ["a.txt", "b.txt"]
    assert len(list_files(f"file://{tmp_path}/d/*.txt")) == 2
    with pytest.raises(FileNotFoundError, match="matches no file"):
        list_files(str(tmp_path / "d" / "*.csv"))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 6), min_size=1, max_size=30), st.integers(1, 40))
def test_group_alignment_never_cuts_a_run_of_one_key(run_lengths, n_tasks):
    from daskangel.data._formats import Docword
    from daskangel.data._source import align_groups

    lines = [b"%d %d 1" % (d, w + 1) for d, n in enumerate(run_lengths, 1) for w in range(n)]
    data = b"\n".join(lines) + b"\n"
    _write("memory://grp/d.txt", data)
    files = list_files("memory://grp/d.txt")
    splits = make_splits(files, n_tasks, split_bytes=max(1, len(data) // n_tasks))
    aligned = [align_groups(s, Docword().group_key, 1000) for s in splits]
    texts = [b"".join(bytes(b.data) for b in iter_blocks(s, 64, 16)) for s in aligned]
    assert b"".join(texts) == data
    docs = [{ln.split()[0] for ln in t.splitlines()} for t in texts]
    assert sum(len(d) for d in docs) == len(run_lengths)  # each document in one split
