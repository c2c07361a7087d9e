"""A PS server fenced for a job refuses the writes of that job's older runs
(``PSServer.check_fence``, the ``fence`` op): whole, with ``RolledBackError``,
also when the write is a resend of a tag it never saw."""

from __future__ import annotations

import numpy as np
import pytest

from daskangel.errors import JobAbortedError, PSFError, RolledBackError
from daskangel.psarray._initspec import InitSpec
from daskangel.psarray._server import PSServer
from tests.psarray.test_psf_server import inc_kwargs, make_server, psf_kwargs, values


def _server() -> PSServer:
    s = PSServer("local", 0)
    s.dispatch("create", array="w", blocks=[
        {"block": b, "kind": "dense", "shape": (1, 2), "dtype": "int64",
         "init": InitSpec().to_dict(), "row0": 0, "col0": 2 * b, "n_cols": 2}
        for b in (0, 1)
    ])  # fmt: skip
    return s


def _add(s: PSServer, fence: list | None, seq: int, op: str = "update") -> object:
    parts = [
        {"block": b, "rows": None, "cols": np.array([0, 1]), "values": np.ones((1, 2), "int64")}
        for b in (0, 1)
    ]
    return s.dispatch(op, array="w", add=True, parts=parts, tag=["writer", seq], fence=fence)


def _values(s: PSServer) -> list[int]:
    got = s.dispatch(
        "get", array="w", parts=[{"block": b, "rows": None, "cols": None} for b in (0, 1)]
    )
    return [int(v) for g in got for v in g.ravel()]


@pytest.mark.timeout(30)
def test_fenced_server_refuses_older_runs_of_the_job_only() -> None:
    s = _server()
    assert _add(s, ["j", 1], 0) is True  # no fence yet: every run writes
    s.dispatch("fence", job="j", epoch=2)
    with pytest.raises(RolledBackError, match=r"run 1 of job 'j'.*run 2") as e:
        _add(s, ["j", 1], 1)
    assert isinstance(e.value, JobAbortedError)  # the stale task ends as "aborted"
    assert _values(s) == [1, 1, 1, 1]  # nothing of the refused write was applied
    assert _add(s, ["j", 2], 2) is True  # the new run
    assert _add(s, ["other", 1], 3) is True  # another job's run
    assert _add(s, None, 4) is True  # not a training task's write
    assert _values(s) == [4, 4, 4, 4]
    s.dispatch("fence", job="j", epoch=1)  # a fence never moves back
    with pytest.raises(RolledBackError):
        _add(s, ["j", 1], 5)


@pytest.mark.timeout(30)
def test_fill_of_an_abandoned_run_is_refused() -> None:
    s = _server()
    s.dispatch("fence", job="j", epoch=3)
    with pytest.raises(RolledBackError):
        s.dispatch("fill", array="w", parts=[{"block": 0}, {"block": 1}], value=7, fence=["j", 2])
    assert _values(s) == [0, 0, 0, 0]
    s.dispatch("fill", array="w", parts=[{"block": 0}, {"block": 1}], value=7, fence=["j", 3])
    assert _values(s) == [7, 7, 7, 7]


@pytest.mark.timeout(30)
def test_psf_updates_of_an_abandoned_run_are_refused_before_anything_is_held() -> None:
    """A server-side update (an optimiser step, any update psf), single-phase or the
    prepare of two-phase, of a run a rollback abandoned: refused, nothing applied,
    no block held for its transaction; the new run's step goes through."""
    s = make_server()
    s.dispatch("fence", job="j", epoch=2)
    before = values(s).copy()
    with pytest.raises(RolledBackError):
        s.dispatch("psf_update", **psf_kwargs(tag=["writer", 0], fence=["j", 1]))
    with pytest.raises(RolledBackError):
        s.dispatch("psf_prepare", **psf_kwargs(txn="t-old", fence=["j", 1]))
    assert "t-old" not in s.txns  # nothing reserved for the refused prepare
    np.testing.assert_array_equal(values(s), before)
    s.dispatch("psf_update", **psf_kwargs(tag=["writer", 1], fence=["j", 2]))
    assert not np.array_equal(values(s), before)


@pytest.mark.timeout(30)
def test_fence_aborts_the_prepared_transactions_of_the_abandoned_run() -> None:
    """A two-phase psf update prepared by a run a rollback then abandons: the fence
    drops its holds and staged changes (nobody of the new run waits for its commit),
    the late commit is refused with ``RolledBackError`` and applies nothing, an abort
    is harmless; another job's and an untagged transaction keep theirs."""
    s = make_server()
    before = values(s).copy()
    s.dispatch("psf_prepare", **psf_kwargs(txn="t-old", fence=["j", 1]))
    assert set(s.reserved.values()) == {"t-old"}
    s.dispatch("fence", job="j", epoch=2)
    assert s.txns == {} and s.reserved == {}  # nothing left to block the new run
    assert s.blocked_until("update", inc_kwargs(1.0)) is None
    with pytest.raises(RolledBackError, match="run 1 of job 'j'"):
        s.dispatch("psf_commit", array="w", parts=[{"block": 0}], txn="t-old", fence=["j", 1])
    np.testing.assert_array_equal(values(s), before)
    assert s.dispatch("psf_abort", array="w", parts=[{"block": 0}], txn="t-old",
                      fence=["j", 1]) == [True]  # fmt: skip
    # a transaction of another job, and one made outside training, are not touched
    s.dispatch("psf_prepare", **psf_kwargs(txn="t-other", fence=["k", 1]))
    s.dispatch("fence", job="j", epoch=3)
    assert set(s.txns) == {"t-other"}
    s.dispatch("psf_commit", array="w", parts=[{"block": 0}], txn="t-other", fence=["k", 1])
    s.dispatch("psf_prepare", **psf_kwargs(txn="t-none"))
    s.dispatch("fence", job="j", epoch=4)
    assert set(s.txns) == {"t-none"}
    s.dispatch("psf_commit", array="w", parts=[{"block": 0}], txn="t-none")
    assert not np.array_equal(values(s), before)


