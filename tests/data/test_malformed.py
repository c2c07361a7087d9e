"""S1: 100,000 libsvm lines of which 10,000 are malformed in every way we report."""

from __future__ import annotations

import tracemalloc

import dask
import numpy as np
import pytest

import daskangel as angel
from daskangel.data._build import BuildSpec, build_piece
from daskangel.data._formats import Libsvm
from daskangel.data._source import list_files, make_splits
from daskangel.errors import MalformedInputError

N_LINES, N_BAD, N_FEATURES, MAX_LINE = 100_000, 10_000, 1000, 2048

BAD_KINDS = {
    "bad_index": lambda r: b"1 3:0.5 x7:1",
    "non_numeric": lambda r: b"-1 3:abc 9:1",
    "non_finite": lambda r: b"1 3:1 5:nan" if r % 2 else b"inf 3:1",
    "index_out_of_range": lambda r: b"1 3:1 %d:2" % (N_FEATURES + 1 + r % 5),
    "negative_index": lambda r: b"1 -3:1" if r % 2 else b"1 0:1",
    "missing_colon": lambda r: b"1 3:1 5",
    "invalid_utf8": lambda r: b"1 3:1 \xff\xfe:1",
    "line_too_long": lambda r: b"1 " + b"7:1 " * (MAX_LINE // 4 + 10),
}


def _make(tmp_path, with_bad: bool):
    rng = np.random.default_rng(7)
    pool = []  # clean lines are drawn from a pool (fast to generate, realistic to parse)
    for i in range(2000):
        idx = np.sort(rng.choice(N_FEATURES, rng.integers(1, 12), replace=False)) + 1
        vals = np.round(rng.standard_normal(idx.shape[0]), 4)
        toks = b" ".join(
            b"%d:%s" % (j, repr(float(v)).encode()) for j, v in zip(idx, vals, strict=True)
        )
        pool.append(b"%d %s" % (1 if i % 3 else -1, toks))
    lines = [pool[j] for j in rng.integers(0, len(pool), N_LINES)]
    expected = {}
    if with_bad:
        kinds = list(BAD_KINDS)
        for k, i in enumerate(sorted(rng.choice(N_LINES, N_BAD, replace=False).tolist())):
            kind = kinds[k % len(kinds)]
            lines[i] = BAD_KINDS[kind](k)
            expected[i + 1] = kind
    path = tmp_path / ("dirty.svm" if with_bad else "clean.svm")
    path.write_bytes(b"\n".join(lines) + b"\n")
    return str(path), expected


@pytest.fixture(scope="module")
def s1(tmp_path_factory):
    return _make(tmp_path_factory.mktemp("s1"), True)


def _read(path, **kw):
    with dask.config.set(
        {"daskangel.data.split-bytes": "512KiB", "daskangel.data.max-line-bytes": MAX_LINE}
    ):
        return angel.data.read_libsvm(path, n_features=N_FEATURES, zero_based=False, **kw)


@pytest.mark.timeout(120)
def test_raise_names_the_first_bad_line(client, s1):
    path, expected = s1
    first = min(expected)
    with pytest.raises(MalformedInputError) as e:
        _read(path).persist(n_partitions=4)
    assert f"{path}, line {first}:" in str(e.value)
    assert isinstance(e.value, ValueError)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", ["collect", "skip"])
def test_collect_and_skip_count_every_bad_line(client, s1, mode):
    path, expected = s1
    with dask.config.set(
        {"daskangel.data.split-bytes": "512KiB", "daskangel.data.max-line-bytes": MAX_LINE}
    ):
        ds = _read(path, errors=mode, max_errors=N_BAD).persist(n_partitions=4)
    assert ds.n_splits >= 4
    assert ds.n_rows == N_LINES - N_BAD
    want = {k: N_BAD // len(BAD_KINDS) for k in BAD_KINDS}
    assert ds.skipped == dict(sorted(want.items()))
    if mode == "collect":
        got = {e.line: e.reason for e in ds.errors}
        assert got == expected
        e = ds.errors[0]
        assert e.message.startswith(f"{path}, line {e.line}: ")
    else:
        assert ds.errors == []


def _peak(path: str) -> int:
    spec = BuildSpec(
        "s1", Libsvm(False, 1, N_FEATURES), "memory", "collect", N_BAD, max_line=MAX_LINE
    )
    split = make_splits(list_files(path), 1, split_bytes=1 << 40)[0]
    tracemalloc.start()
    try:
        piece = build_piece(spec, split, "p")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert piece.report.n_lines == N_LINES
    return peak


@pytest.mark.timeout(120)
def test_peak_memory_within_twice_the_clean_run(tmp_path, s1):
    clean, _ = _make(tmp_path, False)
    p_clean, p_dirty = _peak(clean), _peak(s1[0])
    print(f"S1 peak memory: clean {p_clean / 2**20:.1f} MiB, malformed {p_dirty / 2**20:.1f} MiB")
    assert p_dirty <= 2 * p_clean
