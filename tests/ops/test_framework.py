"""The psf framework on a real cluster: custom psfs by name, safety, atomicity, layouts."""

from __future__ import annotations

from dataclasses import dataclass

import dask
import numpy as np
import pytest

import daskangel as angel
from daskangel import ops
from daskangel._compat import workers_info
from daskangel.errors import NotCoPartitionedError, PSFError, PSFNotAllowedError

from .funcs import (
    AddOneFailOn,
    AddRowIndex,
    CountAbove,
    L1RowNormalize,
    Lerp,
    SumSqDiff,
    WriteReadOnly,
    WrongShape,
    allow_pickled,
)


def test_custom_get_and_update_psfs_run_by_name(ps):
    x = ps.from_array("x", np.arange(20.0).reshape(4, 5), block_shape=(2, 3))
    spec = CountAbove(9.5).psf_spec()
    assert spec == {"name": "tests.ops.funcs:CountAbove", "params": {"threshold": 9.5}}
    assert x.psf(CountAbove(9.5)) == 10
    fut = x.psf_async(ops.Scale(2.0))
    assert fut.result() is None
    np.testing.assert_array_equal(x.get(), np.arange(20.0).reshape(4, 5) * 2)


def test_helper_bases(ps):
    a = np.arange(1.0, 13.0).reshape(3, 4)
    x = ps.from_array("x", a, partitioner=angel.RangePartitioner(block_rows=2))
    y = ps.zeros_like(x, "y")
    x.psf(L1RowNormalize(), y)
    np.testing.assert_allclose(y.get(), a / a.sum(axis=1, keepdims=True))
    assert ps.psf(SumSqDiff(), x, y) == pytest.approx(((a - y.get()) ** 2).sum())
    np.testing.assert_allclose(ps.psf(SumSqDiff(axis=1), x, y), ((a - y.get()) ** 2).sum(1))
    x.psf(AddRowIndex())
    np.testing.assert_array_equal(x.get(), a + np.arange(3)[:, None])
    ps.psf(Lerp(t=0.25), x, y)
    np.testing.assert_allclose(x.get(), 0.75 * (a + np.arange(3)[:, None]) + 0.25 * y.get())
    cut = ps.zeros("cut", (3, 4), block_shape=(3, 2))
    with pytest.raises(ValueError, match="whole rows"):
        cut.psf(L1RowNormalize())


def test_not_copartitioned_error_shows_both_layouts(ps, client):
    x = ps.zeros("x", (100,), block_shape=(30,))
    y = ps.zeros("y", (100,), block_shape=(50,))
    with pytest.raises(NotCoPartitionedError) as e:
        ps.psf(ops.Axpy(alpha=1.0), x, y)
    msg = str(e.value)
    assert "'x'" in msg and "'y'" in msg and "[0, 30, 60, 90, 100]" in msg and "[0, 50, 100]" in msg
    assert "zeros_like" in msg
    # the same grid on different servers is not co-partitioned either
    w1, w2 = sorted(workers_info(client))
    with angel.PSContext(client, workers=[w1]) as p1, angel.PSContext(client, workers=[w2]) as p2:
        a = p1.zeros("a", (100,), block_shape=(50,))
        b = p2.zeros("b", (100,), block_shape=(50,))
        with pytest.raises(NotCoPartitionedError, match="placements differ"):
            ps.psf(ops.Dot(), a, b)


def test_zeros_like_is_coplaced_even_when_load_differs(ps):
    ps.zeros("ballast", (3,), block_shape=(3,))  # one block: servers now unevenly loaded
    x = ps.zeros("x", (4000,), block_shape=(1000,))
    y = ps.zeros_like(x)
    z = ps.full_like(x, 2.0, "z", dtype="float64")
    assert (
        [b.server for b in x.blocks] == [b.server for b in y.blocks] == [b.server for b in z.blocks]
    )
    assert y.name.startswith("x-like-")
    ps.psf(ops.Axpy(alpha=3.0), z, y)
    np.testing.assert_array_equal(y.get(), np.full(4000, 6.0, "float32"))


@pytest.mark.parametrize("kind", ["dense", "sparse"])
@pytest.mark.parametrize("one_server", [False, True])
def test_psf_failing_on_one_block_changes_nothing(client, kind, one_server):
    w = sorted(workers_info(client))
    with angel.PSContext(client, workers=w[:1] if one_server else None) as ps:
        if kind == "dense":
            x = ps.random("x", (6, 10), block_shape=(2, 5), seed=1)
        else:
            x = ps.full("x", (6, 10), 0.5, block_shape=(2, 5), sparse=True)
            x.set(np.arange(60.0, dtype="float32").reshape(6, 10)[:, :3], cols=[0, 4, 9])
        assert len({b.server for b in x.blocks}) == (1 if one_server else 2)
        before = x.get()
        for bad in (0, 3, 5):
            with pytest.raises(PSFError) as e:
                x.psf(AddOneFailOn(block=bad))
            msg = str(e.value)
            assert "remote traceback" in msg and f"boom on purpose in block {bad}" in msg
            assert "funcs.py" in msg and f"block {bad} of" in msg
            np.testing.assert_array_equal(x.get(), before)
        x.psf(AddOneFailOn(block=-1))  # fails nowhere: every block changes
        np.testing.assert_array_equal(x.get(), before + 1)


def test_read_only_operands_cannot_be_written(ps):
    x = ps.zeros("x", (10,), block_shape=(4,))
    y = ps.full_like(x, 5.0, "y")
    with pytest.raises(PSFError, match="read-only"):
        ps.psf(WriteReadOnly(), x, y)
    np.testing.assert_array_equal(x.get(), np.zeros(10))  # nothing committed
    np.testing.assert_array_equal(y.get(), np.full(10, 5.0))


