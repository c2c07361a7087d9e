"""Predictions of any family, shaped like its input: local in, local out; dask in, dask out.

A daskangel Dataset is scored partition by partition on the workers holding
the rows; :func:`in_input_order` puts the per-partition results back in the
input's row order (a Dataset knows where each row stood), as one lazy dask
array whose blocks are runs of consecutive rows.

Example
-------
>>> import numpy as np
>>> map_rows(np.array([[1.0], [-1.0]]), lambda m: m[:, 0] > 0, bool, False).tolist()
[True, False]
>>> runs(np.array([2, 3, 0, 1, 4]))
[(2, 4), (0, 2), (4, 5)]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ...data import Dataset
from ...errors import InvalidArgumentError
from ._input import check_feature_names, is_dask

__all__ = ["apply_rows", "check_width", "in_input_order", "input_order", "map_rows", "runs"]


def map_rows(m: Any, fn: Any, dtype: Any, two_d: bool) -> Any:
    """``fn`` applied to margin blocks of a numpy or dask ``(n, K)`` array."""
    if not is_dask(m):
        return fn(m)
    if two_d:
        return m.map_blocks(fn, dtype=dtype)
    return m.map_blocks(fn, drop_axis=1, dtype=dtype)


def runs(src: np.ndarray) -> list[tuple[int, int]]:
    """``src`` (the row each output row comes from) as ``[start, stop)`` runs of
    consecutive source rows, in output order."""
    if src.shape[0] == 0:
        return []
    cut = np.flatnonzero(np.diff(src) != 1) + 1
    starts = np.concatenate([[0], cut])
    stops = np.concatenate([cut, [src.shape[0]]])
    return [(int(src[a]), int(src[a]) + int(b - a)) for a, b in zip(starts, stops, strict=True)]


def input_order(ds: Any) -> np.ndarray:
    """Where each input row stands in the Dataset's partitions, concatenated in
    partition order: ``results[input_order(ds)]`` is in the input's row order."""
    pos = ds.positions()
    if not pos:
        return np.zeros(0, np.int64)
    return np.argsort(np.concatenate(pos), kind="stable")


def in_input_order(ds: Any, futures: list[Any], width: int | None, dtype: Any = np.float64) -> Any:
    """A dask array ``(n_rows, width)`` of per-partition results in the input's row order.

    ``futures[i]`` holds partition ``i``'s ``(n_rows_i, width)`` result, rows in
    the partition's order; ``width=None``: 1-D results ``(n_rows_i,)``.
    """
    import dask
    import dask.array as da

    def shape(n: int) -> tuple[int, ...]:
        return (n,) if width is None else (n, width)

    blocks = [
        da.from_delayed(dask.delayed(f), shape=shape(info.n_rows), dtype=dtype)
        for f, info in zip(futures, ds.info, strict=True)
    ]
    if not blocks:
        chunks = ((0,),) if width is None else ((0,), (width,))
        return da.zeros(shape(0), chunks=chunks, dtype=dtype)
    cat = da.concatenate(blocks, axis=0)
    order = input_order(ds)
    parts = runs(order)
    if len(parts) == 1:
        return cat
    if len(parts) <= max(64, 4 * len(blocks)):
        return da.concatenate([cat[a:b] for a, b in parts], axis=0)
    return cat[order]  # interleaved rows (shares of a compressed file): one gather


def check_width(est: Any, X: Any, *, allow_nan: bool = False) -> Any:
    """A local ``X`` checked as scikit-learn checks it (float numpy or CSR) with the
    model's number of features (``est.n_features_in_``)."""
    from sklearn.utils.validation import check_array

    X = check_array(
        X,
        accept_sparse="csr",
        dtype=[np.float64, np.float32],
        ensure_all_finite="allow-nan" if allow_nan else True,
    )
    if X.shape[1] != est.n_features_in_:
        raise InvalidArgumentError(
            f"X has {X.shape[1]} features, but {type(est).__name__} is expecting "
            f"{est.n_features_in_} features as input"
        )
    return X


def apply_rows(
    est: Any,
    X: Any,
    model: Any,
    *,
    partition: Callable[..., np.ndarray],
    block: Callable[..., np.ndarray],
    local: Callable[..., np.ndarray],
    args: tuple[Any, ...] = (),
    width: int | None = None,
    dtype: Any = np.float64,
    client: Any = None,
    allow_nan: bool = False,
) -> Any:
    """A fitted model's row function over every row of ``X``, shaped like ``X``.

    The one dispatch every family's ``predict`` / ``transform`` goes through:

    * a daskangel Dataset: ``partition(part, model, *args)`` on the worker holding
      each partition (``model`` scattered once), results in the input's row
      order (:func:`in_input_order`); a Dataset with more features than the model
      is refused (fewer: the missing ones are absent, as for a libsvm test file
      whose last features never occur);
    * a dask array or dataframe: a lazy dask array, ``block(x, model, *args)`` per
      row chunk (the model travels once, as one graph key);
    * anything else: checked by :func:`check_width` and ``local(X, model, *args)``.

    Each function returns ``(n,)`` rows (``width=None``) or ``(n, width)``.

    Example
    -------
    >>> import numpy as np
    >>> class E:
    ...     n_features_in_ = 2
    >>> def dot(x, w):
    ...     return np.asarray(x @ w, np.float64)
    >>> apply_rows(E(), [[1.0, 2.0]], np.array([1.0, 1.0]), partition=dot, block=dot, local=dot)
    array([3.])
    """
    check_feature_names(est, X, reset=False)
    name = type(est).__name__
    if isinstance(X, Dataset):
        ds = X if X.persisted else X.persist(client)
        if ds.n_features > est.n_features_in_:
            raise InvalidArgumentError(
                f"X: the Dataset has {ds.n_features} features, but {name} "
                f"is expecting {est.n_features_in_} features as input"
            )
        c = ds.client
        assert c is not None
        [mf] = c.scatter([model], broadcast=True)
        return in_input_order(ds, ds.map_partitions(partition, mf, *args), width, dtype)
    if hasattr(X, "to_dask_array"):
        X = X.to_dask_array(lengths=True)
    if is_dask(X):
        import dask

        if X.ndim != 2 or X.shape[1] != est.n_features_in_:
            raise InvalidArgumentError(
                f"X has {X.shape[-1] if X.ndim else 0} features, but {name} "
                f"is expecting {est.n_features_in_} features as input"
            )
        Xr = X.rechunk({1: -1})
        md = dask.delayed(model, pure=True)
        if width is None:
            return Xr.map_blocks(block, md, *args, dtype=dtype, drop_axis=1)
        return Xr.map_blocks(block, md, *args, dtype=dtype, chunks=(Xr.chunks[0], (width,)))
    return local(check_width(est, X, allow_nan=allow_nan), model, *args)
