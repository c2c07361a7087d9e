"""Server side of psfs without a cluster: staged views, two-phase holds, expiry, retries."""

from __future__ import annotations

import asyncio

import dask
import numpy as np
import pytest

from daskangel import ops
from daskangel.errors import BlockBusyError, PSFError, ShapeMismatchError
from daskangel.psarray import InitSpec, Partition, PSServer
from daskangel.psarray._blocks import DenseBlock, SparseBlock

SCALE = ops.Scale(2.0).psf_spec()
GEOM = [[1, False, 2]]


def make_server() -> PSServer:
    s = PSServer("local", 0)
    blocks = [
        {
            "block": b,
            "kind": "dense",
            "shape": (1, 4),
            "dtype": "float64",
            "init": InitSpec("const", 1.0).to_dict(),
            "row0": 0,
            "col0": 4 * b,
            "n_cols": 8,
        }
        for b in (0, 1)
    ]
    s.dispatch("create", array="w", blocks=blocks)
    return s


def psf_kwargs(**extra):
    parts = [{"block": 0, "params": {}}, {"block": 1, "params": {}}]
    return dict(
        array="w",
        parts=parts,
        spec=SCALE,
        arrays=["w"],
        geometry=GEOM,
        writes=[0],
        written=["w"],
        **extra,
    )


def values(s: PSServer) -> np.ndarray:
    return np.concatenate([s.block("w", b).data[0] for b in (0, 1)])


def inc_kwargs(v: float):
    return dict(
        array="w",
        add=True,
        parts=[{"block": 0, "rows": None, "cols": None, "values": np.full((1, 4), v)}],
    )


def test_partition_views_stage_and_protect():
    blk = DenseBlock(np.zeros((2, 3)))
    ro = Partition("w", 0, blk)
    with pytest.raises(ValueError, match="read-only"):
        ro.array[0, 0] = 1.0
    with pytest.raises(PermissionError, match="read-only in this psf"):
        ro.write([0], [0], [1.0])
    p = Partition("w", 0, blk, writable=True)
    p.data[0, 0] = 5.0
    p.write([1, 1], [2, 2], [7.0, 8.0])  # last duplicate wins
    assert blk.data.sum() == 0.0  # nothing before commit
    with pytest.raises(ShapeMismatchError, match=r"shape \(3,\)"):
        p.assign(np.zeros(3))
    p.validate()
    p.commit()
    assert blk.data.tolist() == [[5.0, 0.0, 0.0], [0.0, 0.0, 8.0]]


def test_sparse_partition_replace_reset_and_lazy_reads():
    blk = SparseBlock((2, 10), np.dtype("float64"), 0.0)
    p = Partition("s", 0, blk, writable=True)
    p.replace([3, 1], [1.0, 2.0])
    with pytest.raises(Exception, match="sorted, unique"):
        p.validate()
    p.replace([1, 13], [2.0, 1.0], default=0.5)
    p.validate()
    p.commit()
    assert blk.get(None, None).tolist()[1][3] == 1.0 and blk.default == 0.5
    lazy = SparseBlock((1, 100), np.dtype("float64"), 0.0, InitSpec("uniform", 0, 1, 3, True))
    q = Partition("l", 0, lazy)
    v = q.read([0, 0], [5, 7])
    assert lazy.n == 0  # reads draw, do not store
    np.testing.assert_array_equal(
        v, InitSpec("uniform", 0, 1, 3).draw(np.array([5, 7]), np.dtype("f8"))
    )


def test_update_psf_commits_all_blocks_and_applies_a_retry_once():
    s = make_server()
    kw = psf_kwargs(tag=["writer", 1])
    s.dispatch("psf_update", **kw)
    s.dispatch("psf_update", **kw)  # resent by the caller after a lost reply
    np.testing.assert_array_equal(values(s), np.full(8, 2.0))


async def _until(pred) -> None:
    while not pred():
        await asyncio.sleep(0)  # yields to the loop only; no wall-clock wait


def test_prepared_blocks_hold_writes_until_commit():
    async def main() -> None:
        s = make_server()
        await s.run("psf_prepare", **psf_kwargs(txn="t1", txn_wait=False))
        assert s.reserved == {("w", 0): "t1", ("w", 1): "t1"}
        np.testing.assert_array_equal(values(s), np.ones(8))  # staged, not applied
        inc = asyncio.ensure_future(s.run("update", **inc_kwargs(10.0)))
        await _until(lambda: len(s._cond._waiters) == 1)
        assert not inc.done()
        got = await s.run("get", array="w", parts=[{"block": 0, "rows": None, "cols": None}])
        np.testing.assert_array_equal(got[0], np.ones((1, 4)))  # reads are not held
        await s.run("psf_commit", array="w", parts=[{"block": 0}], txn="t1")
        await inc
        np.testing.assert_array_equal(values(s), [12, 12, 12, 12, 2, 2, 2, 2])
        assert s.reserved == {} and s.txns == {}
        # a resent commit is recognised; an unknown one is an error
        await s.run("psf_commit", array="w", parts=[{"block": 0}], txn="t1")
        with pytest.raises(PSFError, match="unknown"):
            await s.run("psf_commit", array="w", parts=[{"block": 0}], txn="nope")

    asyncio.run(main())