def test_output_shape_is_checked(ps):
    x = ps.zeros("x", (10,), block_shape=(4,))
    with pytest.raises(PSFError, match=r"shape \(\), expected \(3,\)"):
        x.psf(WrongShape())


def test_psf_output_dtype_must_cast(ps):
    x = ps.zeros("x", (10,), dtype="int64", block_shape=(4,))
    with pytest.raises(PSFError, match="float64 values for a int64 array"):
        x.psf(ops.DivS(2.0))
    np.testing.assert_array_equal(x.get(), np.zeros(10))


@dataclass(frozen=True)
class LocalDouble(ops.UpdateFunc):
    """Defined in a test module but used as if local: travels by name (importable)."""

    def partition_update(self, part):
        part.data[...] *= 2


def test_pickled_psf_refused_by_default_and_allowed_by_config(ps, client):
    @dataclass(frozen=True)
    class Triple(ops.UpdateFunc):  # defined in a function: servers cannot import it
        def partition_update(self, part):
            part.data[...] *= 3

    x = ps.full("x", (10,), 1.0, block_shape=(4,))
    with pytest.raises(PSFNotAllowedError, match="allow-pickled-psf"):
        x.psf(Triple())
    with pytest.raises(PSFNotAllowedError, match="callable"):
        x.psf(ops.Map(np.negative))
    # the client allows it, the servers still refuse: the server is the boundary
    with dask.config.set({"daskangel.ops.allow-pickled-psf": True}):
        with pytest.raises(PSFNotAllowedError, match="server refuses"):
            x.psf(Triple())
        np.testing.assert_array_equal(x.get(), np.ones(10))
        client.run(allow_pickled, True)
        try:
            x.psf(Triple())
            x.psf(ops.Map(lambda v: v + 1))
        finally:
            client.run(allow_pickled, False)
    np.testing.assert_array_equal(x.get(), np.full(10, 4.0))
    x.psf(LocalDouble())  # importable: runs by name without any config
    np.testing.assert_array_equal(x.get(), np.full(10, 8.0))


def test_server_refuses_unregistered_names(ps):
    x = ps.zeros("x", (10,), block_shape=(4,))
    b = x._binding
    spec = {"name": "os:system", "params": {"command": "true"}}
    extra = {"spec": spec, "arrays": ["x"], "geometry": [[1, False, 3]]}
    with pytest.raises(PSFError, match="not a registered psf"):
        b.run(b.call_blocks, "x", "psf_get", {0: {"block": 0, "params": {}}}, {}, extra)
    spec = {"name": "no_such_module_xyz:F", "params": {}}
    with pytest.raises(PSFError, match="cannot import"):
        b.run(
            b.call_blocks,
            "x",
            "psf_get",
            {0: {"block": 0, "params": {}}},
            {},
            {**extra, "spec": spec},
        )


def test_concurrent_two_phase_updates_all_apply(ps):
    x = ps.zeros("x", (4000,), dtype="float64", block_shape=(500,))
    one = ps.full_like(x, 1.0, "one")
    futs = [ps.psf_async(ops.Axpy(alpha=float(i)), one, x) for i in range(1, 9)]
    futs += [x.increment_async(np.full(4000, 100.0)) for _ in range(4)]
    for f in futs:
        f.result()
    np.testing.assert_array_equal(x.get(), np.full(4000, 36.0 + 400.0))


def test_actors_transport_runs_psfs(client):
    with angel.PSContext(client, transport="actors") as ps:
        x = ps.from_array("x", np.arange(12.0), block_shape=(5,))
        y = ps.zeros_like(x)
        ps.psf(ops.Axpy(alpha=2.0), x, y)
        assert ps.psf(ops.Dot(), x, y) == pytest.approx(2 * (np.arange(12.0) ** 2).sum())
        with pytest.raises(PSFError, match="boom"):
            x.psf(AddOneFailOn(block=1))
        np.testing.assert_array_equal(x.get(), np.arange(12.0))


def test_psf_on_closed_context_and_bad_func(client):
    with angel.PSContext(client) as ps:
        x = ps.zeros("x", (10,))
        with pytest.raises(TypeError, match="expected a psf"):
            x.psf(np.sum)
        with pytest.raises(ValueError, match="takes 2 arrays"):
            x.psf(ops.Dot())
        with pytest.raises(TypeError, match="PSArray operands"):
            x.psf(ops.Add(), np.ones(10))
    with pytest.raises(angel.errors.ContextClosedError):
        x.psf(ops.Sum())


def test_lazy_random_sparse_arrays(ps):
    """Whole-array maps and reductions refuse lazily initialised sparse arrays; row and
    column pulls see the lazily drawn values, exactly as get does."""
    x = ps.random("x", (4, 50), seed=3, sparse=True, partitioner=angel.HashPartitioner(3))
    with pytest.raises(PSFError, match="lazy random initialisation"):
        x.psf(ops.Sum())
    with pytest.raises(PSFError, match="lazy random initialisation"):
        x.psf(ops.Scale(2.0))
    want = ps.random("dense", (4, 50), seed=3).get()
    np.testing.assert_array_equal(x.psf(ops.GetRows(rows=[2, 0])), want[[2, 0]])
    np.testing.assert_array_equal(x.psf(ops.GetCols(cols=[49, 7])), want[:, [49, 7]])
    x.psf(ops.Fill(1.0))  # no longer lazy: every entry reads 1
    assert x.psf(ops.Sum()) == 200.0
