"""Sparse row increments (``scipy.sparse`` CSR into a dense matrix cut by rows;
issue 14 section 1, the push side), on a process cluster (2 workers): concurrent
increments from tasks and the client sum exactly (duplicates within a request
too), with their compressed rows packed into one follow frame a server or sent
inline, by the lean ``daskangel_push`` requests (``psarray/_rowpush.py``, tasks'
own servers called directly meanwhile) or the general path; the dtype rules
hold; refused requests change nothing.
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
from daskangel.errors import CastingError, NonFiniteError, PSIndexError, ShapeMismatchError
from daskangel.psarray._csrplan import csr_runs

from .._rowdata import malformed_csr

pytestmark = pytest.mark.timeout(240)


# -- the planning kernel alone ------------------------------------------------------


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.integers(0, 4), min_size=1, max_size=120),
    st.lists(st.integers(0, 120), max_size=6),
    st.sampled_from([np.int32, np.int64]),
)
def test_csr_runs_finds_each_blocks_touched_rows_and_their_lengths(
    lens: list[int], cuts: list[int], itype: type
) -> None:
    """Against numpy (diff, flatnonzero, searchsorted): the touched rows of every
    row range, local and int32, with their entry counts, whatever the ranges
    (empty ones too) and ``indptr``'s integer type."""
    n = len(lens)
    indptr = np.concatenate([[0], np.cumsum(lens)]).astype(itype)
    bounds = np.unique(np.array([0, n, *[min(c, n) for c in cuts]], np.int64))
    rows, got_lens, starts = csr_runs(indptr, bounds)
    assert rows.dtype == got_lens.dtype == np.int32
    ln = np.diff(indptr.astype(np.int64))
    touched = np.flatnonzero(ln)
    at = np.searchsorted(touched, bounds)
    np.testing.assert_array_equal(starts, at)
    for g in range(bounds.shape[0] - 1):
        tr = touched[at[g] : at[g + 1]]
        np.testing.assert_array_equal(rows[starts[g] : starts[g + 1]], tr - bounds[g])
        np.testing.assert_array_equal(got_lens[starts[g] : starts[g + 1]], ln[tr])


# -- on a process cluster ----------------------------------------------------------

SHAPE = (3_000, 200)  # int32: several row blocks on each server
NNZ = 40  # entries a row: a 2,500-row push carries ~400 KB a server


def _csr(seed: int, n_rows: int, dup: bool) -> sp.csr_matrix:
    """``n_rows`` random rows x ``NNZ`` entries (values 1..3); with ``dup`` every row
    repeats some of its columns (a non-canonical CSR: duplicates are summed)."""
    rng = np.random.default_rng(seed)
    rows = np.sort(rng.choice(SHAPE[0], n_rows, replace=False))
    cols = rng.integers(0, SHAPE[1] if not dup else 25, (n_rows, NNZ))
    indptr = np.zeros(SHAPE[0] + 1, np.int64)
    indptr[rows + 1] = NNZ
    vals = rng.integers(1, 4, n_rows * NNZ).astype(np.int32)
    return sp.csr_matrix((vals, cols.ravel(), np.cumsum(indptr)), shape=SHAPE)


def _dense(X: sp.csr_matrix) -> np.ndarray:
    out = np.zeros(SHAPE, np.int64)
    coo = X.tocoo()
    np.add.at(out, (coo.row, coo.col), coo.data)
    return out


def _push(name: str, seed: int, rounds: int, cfg: dict[str, Any] | None = None) -> None:
    arr = angel.PSArray(name)
    with dask.config.set(cfg or {}):
        for r in range(rounds):
            arr.increment(_csr(seed * 100 + r, 2_500, r % 2 == 1))


def _set_lean(on: bool) -> None:
    """(``client.run``) The lean push path on or off for this whole process."""
    dask.config.set({"daskangel.client.lean-push": on})


