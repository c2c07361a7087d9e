"""The narrowed wire of CSR increments (``daskangel.client.narrow-csr``; issue 14
section 1, the push side): columns, local rows, entry counts and integer values
travel in the narrowest integer types they fit and the servers widen them as they
write.  The narrowing limits, the frames, exact sums under concurrent pushes with
every width mixed (duplicates too), the servers' dtype rules, and refused
requests leaving the arrays unchanged, on a process cluster (2 workers).
"""

from __future__ import annotations

from typing import Any

import dask
import numpy as np
import pytest
import scipy.sparse as sp
from distributed import Client
from hypothesis import given, settings
from hypothesis import strategies as st

import daskangel as angel
from daskangel._compat import workers_info
from daskangel._wire import NARROW, split_follow
from daskangel.errors import InvalidArgumentError, PSIndexError
from daskangel.psarray._csrplan import coo_rows, narrow_int, plan_csr
from daskangel.psarray._initspec import InitSpec
from daskangel.psarray._packkernels import min_max
from daskangel.psarray._recvpool import cut_fields
from daskangel.psarray._server import PSServer

pytestmark = pytest.mark.timeout(240)

_INT = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]


# -- the rule alone -----------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(st.integers(-(2**40), 2**40), st.integers(0, 2**40), st.sampled_from(_INT))
def test_narrow_int_is_the_narrowest_safe_type(lo: int, span: int, dtype: type) -> None:
    """The type holds both ends, is narrower than ``dtype`` and casts to it
    safely; no narrower type holds both ends; None when nothing narrower does."""
    dt = np.dtype(dtype)
    hi = lo + span
    got = narrow_int(lo, hi, dt)

    def holds(t: np.dtype) -> bool:
        info = np.iinfo(t)
        return bool(info.min <= lo and hi <= info.max)

    smaller = [
        np.dtype(t)
        for t in ("u1", "i1", "u2", "i2")
        if np.dtype(t).itemsize < dt.itemsize
        and holds(np.dtype(t))
        and np.can_cast(np.dtype(t), dt, "safe")
    ]
    if got is None:
        assert not smaller
        return
    g = np.dtype(got)
    assert holds(g) and g.itemsize < dt.itemsize and np.can_cast(g, dt, "safe")
    assert g.itemsize == min(t.itemsize for t in smaller)


@settings(max_examples=120, deadline=None)
@given(
    st.sampled_from(_INT),
    st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=300),
    st.integers(0, 299),
)
def test_min_max_is_numpys_min_and_max(dtype: type, raw: list[int], at: int) -> None:
    """The branch-free compiled pass against numpy, for every integer dtype and its
    extremes (the lowest and highest value placed anywhere, lengths across the
    vector width)."""
    info = np.iinfo(dtype)
    span = int(info.max) - int(info.min) + 1
    a = np.array([int(info.min) + v % span for v in raw], dtype=dtype)
    a[min(at, a.shape[0] - 1)] = info.max if at % 2 else info.min
    lo, hi = min_max(a)
    assert (int(lo), int(hi)) == (int(a.min()), int(a.max()))


def test_narrow_int_limits() -> None:
    i4 = np.dtype(np.int32)
    assert [narrow_int(0, h, i4) for h in (255, 256, 65535, 65536)] == ["u1", "u2", "u2", None]
    assert [narrow_int(lo, 0, i4) for lo in (-128, -129, -32768, -32769)] == [
        "i1",
        "i2",
        "i2",
        None,
    ]
    assert narrow_int(-1, 127, i4) == "i1" and narrow_int(-1, 128, i4) == "i2"
    assert narrow_int(0, 255, np.dtype(np.int16)) == "u1"
    assert narrow_int(0, 256, np.dtype(np.int16)) is None
    assert narrow_int(0, 1, np.dtype(np.int8)) is None
    assert narrow_int(0, 1, np.dtype(np.float32)) is None
    assert narrow_int(0, 1, np.dtype(np.bool_)) is None
    assert min_max(np.array([3, -7, 9, 0], np.int32)) == (-7, 9)