@pytest.mark.timeout(30)
def test_a_commit_of_the_abandoned_run_racing_the_fence_is_refused_and_frees_its_hold() -> None:
    """A commit that reached the server before the fence op does (its transaction still
    prepared) but after the run was fenced elsewhere: refused, hold released."""
    s = make_server()
    before = values(s).copy()
    s.dispatch("psf_prepare", **psf_kwargs(txn="t", fence=["j", 1]))
    s.fences["j"] = 2  # fenced, the transaction not yet aborted
    with pytest.raises(RolledBackError):
        s.dispatch("psf_commit", array="w", parts=[{"block": 0}], txn="t", fence=["j", 1])
    assert s.txns == {} and s.reserved == {}
    np.testing.assert_array_equal(values(s), before)


@pytest.mark.timeout(30)
def test_restoring_a_held_block_aborts_the_transaction_holding_it() -> None:
    """A restore replacing a block a prepared transaction holds (its staged changes
    were computed on the old block, its commit would be refused): the hold goes with
    the old block, so writes to the restored block do not wait for it to expire."""
    s = make_server()
    s.dispatch("psf_prepare", **psf_kwargs(txn="t"))
    fresh = s.block("w", 1).copy()
    s.staged["tok"] = [(("w", 1), fresh)]
    assert s.dispatch("restore_commit", token="tok") == 1
    assert s.txns == {} and s.reserved == {}
    assert s.block("w", 1) is fresh
    with pytest.raises(PSFError, match="unknown"):
        s.dispatch("psf_commit", array="w", parts=[{"block": 0}], txn="t")


@pytest.mark.timeout(30)
def test_release_origin_aborts_a_left_workers_transactions_and_refuses_its_late_prepare() -> None:
    """``recovery="continue"`` fences no run: when a worker leaves, the scheduler has
    every server abort the two-phase updates that worker prepared (their commit
    cannot come; writes to the held blocks waited for ``prepare-timeout``), and a
    prepare of that worker still in flight is refused, nothing held."""
    s = make_server()
    before = values(s).copy()
    s.dispatch("psf_prepare", **psf_kwargs(txn="t-gone", origin="tcp://gone:1"))
    assert s.blocked_until("update", inc_kwargs(1.0)) is not None
    assert s.dispatch("release_origin", worker="tcp://gone:1") == ["t-gone"]
    assert s.txns == {} and s.reserved == {}
    assert s.blocked_until("update", inc_kwargs(1.0)) is None
    with pytest.raises(PSFError, match="worker tcp://gone:1 left"):
        s.dispatch("psf_prepare", **psf_kwargs(txn="t-late", origin="tcp://gone:1"))
    assert s.txns == {}
    # another worker's transaction, and a client's, are left to their commit
    s.dispatch("psf_prepare", **psf_kwargs(txn="t-live", origin="tcp://live:2"))
    assert s.dispatch("release_origin", worker="tcp://other:3") == []
    s.dispatch("psf_commit", array="w", parts=[{"block": 0}], txn="t-live")
    s.dispatch("psf_prepare", **psf_kwargs(txn="t-client"))
    assert s.dispatch("release_origin", worker="tcp://gone:1") == []
    s.dispatch("psf_commit", array="w", parts=[{"block": 0}], txn="t-client")
    assert not np.array_equal(values(s), before)


def _ranked() -> PSServer:
    s = PSServer("local", 0)
    for name in ("c", "i"):
        s.dispatch("create", array=name, blocks=[
            {"block": 0, "kind": "sparse", "shape": (1, 100), "dtype": "int64",
             "init": InitSpec().to_dict(), "row0": 0, "col0": 0, "n_cols": 100}
        ])  # fmt: skip
    s.dispatch("update", array="c", add=True, parts=[{"block": 0, "rows": None,
               "cols": np.array([40, 7, 9]), "values": np.array([[3, 1, 2]])}])  # fmt: skip
    return s


@pytest.mark.timeout(30)
def test_rank_into_is_a_fenced_write_of_its_destination() -> None:
    """``rank_into`` (``FeatureIndexer.aggregate``) writes the index array: it waits
    while a prepared transaction holds a destination block, and a run a rollback
    abandoned is refused before anything is written (on the driver it carries none)."""
    s = _ranked()
    kw = {"array": "c", "parts": [{"block": 0, "offset": 10}], "dst": "i", "threshold": 2,
          "written": ["i"]}  # fmt: skip
    s.reserve("t", [("i", 0)], None, 60.0)
    assert s.blocked_until("rank_into", kw) is not None  # waits for the hold on "i"
    s.release("t")
    s.reserve("t", [("c", 0)], None, 60.0)
    assert s.blocked_until("rank_into", kw) is None  # "c" is only read
    s.release("t")
    s.dispatch("fence", job="j", epoch=2)
    with pytest.raises(RolledBackError, match="array 'i'"):
        s.dispatch("rank_into", **kw, fence=["j", 1])
    got = s.dispatch(
        "get", array="i", parts=[{"block": 0, "rows": None, "cols": np.array([7, 9, 40])}]
    )
    assert got[0].tolist() == [[0, 0, 0]]  # nothing written
    assert s.dispatch("rank_into", **kw, fence=None) == [2]
    got = s.dispatch(
        "get", array="i", parts=[{"block": 0, "rows": None, "cols": np.array([7, 9, 40])}]
    )
    assert got[0].tolist() == [[0, 11, 12]]
