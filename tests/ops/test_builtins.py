"""Every built-in psf against NumPy, on random shapes, partitionings, dense and sparse."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import daskangel as angel
from daskangel import ops

from .conftest import build, drop, layouts

SETTINGS = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
seeds = st.integers(0, 2**16)


def tol(dtype: str) -> dict[str, float]:
    return {"rtol": 2e-6, "atol": 1e-5} if dtype == "float32" else {"rtol": 1e-10, "atol": 1e-9}


# -- reductions ----------------------------------------------------------------------------

REDUCTIONS = {
    "Sum": (lambda ax: ops.Sum(axis=ax), lambda a, ax: a.astype(np.float64).sum(axis=ax)),
    "Asum": (lambda ax: ops.Asum(axis=ax), lambda a, ax: np.abs(a.astype(float)).sum(axis=ax)),
    "Max": (lambda ax: ops.Max(axis=ax), lambda a, ax: a.max(axis=ax)),
    "Min": (lambda ax: ops.Min(axis=ax), lambda a, ax: a.min(axis=ax)),
    "Amax": (lambda ax: ops.Amax(axis=ax), lambda a, ax: np.abs(a).max(axis=ax)),
    "Amin": (lambda ax: ops.Amin(axis=ax), lambda a, ax: np.abs(a).min(axis=ax)),
    "Nnz": (lambda ax: ops.Nnz(axis=ax), lambda a, ax: (a != 0).sum(axis=ax)),
    "Nrm2": (
        lambda ax: ops.Nrm2(axis=ax),
        lambda a, ax: np.sqrt((a.astype(float) ** 2).sum(axis=ax)),
    ),
    "Norm1": (
        lambda ax: ops.Norm(ord=1, axis=ax),
        lambda a, ax: np.abs(a.astype(float)).sum(axis=ax),
    ),
    "Norm2": (
        lambda ax: ops.Norm(ord=2, axis=ax),
        lambda a, ax: np.sqrt((a.astype(float) ** 2).sum(axis=ax)),
    ),
}


@SETTINGS
@given(
    lay=layouts(dtypes=("float64", "float32", "int64")),
    seed=seeds,
    name=st.sampled_from(sorted(REDUCTIONS)),
    axis=st.sampled_from([None, 0, 1]),
)
def test_reduction_matches_numpy(mps, lay, seed, name, axis):
    make, ref = REDUCTIONS[name]
    if lay.ndim == 1 and axis == 1:
        axis = None
    x = build(mps, lay, seed)
    try:
        if lay.kind == "hash" and axis == 0 and lay.ndim == 2:
            with pytest.raises(ValueError, match="per-column"):
                x.arr.psf(make(axis))
            return
        got = x.arr.psf(make(axis))
        want = ref(x.ref, axis)
        assert np.shape(got) == np.shape(want)
        np.testing.assert_allclose(got, want, **tol(lay.dtype))
        if name in ("Sum", "Asum") and lay.dtype != "int64":
            assert np.asarray(got).dtype == np.float64
        if name == "Sum" and lay.dtype == "int64":
            assert np.asarray(got).dtype == np.int64
    finally:
        drop(mps, x)


def test_reduction_of_vector_rejects_axis_1(mps):
    x = mps.zeros("v", (5,))
    with pytest.raises(ValueError, match="axis"):
        x.psf(ops.Sum(axis=1))


@SETTINGS
@given(lay=layouts(dtypes=("float64", "float32")), seed=seeds, axis=st.sampled_from([None, 1]))
def test_dot_matches_numpy(mps, lay, seed, axis):
    x = build(mps, lay, seed)
    y = build(mps, lay, seed + 1, like=x.arr)
    try:
        if lay.ndim == 1:
            axis = None
        got = mps.psf(ops.Dot(axis=axis), x.arr, y.arr)
        want = (x.ref.astype(float) * y.ref.astype(float)).sum(axis=axis)
        np.testing.assert_allclose(got, want, **tol(lay.dtype))
    finally:
        drop(mps, x, y)


@SETTINGS
@given(lay=layouts(), seed=seeds, data=st.data())
def test_dot_of_two_rows(mps, lay, seed, data):
    x = build(mps, lay, seed)
    y = build(mps, lay, seed + 7, like=x.arr)
    try:
        r0, r1 = x.arr.blocks[0].rows  # two rows of the first row block
        i = data.draw(st.integers(r0, r1 - 1))
        j = data.draw(st.integers(r0, r1 - 1))
        xr = x.ref.reshape(lay.rows, lay.cols)
        yr = y.ref.reshape(lay.rows, lay.cols)
        got = mps.psf(ops.Dot(rows=(i, j)), x.arr, y.arr)
        np.testing.assert_allclose(got, xr[i] @ yr[j], **tol(lay.dtype))
        got_same = mps.psf(ops.Dot(rows=(i, j)), x.arr, x.arr)
        np.testing.assert_allclose(got_same, xr[i] @ xr[j], **tol(lay.dtype))
    finally:
        drop(mps, x, y)


# -- element-wise maps -----------------------------------------------------------------------

POS = (0.1, 3.0)
UNARY = {
    "Abs": (ops.Abs(), np.abs, None),
    "Exp": (ops.Exp(), np.exp, None),
    "Expm1": (ops.Expm1(), np.expm1, None),
    "Log": (ops.Log(), np.log, POS),
    "Log10": (ops.Log10(), np.log10, POS),
    "Log1p": (ops.Log1p(), np.log1p, POS),
    "Sqrt": (ops.Sqrt(), np.sqrt, POS),
    "Ceil": (ops.Ceil(), np.ceil, None),
    "Floor": (ops.Floor(), np.floor, None),
    "Round": (ops.Round(), np.round, None),
    "Signum": (ops.Signum(), np.sign, None),
    "Pow": (ops.Pow(3.0), lambda a: a**3, None),
    "Clip": (ops.Clip(-1.0, 0.5), lambda a: np.clip(a, -1.0, 0.5), None),
    "SoftThreshold": (
        ops.SoftThreshold(0.7),
        lambda a: np.sign(a) * np.maximum(np.abs(a) - 0.7, 0),
        None,
    ),
    "AddS": (ops.AddS(1.25), lambda a: a + 1.25, None),
    "SubS": (ops.SubS(1.25), lambda a: a - 1.25, None),
    "MulS": (ops.MulS(-2.5), lambda a: a * -2.5, None),
    "DivS": (ops.DivS(4.0), lambda a: a / 4.0, None),
    "Scale": (ops.Scale(0.5), lambda a: a * 0.5, None),
    "Map-name": (ops.Map("square"), np.square, None),
    "Map-args": (ops.Map("clip", (None, 1.0)), lambda a: np.clip(a, None, 1.0), None),
    "MapWithIndex": (
        ops.MapWithIndex("tests.ops.funcs:plus_index"),
        None,  # filled below: needs the indices
        None,
    ),
}


@SETTINGS
@given(
    lay=layouts(dtypes=("float64", "float32")),
    seed=seeds,
    name=st.sampled_from(sorted(UNARY)),
    into_other=st.booleans(),
)
def test_unary_map_matches_numpy(mps, lay, seed, name, into_other):
    func, ref, domain = UNARY[name]
    low, high = domain or (-3.0, 3.0)
    x = build(mps, lay, seed, low=low, high=high)
    out = build(mps, lay, seed + 1, like=x.arr) if into_other else x
    try:
        if name == "MapWithIndex":
            if lay.kind != "dense":
                with pytest.raises(angel.errors.PSFError, match="indices is undefined"):
                    mps.psf(func, *([x.arr, out.arr] if into_other else [x.arr]))
                return
            rows, cols = np.indices((lay.rows, lay.cols))
            want = (x.ref.reshape(lay.rows, lay.cols) + rows * 1000 + cols).reshape(x.ref.shape)
        else:
            want = ref(x.ref)
        before = x.arr.get()
        mps.psf(func, *([x.arr, out.arr] if into_other else [x.arr]))
        np.testing.assert_allclose(out.arr.get(), want.astype(lay.dtype), **tol(lay.dtype))
        if into_other:
            np.testing.assert_array_equal(x.arr.get(), before)
    finally:
        drop(mps, *({id(b): b for b in (x, out)}.values()))


BINARY = {
    "Add": (ops.Add(), np.add),
    "Sub": (ops.Sub(), np.subtract),
    "Mul": (ops.Mul(), np.multiply),
    "Div": (ops.Div(), np.divide),
    "MaxV": (ops.MaxV(), np.maximum),
    "MinV": (ops.MinV(), np.minimum),
    "Zip2Map": (ops.Zip2Map("max"), np.maximum),
}


@SETTINGS
@given(
    lay=layouts(dtypes=("float64", "float32")),
    seed=seeds,
    name=st.sampled_from(sorted(BINARY)),
    into_other=st.booleans(),
)
def test_binary_map_matches_numpy(mps, lay, seed, name, into_other):
    func, ref = BINARY[name]
    a = build(mps, lay, seed)
    b = build(mps, lay, seed + 1, like=a.arr, low=0.5 if name == "Div" else -3.0)
    out = build(mps, lay, seed + 2, like=a.arr) if into_other else a
    try:
        mps.psf(func, a.arr, b.arr, *([out.arr] if into_other else []))
        np.testing.assert_allclose(
            out.arr.get(), ref(a.ref, b.ref).astype(lay.dtype), **tol(lay.dtype)
        )
        np.testing.assert_array_equal(b.arr.get(), b.ref)
    finally:
        drop(mps, *({id(v): v for v in (a, b, out)}.values()))


@SETTINGS
@given(lay=layouts(dtypes=("float64", "float32")), seed=seeds, alpha=st.floats(-3, 3))
def test_axpy_copy_fma(mps, lay, seed, alpha):
    x = build(mps, lay, seed)
    y = build(mps, lay, seed + 1, like=x.arr)
    z = build(mps, lay, seed + 2, like=x.arr)
    try:
        mps.psf(ops.Axpy(alpha=alpha), x.arr, y.arr)  # y += alpha x
        want = (alpha * x.ref.astype(float) + y.ref).astype(lay.dtype)
        np.testing.assert_allclose(y.arr.get(), want, **tol(lay.dtype))
        np.testing.assert_array_equal(x.arr.get(), x.ref)
        mps.psf(ops.Zip3Map("fma"), x.arr, x.arr, z.arr)  # x = x * x + z
        np.testing.assert_allclose(x.arr.get(), x.ref * x.ref + z.ref, **tol(lay.dtype))
        mps.psf(ops.Copy(), z.arr, y.arr)  # y = z
        np.testing.assert_array_equal(y.arr.get(), z.ref)
    finally:
        drop(mps, x, y, z)


@SETTINGS
@given(lay=layouts(dtypes=("float64",)), seed=seeds, scale=st.floats(-2, 2))
def test_zip_maps_with_index(mps, lay, seed, scale):
    a = build(mps, lay, seed)
    b = build(mps, lay, seed + 1, like=a.arr)
    c = build(mps, lay, seed + 2, like=a.arr)
    try:
        rows, cols = np.indices((lay.rows, lay.cols))
        rows, cols = rows.reshape(a.ref.shape), cols.reshape(a.ref.shape)
        z2 = ops.Zip2MapWithIndex("tests.ops.funcs:zip_plus_index", (scale,))
        z3 = ops.Zip3MapWithIndex("tests.ops.funcs:zip3_plus_index")
        if lay.kind != "dense":
            with pytest.raises(angel.errors.PSFError, match="indices is undefined"):
                mps.psf(z2, a.arr, b.arr, c.arr)
            return
        mps.psf(z2, a.arr, b.arr, c.arr)  # c = a - b + scale * (100 r + c)
        want_c = a.ref - b.ref + scale * (rows * 100 + cols)
        np.testing.assert_allclose(c.arr.get(), want_c, **tol(lay.dtype))
        mps.psf(z3, a.arr, b.arr, c.arr)  # a = a * b + c + r - col
        np.testing.assert_allclose(
            a.arr.get(), a.ref * b.ref + want_c + rows - cols, **tol(lay.dtype)
        )
    finally:
        drop(mps, a, b, c)


# -- initialisation ---------------------------------------------------------------------------


@SETTINGS
@given(lay=layouts(dtypes=("float64", "float32")), seed=seeds, which=st.integers(0, 5))
def test_random_init_is_partition_independent(mps, lay, seed, which):
    x = build(mps, lay, seed)
    rows, cols = lay.rows, lay.cols
    funcs = [
        (ops.RandomUniform(-2.0, 3.0, seed=seed), "uniform", -2.0, 3.0),
        (ops.RandomNormal(1.0, 2.0, seed=seed), "normal", 1.0, 2.0),
    ]
    b_x = float(np.sqrt(6.0 / (rows + cols)))
    funcs.append((ops.XavierUniform(seed=seed), "uniform", -b_x, b_x))
    funcs.append((ops.XavierNormal(seed=seed), "normal", 0.0, float(np.sqrt(2.0 / (rows + cols)))))
    b_k = float(np.sqrt(2.0) * np.sqrt(3.0 / cols))
    funcs.append((ops.KaimingUniform(seed=seed), "uniform", -b_k, b_k))
    funcs.append((ops.KaimingNormal(mode="fan_out", seed=seed), "normal", 0.0, np.sqrt(2.0 / rows)))
    func, dist, a, b = funcs[which]
    kw = {"low": a, "high": b} if dist == "uniform" else {"loc": a, "scale": b}
    other = mps.random("r-" + x.arr.name, lay.shape, seed=seed, dist=dist, dtype=lay.dtype, **kw)
    try:
        x.arr.psf(func)
        np.testing.assert_allclose(x.arr.get(), other.get(), rtol=1e-6)
        if dist == "uniform":
            v = x.arr.get()
            assert v.min() >= min(a, b) - 1e-6 and v.max() <= max(a, b) + 1e-6
    finally:
        drop(mps, x)
        mps.drop(other.name)


@SETTINGS
@given(lay=layouts(dtypes=("float64", "int64")), seed=seeds, k=st.integers(-3, 3))
def test_fill_reset_eye_diag(mps, lay, seed, k):
    x = build(mps, lay, seed)
    try:
        x.arr.psf(ops.Fill(4.0))
        np.testing.assert_array_equal(x.arr.get(), np.full(lay.shape, 4.0))
        x.arr.psf(ops.Reset())
        np.testing.assert_array_equal(x.arr.get(), np.zeros(lay.shape))
        x.arr.psf(ops.Eye(k=k))
        eye = np.eye(lay.rows, lay.cols, k)
        np.testing.assert_array_equal(x.arr.get(), eye if lay.ndim == 2 else eye[0])
        d = np.arange(1, lay.rows + 1, dtype=lay.dtype) * 2
        x.arr.psf(ops.Diag(d, k=k))
        want = eye * d[:, None]
        np.testing.assert_array_equal(x.arr.get(), want if lay.ndim == 2 else want[0])
    finally:
        drop(mps, x)


# -- selections ----------------------------------------------------------------------------------


def _topk(a2: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(-a2, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(a2, order, axis=1), order


@SETTINGS
@given(lay=layouts(dtypes=("float64", "int64")), seed=seeds, k=st.integers(1, 6))
def test_argmax_and_topk(mps, lay, seed, k):
    x = build(mps, lay, seed)
    try:
        a2 = x.ref.reshape(lay.rows, lay.cols)
        assert x.arr.psf(ops.Argmax()) == np.argmax(x.ref)
        if lay.ndim == 2:
            np.testing.assert_array_equal(x.arr.psf(ops.Argmax(axis=1)), np.argmax(a2, axis=1))
        vals, cols = x.arr.psf(ops.TopK(k=k))
        wv, wc = _topk(a2, k)
        if lay.ndim == 1:
            wv, wc = wv[0], wc[0]
        np.testing.assert_array_equal(cols, wc)
        np.testing.assert_array_equal(vals, wv)
    finally:
        drop(mps, x)


@SETTINGS
@given(lay=layouts(dtypes=("float64", "float32")), seed=seeds, data=st.data())
def test_get_rows_get_cols_update_cols(mps, lay, seed, data):
    x = build(mps, lay, seed)
    try:
        a2 = x.ref.reshape(lay.rows, lay.cols).copy()
        rows = data.draw(st.lists(st.integers(0, lay.rows - 1), min_size=1, max_size=6))
        cols = data.draw(st.lists(st.integers(0, lay.cols - 1), min_size=1, max_size=8))
        np.testing.assert_array_equal(x.arr.psf(ops.GetRows(rows=rows)), a2[rows])
        got = x.arr.psf(ops.GetCols(cols=cols))
        np.testing.assert_array_equal(got, a2[:, cols] if lay.ndim == 2 else a2[0, cols])
        # set unique columns
        ucols = sorted(set(cols))
        vals = np.arange(lay.rows * len(ucols), dtype=lay.dtype).reshape(lay.rows, len(ucols))
        x.arr.psf(ops.UpdateCols(ucols, vals if lay.ndim == 2 else vals[0]))
        a2[:, ucols] = vals
        np.testing.assert_array_equal(x.arr.get(), a2 if lay.ndim == 2 else a2[0])
        # add with duplicate columns: summed
        add = np.ones((lay.rows, len(cols)), dtype=lay.dtype)
        x.arr.psf(ops.UpdateCols(cols, add if lay.ndim == 2 else add[0], add=True))
        np.add.at(a2, (slice(None), cols), 1.0)
        np.testing.assert_array_equal(x.arr.get(), a2 if lay.ndim == 2 else a2[0])
    finally:
        drop(mps, x)