def _ops(a: angel.PSArray) -> dict[str, int]:
    """Calls of each server op on the array's servers so far (``ps.status()``'s
    counters)."""
    out: dict[str, int] = {}
    for stat in a._binding.run(a._stats):
        for op, counters in stat["ops"].items():
            out[op] = out.get(op, 0) + int(counters[0])
    return out


@pytest.fixture(scope="module")
def ps(client: Client) -> Any:
    with angel.PSContext(client) as ctx:
        yield ctx


def test_concurrent_csr_increments_sum_exactly(ps: angel.PSContext, client: Client) -> None:
    """Four tasks on both workers and the client push CSR increments (half with
    duplicated columns in each row) at once: every entry ends with the exact sum, with the packed follow frames and without."""
    arr = ps.zeros("lda", SHAPE, dtype="int32", block_shape=(400, SHAPE[1]))
    assert len({b.server for b in arr.blocks}) == 2
    workers = sorted(workers_info(client))
    seeds, rounds = [1, 2, 3, 4], 4
    want = np.zeros(SHAPE, np.int64)
    for follow in ("1B", "1GiB"):  # every push as a follow frame, then inline
        with dask.config.set({"daskangel.client.follow-bytes": follow}):
            futs = [
                client.submit(_push, "lda", s, rounds, workers=[workers[i % 2]], pure=False)
                for i, s in enumerate(seeds)
            ]
            _push("lda", 9, rounds)
            for f in futs:
                f.result()
        for s in [*seeds, 9]:
            for r in range(rounds):
                want += _dense(_csr(s * 100 + r, 2_500, r % 2 == 1))
        np.testing.assert_array_equal(arr.get(), want.astype(np.int32))


def test_lean_and_general_pushes_mixed_sum_exactly(ps: angel.PSContext, client: Client) -> None:
    """Tasks on both workers (one server in their own process, called directly,
    the other by a lean request) and the client (both lean) push at once, half of
    them on the general path (``lean-push`` off), duplicates within rows: exact
    sums, and the servers counted one ``push`` request for each lean one."""
    arr = ps.zeros("mixed", SHAPE, dtype="int32", block_shape=(400, SHAPE[1]))
    workers = sorted(workers_info(client))
    rounds = 3
    off = {"daskangel.client.lean-push": False}
    before = _ops(arr)
    # dask's config is one per process: tasks 1 and 3 (general path) share the first
    # worker, switched off for the whole process (a `dask.config.set` inside one of
    # two concurrent tasks is undone for both when the first one ends, and the
    # other's last pushes went lean: 13 lean requests now and then instead of 12)
    client.run(_set_lean, False, workers=[workers[0]])
    try:
        futs = [
            client.submit(_push, "mixed", s, rounds, workers=[w], pure=False)
            for s, w in zip([1, 2, 3, 4], workers * 2, strict=True)
        ]
        _push("mixed", 5, rounds)  # the client: both servers by lean requests
        _push("mixed", 6, rounds, off)
        for f in futs:
            f.result()
    finally:
        client.run(_set_lean, True, workers=[workers[0]])
    want = np.zeros(SHAPE, np.int64)
    for s in (1, 2, 3, 4, 5, 6):
        for r in range(rounds):
            want += _dense(_csr(s * 100 + r, 2_500, r % 2 == 1))
    np.testing.assert_array_equal(arr.get(), want.astype(np.int32))
    after = _ops(arr)
    # lean: the client's 3 pushes to 2 servers, tasks 2 and 4's 3 each to the other
    # worker's server (their own is called directly)
    assert after.get("push", 0) - before.get("push", 0) == 3 * 2 + 2 * 3
    assert after["update"] - before.get("update", 0) == 6 * rounds * 2