def test_planned_hints_and_the_frame_they_make(ps: angel.PSContext) -> None:
    """An int32 LDA-like CSR: uint16 columns and rows, int8 values in the follow
    frame, cut back to exactly the planned numbers; a float matrix narrows only
    its indices; small requests (no follow frame) go as planned, without hints."""
    a = ps.zeros("hints", (3_000, 1_000), dtype="int32", block_shape=(1_000, 1_000))
    X = sp.random(3_000, 1_000, density=0.01, format="csr", random_state=1, dtype=np.float64)
    X.data = np.where(X.data > 0.5, 1, -1).astype(np.int32)
    parts, cost = plan_csr(a.meta, X, None, None)  # type: ignore[misc]
    assert all(
        p[NARROW] == {"csr_cols": "u2", "csr_len": "u2", "csr_rows": "u2", "values": "i1"}
        for p in parts.values()
    )
    assert sum(cost.values()) == X.nnz * 3
    with dask.config.set({"daskangel.client.follow-bytes": 1}):
        kw, frames = split_follow("update", {"parts": list(parts.values()), "add": True})
    assert all(NARROW not in p for p in kw["parts"])
    assert {f[4] for f in kw["follow"]["fields"]} == {"<u2", "|i1"}
    for i, field, arr in cut_fields(frames, kw["follow"]["fields"]):
        np.testing.assert_array_equal(arr, list(parts.values())[i][field])
    with dask.config.set({"daskangel.client.follow-bytes": "1GiB"}):
        kw, frames = split_follow("update", {"parts": list(parts.values()), "add": True})
    assert frames == [] and all(NARROW not in p for p in kw["parts"])
    assert all(p["values"].dtype == np.int32 for p in kw["parts"])
    f = ps.zeros("hintsf", (3_000, 100), dtype="float32", block_shape=(1_000, 100))
    Y = sp.random(3_000, 100, density=0.05, format="csr", random_state=2, dtype=np.float32)
    fparts, _ = plan_csr(f.meta, Y, None, None)  # type: ignore[misc]
    assert all(
        p[NARROW] == {"csr_cols": "u1", "csr_len": "u2", "csr_rows": "u2"} for p in fparts.values()
    )
    with dask.config.set({"daskangel.client.narrow-csr": False}):
        wide, _ = plan_csr(a.meta, X, None, None)  # type: ignore[misc]
    assert all(NARROW not in p for p in wide.values())
    ps.drop("hints")
    ps.drop("hintsf")


# -- on a process cluster ----------------------------------------------------------


@pytest.fixture(scope="module")
def ps(client: Client) -> Any:
    with angel.PSContext(client) as ctx:
        yield ctx


SHAPE = (2_000, 300)  # > 256 columns: uint16 columns
SPANS = [3, 120, 129, 30_000, 40_000, 2**31 - 1]  # values in [-span, span]: int8 .. int32


def _csr(seed: int, span: int, dtype: str) -> sp.csr_matrix:
    """1,500 random rows x 30 entries (columns drawn from 40: duplicates in most
    rows, summed), values in ``[-span, span]`` (or ``[0, span]`` unsigned) with
    both ends present."""
    rng = np.random.default_rng(seed)
    rows = np.sort(rng.choice(SHAPE[0], 1_500, replace=False))
    cols = rng.integers(0, 40, (1_500, 30)) * 7
    indptr = np.zeros(SHAPE[0] + 1, np.int64)
    indptr[rows + 1] = 30
    info = np.iinfo(dtype)
    lo, hi = max(-span, info.min), min(span, info.max)
    vals = rng.integers(lo, hi, 1_500 * 30, endpoint=True)
    vals[:2] = lo, hi
    return sp.csr_matrix((vals.astype(dtype), cols.ravel(), np.cumsum(indptr)), shape=SHAPE)


def _want(X: sp.csr_matrix, dtype: str) -> np.ndarray:
    out = np.zeros(SHAPE, dtype)
    coo = X.tocoo()
    with np.errstate(over="ignore"):
        np.add.at(out, (coo.row, coo.col), coo.data.astype(dtype))
    return out


def _push(name: str, dtype: str, seeds: list[int], narrow: bool) -> None:
    arr = angel.PSArray(name)
    with dask.config.set({"daskangel.client.narrow-csr": narrow}):
        for s in seeds:
            arr.increment(_csr(s, SPANS[s % len(SPANS)], dtype))


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_concurrent_narrowed_increments_sum_exactly(
    ps: angel.PSContext, client: Client, dtype: str
) -> None:
    """Two tasks on each worker (one with the wide wire) and the client push CSR
    increments whose values need int8, int16 or the array's own type, at once, as
    follow frames: every entry ends with the exact (wrapping) sum."""
    name = f"n{dtype}"
    arr = ps.zeros(name, SHAPE, dtype=dtype, block_shape=(300, SHAPE[1]))
    assert len({b.server for b in arr.blocks}) == 2
    workers = sorted(workers_info(client))
    groups = [list(range(g, 24, 4)) for g in range(4)]
    with dask.config.set({"daskangel.client.follow-bytes": "1B"}):
        futs = [
            client.submit(_push, name, dtype, seeds, i != 1, workers=[workers[i % 2]], pure=False)
            for i, seeds in enumerate(groups[:3])
        ]
        _push(name, dtype, groups[3], True)
        for f in futs:
            f.result()
    want = np.zeros(SHAPE, dtype)
    with np.errstate(over="ignore"):
        for s in range(24):
            want += _want(_csr(s, SPANS[s % len(SPANS)], dtype), dtype)
    np.testing.assert_array_equal(arr.get(), want)
    ps.drop(name)


