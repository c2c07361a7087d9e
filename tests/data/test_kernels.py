"""The compiled parsers on their own: numbers, every malformed-line reason, UTF-8."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daskangel.data._formats import Dense, Libsvm, Tokens
from daskangel.data._kernels import parse_libsvm
from daskangel.data._numbers import F_INEXACT, REASONS, parse_float, valid_utf8
from daskangel.data._source import FileInfo, Split

SPLIT = Split(FileInfo("mem", 0, None, 0), 0, 0)


def buf(b: bytes) -> np.ndarray:
    return np.frombuffer(b, np.uint8)


def libsvm(text: bytes, **kw):
    fmt = Libsvm(kw.pop("dummy", False), kw.pop("base", -1), kw.pop("n_features", -1))
    return fmt.parse(buf(text), 0, SPLIT, kw.pop("stop", False), 100, kw.pop("max_line", 1 << 20))


@settings(max_examples=300, deadline=None)
@given(
    st.floats(allow_nan=False, allow_infinity=False, width=64),
    st.sampled_from(["%r", "%.17g", "%.6e", "%.3f"]),
)
def test_float_parse_matches_python_to_float32(x, fmt):
    s = (fmt % x).encode() if fmt != "%r" else repr(x).encode()
    v, end, status = parse_float(buf(s), 0, len(s))
    assert end == len(s)
    want = np.float64(float(s))
    if abs(want) > np.finfo(np.float32).max:
        assert status == 2  # non-finite in float32
        return
    if status == F_INEXACT:  # the caller re-parses these exactly; the fast value is close
        assert np.isclose(v, want, rtol=1e-15)
        return
    assert status == 0
    assert np.float32(v) == np.float32(want)


def test_inexact_numbers_are_reparsed_exactly():
    # 0.1 + 0.2 style values with 17 digits exercise the slow path when near a midpoint
    rng = np.random.default_rng(0)
    vals = rng.standard_normal(20000) * 10.0 ** rng.integers(-30, 30, 20000)
    text = b"".join(b"1 1:%s\n" % repr(float(v)).encode() for v in vals)
    p = libsvm(text, base=1)
    np.testing.assert_array_equal(p.batch.data, vals.astype(np.float32))


@pytest.mark.parametrize(
    "line, reason",
    [
        (b"1 x7:1", "bad_index"),
        (b"1 1.5:2", "bad_index"),
        (b"1 3:abc", "non_numeric"),
        (b"abc 3:1", "non_numeric"),
        (b"1 3:1x", "non_numeric"),
        (b"1 3:nan", "non_finite"),
        (b"1 3:-inf", "non_finite"),
        (b"1 3:1e39", "non_finite"),
        (b"inf 3:1", "non_finite"),
        (b"1 11:1", "index_out_of_range"),
        (b"1 -3:1", "negative_index"),
        (b"1 3", "missing_colon"),
        (b"1 abc", "missing_colon"),  # issue 14 4.9: no colon at all, was bad_index
        (b"1 3x", "missing_colon"),
        (b"1 3x:1", "bad_index"),
        (b"3:1 5:2", "missing_label"),  # issue 14 4.9: empty label, was non_numeric
        (b":1 5:2", "missing_label"),
        (b"1 3:1 \xff\xfe:1", "invalid_utf8"),
        (b"1 3:1 \xc3\xa9:1", "bad_index"),  # valid UTF-8, just not a number
    ],
)
def test_each_reason_rolls_back_its_line(line, reason):
    p = libsvm(b"1 1:1\n" + line + b"\n-1 2:2\n", base=0, n_features=10)
    assert p.batch.n_rows == 2
    assert p.batch.indices.tolist() == [1, 2]
    assert p.err.shape[0] == 1 and p.err[0, 0] == 1
    assert REASONS[p.err[0, 4]] == reason
    assert {REASONS[i] for i in np.flatnonzero(p.counts)} == {reason}


def test_long_line_and_stop_first():
    p = libsvm(b"1 1:1\n1 " + b"2:1 " * 50 + b"\n1 x:1\n", max_line=100)
    assert REASONS[p.err[0, 4]] == "line_too_long" and p.batch.n_rows == 1
    p = libsvm(b"1 1:1\n1 x:1\n1 2:1\n1 y:1\n", stop=True)
    assert p.stopped and p.err.shape[0] == 1 and p.batch.n_rows == 1


def test_comments_blank_lines_qid_and_one_based():
    p = libsvm(b"# header\n\n+1 qid:4 1:2 # tail\n  \n-1 3:1\n", base=1)
    assert p.batch.indices.tolist() == [0, 2]
    assert p.batch.labels.tolist() == [1.0, -1.0]
    assert p.n_lines == 5
    p = libsvm(b"1 0:1\n", base=1)
    assert REASONS[p.err[0, 4]] == "negative_index"


def test_auto_base_records_rows_at_the_declared_limit():
    out = parse_libsvm(buf(b"1 10:1\n1 3:1\n1 10:2\n"), False, -1, 10, False, 1 << 20, 0, 0, 1, 5)
    assert out[7].tolist() == [3, 10, 2, 0]


def test_dummy_dense_and_tokens():
    p = libsvm(b"1 0 5 9\n0 2\n", dummy=True)
    assert p.batch.indptr.tolist() == [0, 3, 4] and p.batch.data.tolist() == [1, 1, 1, 1]
    p = libsvm(b"1 2:3\n", dummy=True)
    assert REASONS[p.err[0, 4]] == "bad_index"
    d = Dense(3).parse(buf(b"1 0 2.5 0\n0 1 2\n2 1 1 1\n"), 0, SPLIT, False, 10, 1 << 20)
    assert d.batch.indices.tolist() == [1, 0, 1, 2] and REASONS[d.err[0, 4]] == "field_count"
    t = Tokens().parse(buf(b"The cat the\n\ndog\n"), 0, SPLIT, False, 10, 1 << 20)
    assert t.batch.n_rows == 2 and sorted(t.batch.data.tolist()) == [1.0, 1.0, 2.0]


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=40))
def test_utf8_validator_agrees_with_python(b):
    try:
        b.decode("utf-8")
        ok = True
    except UnicodeDecodeError:
        ok = False
    assert valid_utf8(buf(b), 0, len(b)) == ok