def test_lean_push_refused_by_a_server_changes_nothing(ps: angel.PSContext) -> None:
    """A malformed CSR (a negative row length) passes the caller's checks and is
    refused by the server its rows go to, through the lean request (every push
    framed: ``follow-bytes`` 1 B): ShapeMismatchError, every block unchanged; a
    good push after it on the same comms applies."""
    iv = ps.zeros("lean-bad", SHAPE, dtype="int32", block_shape=(400, SHAPE[1]))
    X = _csr(7, 2_000, True)
    with dask.config.set({"daskangel.client.follow-bytes": "1B"}):
        before_ops = _ops(iv)
        iv.increment(X)
        bad_ptr = sp.csr_matrix(SHAPE, dtype=np.int32)
        ptr = np.zeros(SHAPE[0] + 1, np.int64)
        ptr[5:] = 2
        ptr[5] = 3
        bad_ptr.indptr, bad_ptr.indices = ptr, np.array([1, 2, 3])
        bad_ptr.data = np.ones(3, np.int32)
        before = iv.get()
        with pytest.raises(ShapeMismatchError):
            iv.increment(bad_ptr)
        np.testing.assert_array_equal(iv.get(), before)
        iv.increment(X)
        assert _ops(iv).get("push", 0) - before_ops.get("push", 0) == 2 + 1 + 2
    np.testing.assert_array_equal(iv.get(), (2 * _dense(X)).astype(np.int32))


def test_csr_dtype_rules_and_refused_requests_change_nothing(ps: angel.PSContext) -> None:
    """A float CSR into an int32 array is refused under 'safe' casting and taken
    with casting='unsafe'; an out-of-range column, a NaN or a wrong shape leaves
    both servers' blocks unchanged; int32 sums wrap as NumPy's."""
    iv = ps.zeros("iv", SHAPE, dtype="int32", block_shape=(400, SHAPE[1]))
    fv = ps.zeros("fv", SHAPE, dtype="float32", block_shape=(400, SHAPE[1]))
    X = _csr(5, 2_000, False)
    iv.increment(X)
    fv.increment(X.astype(np.float32))
    i_before, f_before = iv.get(), fv.get()
    bad_col = X.copy()
    bad_col.indices[-1] = SHAPE[1]
    nan = X.astype(np.float32)
    nan.data[-1] = np.nan
    refused = [
        (lambda: iv.increment(X.astype(np.float64)), CastingError),
        (lambda: iv.increment(X.astype(np.int64)), CastingError),
        (lambda: iv.increment(bad_col), PSIndexError),
        (lambda: fv.increment(nan), NonFiniteError),
        (
            lambda: fv.increment(sp.csr_matrix((SHAPE[0], SHAPE[1] + 1), dtype="float32")),
            ShapeMismatchError,
        ),
    ]
    for call, err in refused:
        with pytest.raises(err):
            call()
    np.testing.assert_array_equal(iv.get(), i_before)
    np.testing.assert_array_equal(fv.get(), f_before)
    fv.increment(nan, on_nonfinite="skip")  # the finite entries of the same request
    keep = X.astype(np.float32)
    keep.data[-1] = 0
    np.testing.assert_array_equal(fv.get(), f_before + keep.toarray())
    iv.increment((X * 0.5).astype(np.float64), casting="unsafe")
    np.testing.assert_array_equal(iv.get(), i_before + (X * 0.5).astype(np.int32).toarray())
    # a malformed CSR (indptr going down: a negative row length) reaches the
    # servers, which refuse it before writing anything
    bad_ptr = malformed_csr(SHAPE)
    before_all = iv.get()
    with pytest.raises(ShapeMismatchError):
        iv.increment(bad_ptr)
    # an indptr cut short after the matrix was made is refused on the caller
    short_ptr = X.copy()
    short_ptr.indptr = short_ptr.indptr[:-5]
    with pytest.raises(ShapeMismatchError, match="indptr"):
        iv.increment(short_ptr)
    np.testing.assert_array_equal(iv.get(), before_all)
    big = sp.csr_matrix(([2**31 - 1, 2**31 - 1], ([7, 7], [3, 3])), shape=SHAPE, dtype=np.int32)
    before = iv.get(rows=[7])[0, 3]
    with np.errstate(over="ignore"):
        want = np.int32(before) + np.int32(2**31 - 1) + np.int32(2**31 - 1)
    iv.increment(big)
    assert iv.get(rows=[7])[0, 3] == want
