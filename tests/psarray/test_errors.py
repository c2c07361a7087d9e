"""Every documented error, and that a rejected request changes nothing."""

from __future__ import annotations

from typing import Any

import dask
import numpy as np
import pytest
from distributed import Client

import daskangel as angel
from daskangel import errors
from tests.conftest import kill_worker, make_cluster


@pytest.fixture
def arrays(ps: angel.PSContext) -> tuple[Any, Any, np.ndarray, np.ndarray]:
    w = ps.random("w", (1000,), seed=1, block_shape=(300,))
    s = ps.random("s", (2**40,), seed=2, sparse=True)
    s.increment(np.ones(3, "float32"), cols=[5, 2**30, 2**39])
    return w, s, w.get(), s.get(cols=[5, 2**30, 2**39, 77])


def unchanged(arrays: Any) -> None:
    w, s, w0, s0 = arrays
    np.testing.assert_array_equal(w.get(), w0)
    np.testing.assert_array_equal(s.get(cols=[5, 2**30, 2**39, 77]), s0)


def test_index_out_of_range(arrays: Any) -> None:
    w, s, *_ = arrays
    with pytest.raises(
        errors.PSIndexError, match=r"cols: index 1000 \(at position 2\) is out of range \[0, 1000\)"
    ):
        w.increment(np.ones(3, "float32"), cols=[1, 2, 1000])
    with pytest.raises(IndexError, match=r"cols: index -1"):
        w.get(cols=[0, -1])
    with pytest.raises(IndexError, match=r"cols: index 1099511627776 .* out of range"):
        s.set(np.ones(1, "float32"), cols=[2**40])
    with pytest.raises(errors.PSIndexError, match="rows: array 'w' is 1-D"):
        w.get(rows=[0])
    unchanged(arrays)


def test_index_not_integer(arrays: Any) -> None:
    w, *_ = arrays
    with pytest.raises(
        errors.PSIndexError, match="cols: expected integer indices, got dtype float64"
    ):
        w.increment(np.ones(2, "float32"), cols=[1.0, 2.5])
    with pytest.raises(errors.PSIndexError, match="boolean mask of length 3"):
        w.get(cols=[True, False, True])
    unchanged(arrays)


def test_shape_mismatch(arrays: Any) -> None:
    w, *_ = arrays
    with pytest.raises(
        errors.ShapeMismatchError, match=r"values: expected shape \(3,\).*got \(4,\)"
    ):
        w.increment(np.ones(4, "float32"), cols=[1, 2, 3])
    with pytest.raises(ValueError, match="values: expected a sparse matrix of shape"):
        import scipy.sparse as sp

        w.increment(sp.csr_matrix(np.ones((2, 2), "float32")))
    unchanged(arrays)


def test_casting(arrays: Any) -> None:
    w, *_ = arrays
    with pytest.raises(
        errors.CastingError, match="cannot cast float64 to the array's float32 under casting='safe'"
    ):
        w.increment(np.ones(2), cols=[1, 2])
    with pytest.raises(TypeError):
        w.set(np.array([1e300, 1.0]), cols=[1, 2], casting="same_kind")  # overflow
    unchanged(arrays)
    w.increment(np.ones(2), cols=[1, 2], casting="same_kind")
    assert w.get(cols=[1])[0] == pytest.approx(arrays[2][1] + 1)
    # a Python number takes the array's dtype (NEP 50), within its range
    w.increment(0.5, cols=[1])
    assert w.get(cols=[1])[0] == pytest.approx(arrays[2][1] + 1.5)
    with pytest.raises(errors.CastingError, match="values: 1 entries overflow float32"):
        w.increment(1e300, cols=[1])
    assert w.get(cols=[1])[0] == pytest.approx(arrays[2][1] + 1.5)


def test_nonfinite(arrays: Any) -> None:
    w, *_ = arrays
    with pytest.raises(errors.NonFiniteError, match="values: 2 non-finite entries"):
        w.increment(np.array([1, np.nan, np.inf], "float32"), cols=[1, 2, 3])
    unchanged(arrays)
    w.increment(np.array([1, np.nan, 5], "float32"), cols=[1, 2, 3], on_nonfinite="skip")
    got = w.get(cols=[1, 2, 3])
    np.testing.assert_allclose(got, arrays[2][[1, 2, 3]] + [1, 0, 5], rtol=1e-6)


def test_unknown_and_duplicate_names(ps: angel.PSContext, arrays: Any) -> None:
    with pytest.raises(errors.ArrayNotFoundError, match="no array named 'nope'"):
        ps.get_array("nope")
    with pytest.raises(KeyError):
        angel.PSArray("nope").get()
    with pytest.raises(errors.ArrayExistsError, match="an array named 'w' already exists"):
        ps.zeros("w", (5,))
    unchanged(arrays)


def test_bad_creation_arguments(ps: angel.PSContext) -> None:
    with pytest.raises(TypeError, match="dtype: expected one of"):
        ps.zeros("x", (5,), dtype="complex64")
    with pytest.raises(ValueError, match="shape: expected 1 or 2 positive extents"):
        ps.zeros("x", (0, 3))
    with pytest.raises(
        ValueError, match="HashPartitioner spreads columns by hash and needs sparse=True"
    ):
        ps.zeros("x", (10,), partitioner=angel.HashPartitioner(2))
    with pytest.raises(ValueError, match="dist: expected 'uniform' or 'normal'"):
        ps.random("x", (3,), dist="poisson")
    assert "x" not in ps.arrays()


def test_request_too_large(arrays: Any) -> None:
    w, *_ = arrays
    with dask.config.set({"daskangel.client.max-request-bytes": 1000}):
        with pytest.raises(
            errors.RequestTooLargeError, match=r"get: .*\(4,000 bytes\) exceeds .*nothing was"
        ):
            w.get()
        with pytest.raises(errors.RequestTooLargeError, match=r"values: .*\(4,000 bytes\) exceeds"):
            w.increment(np.ones(1000, "float32"))
    unchanged(arrays)


def test_use_after_close(client: Client) -> None:
    with angel.PSContext(client) as ctx:
        a = ctx.zeros("closing", (10,))
        a.increment(np.ones(10, "float32"))
    with pytest.raises(errors.ContextClosedError, match="PSContext is closed"):
        a.get()
    with pytest.raises(RuntimeError, match="was freed when its PSContext closed"):
        angel.PSArray("closing").get()
    with pytest.raises(errors.ContextClosedError):
        ctx.zeros("again", (3,))


@pytest.mark.timeout(120)
def test_lost_server_without_snapshot() -> None:
    with (
        dask.config.set({"daskangel.client.connect-timeout": "2s"}),
        make_cluster(n_workers=2, threads=1) as cluster,
        Client(cluster) as c,
        angel.PSContext(c) as ctx,
    ):
        w = ctx.zeros("w", (100,), block_shape=(50,))
        w.increment(np.ones(100, "float32"))
        victim = w.blocks[1].server.address
        kill_worker(c, cluster, victim)
        with pytest.raises(
            errors.ServerLostError, match=rf"{victim}#0 left the cluster holding blocks \[1\]"
        ):
            w.get()
        with pytest.raises(ConnectionError):
            w.increment(np.ones(100, "float32"))