def test_wide_and_tall_blocks_keep_their_indices(ps: angel.PSContext) -> None:
    """Columns past 65,535 stay int32, as do local rows of a block taller than
    65,536 rows; 256 columns fit uint8, 257 do not: the sums are exact each way."""
    cases = [
        ((4, 70_000), (2, 70_000)),
        ((140_000, 3), (70_000, 3)),
        ((8, 256), (4, 256)),
        ((8, 257), (4, 257)),
    ]
    rng = np.random.default_rng(3)
    for k, (shape, block) in enumerate(cases):
        a = ps.zeros(f"wt{k}", shape, dtype="int32", block_shape=block)
        n = 4_000
        r = rng.integers(0, shape[0], n)
        c = rng.integers(0, shape[1], n)
        r[:2], c[:2] = shape[0] - 1, shape[1] - 1  # the far corner, twice
        X = sp.csr_matrix((rng.integers(-5, 6, n).astype(np.int32), (r, c)), shape=shape)
        parts, _ = plan_csr(a.meta, X, None, None)  # type: ignore[misc]
        hints = [p[NARROW] for p in parts.values()]
        assert all(("csr_rows" in h) == (block[0] <= 2**16) for h in hints)
        assert all(
            h.get("csr_cols") == {256: "u1", 257: "u2", 3: "u1"}.get(shape[1]) for h in hints
        )
        with dask.config.set({"daskangel.client.follow-bytes": "1B"}):
            a.increment(X)
            a.increment(X)
        np.testing.assert_array_equal(a.get(), 2 * X.toarray())
        ps.drop(f"wt{k}")


def _raw_update(arr: angel.PSArray, parts: dict[int, dict[str, Any]]) -> None:
    """Send hand-made update parts over the wire as follow frames."""
    b = arr._binding
    extra = {"add": True, "tag": b.next_tag(), "clock": None}
    with dask.config.set({"daskangel.client.follow-bytes": "1B"}):
        b.run(b.call_blocks, arr.name, "update", parts, {g: 0 for g in parts}, extra)


def test_servers_refuse_values_that_do_not_widen_safely(ps: angel.PSContext) -> None:
    """Values of a type that does not cast safely to the block's (wider than it,
    or floats into integers), or columns that are not integers, are refused by
    the server with every block unchanged; a narrower integer type is taken."""
    a = ps.zeros("refuse", (40, 10), dtype="int32", block_shape=(20, 10))
    a.increment(np.arange(400, dtype=np.int32).reshape(40, 10))
    before = a.get()

    def parts(vals: np.ndarray, cols: np.ndarray) -> dict[int, dict[str, Any]]:
        one = {"csr_rows": np.array([0, 3], np.int32), "csr_len": np.array([1, 1], np.int32)}
        return {g: {"block": g, **one, "csr_cols": cols, "values": vals} for g in (0, 1)}

    good_cols = np.array([2, 9], np.int32)
    for vals, cols in [
        (np.array([1, 2], np.int64), good_cols),  # wider than int32
        (np.array([1, 2], np.uint32), good_cols),  # does not fit int32 safely
        (np.array([1.0, 2.0], np.float32), good_cols),
        (np.array([1, 2], np.int16), np.array([2.0, 9.0], np.float32)),
    ]:
        with pytest.raises(InvalidArgumentError):
            _raw_update(a, parts(vals, cols))
        np.testing.assert_array_equal(a.get(), before)
    _raw_update(a, parts(np.array([-1, 100], np.int8), good_cols.astype(np.uint8)))
    _raw_update(a, parts(np.array([-300, 40_000], np.int32), good_cols))
    _raw_update(a, parts(np.array([7, 65_535], np.uint16), good_cols.astype(np.uint16)))
    want = before.copy()
    for r0 in (0, 20):
        want[r0 + 0, 2] += -1 - 300 + 7
        want[r0 + 3, 9] += 100 + 40_000 + 65_535
    np.testing.assert_array_equal(a.get(), want)