def test_conflicting_prepares_fail_fast_or_wait():
    async def main() -> None:
        s = make_server()
        await s.run("psf_prepare", **psf_kwargs(txn="a", txn_wait=False))
        with pytest.raises(BlockBusyError, match="held by another psf update"):
            await s.run("psf_prepare", **psf_kwargs(txn="b", txn_wait=False))
        waiting = asyncio.ensure_future(s.run("psf_prepare", **psf_kwargs(txn="b")))
        await _until(lambda: len(s._cond._waiters) == 1)
        await s.run("psf_abort", array="w", parts=[{"block": 0}], txn="a")
        await waiting
        assert set(s.reserved.values()) == {"b"}
        await s.run("psf_commit", array="w", parts=[{"block": 0}], txn="b")
        np.testing.assert_array_equal(values(s), np.full(8, 2.0))  # only b applied

    asyncio.run(main())


def test_prepared_transaction_expires():
    async def main() -> None:
        s = make_server()
        with dask.config.set({"daskangel.ops.prepare-timeout": "50ms"}):
            await s.run("psf_prepare", **psf_kwargs(txn="slow", txn_wait=False))
        await s.run("update", **inc_kwargs(1.0))  # waits out the expiry, then applies
        assert s.txns == {} and s.reserved == {}
        with pytest.raises(PSFError, match="expired"):
            await s.run("psf_commit", array="w", parts=[{"block": 0}], txn="slow")
        np.testing.assert_array_equal(values(s), [2, 2, 2, 2, 1, 1, 1, 1])

    asyncio.run(main())


def test_failed_prepare_holds_nothing():
    s = make_server()
    bad = psf_kwargs(txn="t", txn_wait=False)
    bad["spec"] = ops.Map("nope").psf_spec()
    with pytest.raises(PSFError, match="no registered function"):
        s.dispatch("psf_prepare", **bad)
    assert s.reserved == {} and s.txns == {}
    np.testing.assert_array_equal(values(s), np.ones(8))


def test_psf_updates_keep_snapshot_cuts_consistent():
    s = make_server()
    s.dispatch("cut_begin", clock=None)  # a cut "now": later writes stay out of it
    s.dispatch("psf_update", **psf_kwargs())
    cut = s.dispatch("cut_take", array="w", parts=[{"block": 0}, {"block": 1}])
    np.testing.assert_array_equal(np.concatenate([b.data[0] for b in cut]), np.ones(8))
    np.testing.assert_array_equal(values(s), np.full(8, 2.0))
    s.dispatch("cut_end")
    s.dispatch("cut_begin", clock=5)  # a cut at clock 5: a write of clock 4 is in it
    s.dispatch("psf_update", **psf_kwargs(clock=6))
    s.dispatch("psf_update", **psf_kwargs(clock=4))
    cut = s.dispatch("cut_take", array="w", parts=[{"block": 0}])
    np.testing.assert_array_equal(cut[0].data[0], np.full(4, 4.0))  # 2 -> (clock 4) 4
    np.testing.assert_array_equal(values(s), np.full(8, 8.0))  # live: both applied
    assert cut[0].data is not s.block("w", 0).data  # the cut never aliases the live block


def test_commit_refuses_a_block_replaced_since_prepare():
    s = make_server()
    s.dispatch("psf_prepare", **psf_kwargs(txn="t", txn_wait=False))
    s.blocks[("w", 1)] = DenseBlock(np.full((1, 4), 9.0), 0, 4, 8)  # e.g. a restore
    with pytest.raises(PSFError, match="was replaced"):
        s.dispatch("psf_commit", array="w", parts=[{"block": 0}], txn="t")
    np.testing.assert_array_equal(values(s), [1, 1, 1, 1, 9, 9, 9, 9])


def test_psf_before_a_cut_reads_the_cut_state_of_its_inputs():
    s = PSServer("local", 0)
    for name, v in (("x", 1.0), ("y", 10.0)):
        spec = {
            "block": 0,
            "kind": "dense",
            "shape": (1, 3),
            "dtype": "float64",
            "init": InitSpec("const", v).to_dict(),
            "row0": 0,
            "col0": 0,
            "n_cols": 3,
        }
        s.dispatch("create", array=name, blocks=[spec])
    s.dispatch("cut_begin", clock=5)
    s.dispatch(
        "update",
        array="x",
        add=True,
        clock=6,
        parts=[{"block": 0, "rows": None, "cols": None, "values": np.full((1, 3), 100.0)}],
    )
    axpy = dict(
        array="x",
        parts=[{"block": 0, "params": {}}],
        spec=ops.Axpy(2.0).psf_spec(),
        arrays=["x", "y"],
        geometry=[[1, False, 1]] * 2,
        writes=[1],
        written=["y"],
    )
    s.dispatch("psf_update", **axpy, clock=4)  # belongs in the cut: uses the cut's x
    cut = s.dispatch("cut_take", array="y", parts=[{"block": 0}])
    np.testing.assert_array_equal(cut[0].data, [[12.0, 12.0, 12.0]])  # 10 + 2 * 1
    np.testing.assert_array_equal(s.block("y", 0).data, [[212.0, 212.0, 212.0]])  # 10 + 2 * 101
