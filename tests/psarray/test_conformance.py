"""Conformance: random sequences of operations against a NumPy model.

Runs on a real 2-process LocalCluster, for every transport that ships, over random
shapes, block shapes, partitioners, dtypes, dense and sparse storage.  Integer
results must match exactly, float results with ``allclose``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import daskangel as angel
from daskangel.psarray import InitSpec

TRANSPORTS = ["handlers", "actors"]
EXAMPLES = {"handlers": 40, "actors": 15}


@pytest.fixture(scope="module", params=TRANSPORTS)
def ctx(request: Any, client: Any) -> Any:
    with angel.PSContext(client, transport=request.param) as ps:
        yield ps


def _partitioner(draw: Any, shape: tuple[int, int], sparse: bool) -> Any:
    kind = draw(
        st.sampled_from(["auto", "block", "range", "colrange"] + (["hash"] if sparse else []))
    )
    if kind == "block":
        return angel.BlockPartitioner(
            (draw(st.integers(1, shape[0])), draw(st.integers(1, shape[1])))
        )
    if kind == "range":
        return angel.RangePartitioner(draw(st.integers(1, shape[0])))
    if kind == "colrange":
        return angel.ColumnRangePartitioner(draw(st.integers(1, shape[1])))
    if kind == "hash":
        return angel.HashPartitioner(draw(st.integers(1, 5)))
    return None


def _index(draw: Any, n: int) -> Any:
    kind = draw(st.sampled_from(["none", "list", "slice", "int"]))
    if kind == "none":
        return None
    if kind == "int":
        return draw(st.integers(0, n - 1))
    if kind == "slice":
        a = draw(st.integers(0, n - 1))
        return slice(a, draw(st.integers(a + 1, n)))
    return draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=2 * n))


@st.composite
def scenarios(draw: Any) -> dict[str, Any]:
    one_d = draw(st.booleans())
    shape = (
        (1, draw(st.integers(1, 80)))
        if one_d
        else (draw(st.integers(1, 30)), draw(st.integers(1, 40)))
    )
    sparse = draw(st.booleans())
    dtype = draw(st.sampled_from(["float32", "float64", "int32", "int64"]))
    init = draw(st.sampled_from(["zeros", "full", "random"]))
    ops = []
    for _ in range(draw(st.integers(1, 8))):
        op = draw(st.sampled_from(["get", "increment", "set", "fill", "coo"]))
        rows = None if one_d else _index(draw, shape[0])
        cols = _index(draw, shape[1])
        ops.append({"op": op, "rows": rows, "cols": cols, "seed": draw(st.integers(0, 2**31))})
    return {
        "one_d": one_d,
        "shape": shape,
        "sparse": sparse,
        "dtype": dtype,
        "init": init,
        "partitioner": _partitioner(draw, shape, sparse),
        "ops": ops,
    }


def _sel(model: np.ndarray, rows: Any, cols: Any, one_d: bool) -> Any:
    r = 0 if one_d else (slice(None) if rows is None else rows)
    c = slice(None) if cols is None else cols
    if isinstance(r, list) and isinstance(c, list):
        return np.ix_(r, c)
    return (r, c)


def _values(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    if dtype.startswith("int"):
        return rng.integers(-5, 6, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def _check(got: np.ndarray, want: np.ndarray, dtype: str) -> None:
    assert got.shape == want.shape, (got.shape, want.shape)
    assert got.dtype == np.dtype(dtype)
    if dtype.startswith("int"):
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


_counter = iter(range(10**9))


def run_scenario(ps: angel.PSContext, sc: dict[str, Any]) -> None:
    shape, dtype, one_d = sc["shape"], sc["dtype"], sc["one_d"]
    user_shape = (shape[1],) if one_d else shape
    name = f"conf-{next(_counter)}"
    kw = {"dtype": dtype, "sparse": sc["sparse"], "partitioner": sc["partitioner"]}
    if sc["init"] == "zeros":
        arr = ps.zeros(name, user_shape, **kw)
        model = np.zeros(shape, dtype)
    elif sc["init"] == "full":
        arr = ps.full(name, user_shape, 3, **kw)
        model = np.full(shape, 3, dtype)
    else:
        arr = ps.random(name, user_shape, seed=7, low=-2.0, high=2.0, **kw)
        spec = InitSpec("uniform", -2.0, 2.0, 7)
        model = spec.draw(np.arange(shape[0] * shape[1]), np.dtype(dtype)).reshape(shape)
    try:
        for o in sc["ops"]:
            rng = np.random.default_rng(o["seed"])
            sel = _sel(model, o["rows"], o["cols"], one_d)
            if o["op"] == "get":
                got = arr.get(rows=o["rows"], cols=o["cols"])
                want = model[sel]
                _check(got, want.reshape(got.shape) if one_d else want, dtype)
            elif o["op"] in ("increment", "set"):
                target = model[sel]
                vals = _values(rng, np.shape(target), dtype)
                if o["op"] == "increment":
                    arr.increment(vals, rows=o["rows"], cols=o["cols"])
                    np.add.at(model, sel, vals)
                else:
                    arr.set(vals, rows=o["rows"], cols=o["cols"])
                    model[sel] = vals
            elif o["op"] == "fill":
                arr.fill(2)
                model[...] = 2
            else:  # scipy.sparse increment with duplicate coordinates
                n = int(rng.integers(1, 20))
                r = rng.integers(0, shape[0], n)
                c = rng.integers(0, shape[1], n)
                v = _values(rng, (n,), dtype)
                arr.increment(sp.coo_matrix((v, (r, c)), shape=shape))
                np.add.at(model, (r, c), v)
        _check(arr.get(), model.reshape(arr.get().shape), dtype)
    finally:
        ps.drop(name)


@pytest.mark.timeout(600)
@pytest.mark.slow
def test_conformance(ctx: angel.PSContext) -> None:
    @settings(
        max_examples=EXAMPLES[ctx.transport],
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        derandomize=True,
    )
    @given(scenarios())
    def check(sc: dict[str, Any]) -> None:
        run_scenario(ctx, sc)

    check()