def test_in_process_server_applies_narrow_parts_and_refuses_bad_ones() -> None:
    s = PSServer("local", 0)
    spec = {"kind": "dense", "shape": (4, 5), "dtype": "int32", "init": InitSpec().to_dict()}
    s.dispatch(
        "create", array="w", blocks=[{"block": 0, **spec, "row0": 0, "col0": 0, "n_cols": 5}]
    )
    good = {
        "block": 0,
        "csr_rows": np.array([0, 3], np.uint16),
        "csr_len": np.array([2, 1], np.uint16),
        "csr_cols": np.array([4, 4, 1], np.uint8),
        "values": np.array([-128, 127, 5], np.int8),
    }
    bad = {**good, "csr_len": np.array([2.0, 1.0])}
    with pytest.raises(InvalidArgumentError, match="csr_len"):
        s.dispatch("update", array="w", add=True, parts=[good, bad])
    got = s.dispatch("get", array="w", parts=[{"block": 0, "rows": None, "cols": None}])[0]
    assert not got.any()
    s.dispatch("update", array="w", add=True, parts=[good])
    got = s.dispatch("get", array="w", parts=[{"block": 0, "rows": None, "cols": None}])[0]
    assert got[0, 4] == -1 and got[3, 1] == 5 and got.sum() == 4


# -- COO writes sorted into compressed rows on the caller -------------------------


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.tuples(st.integers(-1, 12), st.integers(-1, 6), st.integers(-9, 9)), max_size=60),
    st.sampled_from([np.int32, np.int64]),
)
def test_coo_rows_is_a_stable_counting_sort(
    entries: list[tuple[int, int, int]], itype: type
) -> None:
    """Against numpy's stable argsort by row: the same columns and values in the
    same order (duplicates keep theirs); the first entry outside 12 x 6 is named."""
    r = np.array([e[0] for e in entries], itype)
    c = np.array([e[1] for e in entries], itype)
    d = np.array([e[2] for e in entries], np.int32)
    indptr, cols, data, bad = coo_rows(r, c, d, 11, 6)
    outside = [i for i, (a, b, _) in enumerate(entries) if not (0 <= a < 11 and 0 <= b < 6)]
    if outside:
        assert bad == outside[0]
        return
    assert bad == -1
    order = np.argsort(r, kind="stable")
    np.testing.assert_array_equal(cols, c[order])
    np.testing.assert_array_equal(data, d[order])
    np.testing.assert_array_equal(
        indptr, np.concatenate([[0], np.cumsum(np.bincount(r, minlength=11))])
    )


def _coo(seed: int, n: int, shape: tuple[int, int]) -> sp.coo_matrix:
    """``n`` entries at random, unsorted, many repeated, values -3..3."""
    rng = np.random.default_rng(seed)
    r = rng.integers(0, shape[0], n)
    c = rng.integers(0, shape[1], n)
    r[n // 2 :], c[n // 2 :] = r[: n - n // 2], c[: n - n // 2]  # every entry twice
    v = rng.integers(-3, 4, n).astype(np.int32)
    return sp.coo_matrix((v, (r, c)), shape=shape)


def _push_coo(name: str, seeds: list[int]) -> None:
    arr = angel.PSArray(name)
    for s in seeds:
        arr.increment(_coo(s, 20_000, SHAPE))


def test_coo_increments_go_as_rows_and_sum_exactly(ps: angel.PSContext, client: Client) -> None:
    """Unsorted COO increments with repeated entries, from two tasks and the
    client at once, are planned as compressed rows and sum exactly; a COO much
    sparser than the matrix's rows keeps the coordinate path and sums exactly too;
    an entry out of range is refused with nothing written."""
    arr = ps.zeros("coo", SHAPE, dtype="int32", block_shape=(300, SHAPE[1]))
    parts, _ = plan_csr(arr.meta, _coo(0, 20_000, SHAPE), None, None)  # type: ignore[misc]
    assert all("csr_rows" in p for p in parts.values())
    workers = sorted(workers_info(client))
    futs = [
        client.submit(_push_coo, "coo", [10 + i, 20 + i], workers=[workers[i]], pure=False)
        for i in range(2)
    ]
    _push_coo("coo", [30, 31])
    for f in futs:
        f.result()
    want = np.zeros(SHAPE, np.int32)
    for s in (10, 20, 11, 21, 30, 31):
        want += _want(_coo(s, 20_000, SHAPE).tocsr(), "int32")
    np.testing.assert_array_equal(arr.get(), want)
    few = _coo(5, 100, SHAPE)  # 2,000 rows > 4 x 100 entries
    assert plan_csr(arr.meta, few, None, None) is None
    arr.increment(few)
    want += few.toarray()
    for r, c in ((SHAPE[0], 0), (0, SHAPE[1]), (-1, 0)):
        bad = _coo(6, 20_000, SHAPE)
        bad.row[-1], bad.col[-1] = r, c
        with pytest.raises(PSIndexError):
            arr.increment(bad)
    np.testing.assert_array_equal(arr.get(), want)
    ps.drop("coo")
