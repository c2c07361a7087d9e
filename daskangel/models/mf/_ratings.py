"""Ratings as the estimator accepts them, turned into raw ``(user, item, rating)`` arrays.

Accepted (each checked, with errors naming what is wrong):

* a pandas DataFrame with the user, item and rating columns named by
  :class:`Columns` (for implicit feedback the rating column may be absent: every
  pair then counts once);
* a numpy array of 2 or 3 columns ``user, item[, rating]``;
* a ``scipy.sparse`` user x item matrix: row ``u``, column ``i`` are the ids,
  stored entries the ratings (explicit zeros are ratings of 0);
* on the workers, one chunk of a dask DataFrame or one partition of a
  ``read_ratings`` Dataset (its row ids are the users, its columns the items).

Example
-------
>>> import pandas as pd
>>> cols = Columns("user", "item", "rating")
>>> u, i, r = raw_triples(pd.DataFrame({"user": ["a"], "item": [3], "rating": [4.5]}), cols)
>>> u.tolist(), i.tolist(), r.tolist()
(['a'], [3], [4.5])
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ...errors import InvalidArgumentError, InvalidTypeError

__all__ = ["Columns", "check_ratings", "is_sparse", "raw_pairs", "raw_triples"]


@dataclass(frozen=True, slots=True)
class Columns:
    """Names of the user, item and rating columns; ``implicit``: ratings may be absent."""

    user: str = "user"
    item: str = "item"
    rating: str = "rating"
    implicit: bool = False


def is_sparse(x: Any) -> bool:
    import scipy.sparse as sp

    return bool(sp.issparse(x))


def check_ratings(r: Any, where: str) -> np.ndarray:
    """``r`` as float32, refusing non-numbers, NaN and infinities (naming ``where``)."""
    a = np.asarray(r)
    if a.dtype.kind not in "fiub":
        raise InvalidTypeError(f"ratings: {where} must be numeric, got dtype {a.dtype}")
    if a.dtype.kind == "f":
        bad = ~np.isfinite(a)
        if bad.any():
            raise InvalidArgumentError(
                f"ratings: {where} has {int(bad.sum())} NaN or infinite values (first at "
                f"position {int(np.flatnonzero(bad)[0])})"
            )
    out = a.astype(np.float32)
    if a.dtype.kind == "f" and not np.isfinite(out).all():
        raise InvalidArgumentError(f"ratings: {where} has values beyond float32's range")
    return out


def _column(df: Any, name: str, param: str) -> Any:
    if name not in df.columns:
        raise InvalidArgumentError(
            f"{param}: column {name!r} is not in the ratings (columns: {list(df.columns)})"
        )
    return df[name]


def _array_columns(x: np.ndarray, need_rating: bool) -> tuple[Any, Any, Any]:
    if x.ndim != 2 or x.shape[1] not in (2, 3):
        raise InvalidArgumentError(
            f"ratings: a numpy array must have 2 or 3 columns (user, item[, rating]), got "
            f"shape {x.shape}"
        )
    if x.shape[1] == 2:
        if need_rating:
            raise InvalidArgumentError(
                "ratings: a 2-column array has no rating column (explicit feedback needs one)"
            )
        return x[:, 0], x[:, 1], None
    return x[:, 0], x[:, 1], x[:, 2]


def _partition_triples(p: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    b = p.csr()
    if b.row_ids is None:
        raise InvalidArgumentError(
            "ratings: a Dataset without row ids (users); read it with angel.data.read_ratings"
        )
    counts = np.diff(b.indptr)
    users = np.repeat(np.asarray(b.row_ids, np.int64), counts)
    if users.shape[0] and users.min() < 0:
        raise InvalidArgumentError(
            f"ratings: negative user id {int(users.min())} in a ratings Dataset (ids must "
            "be integers >= 0)"
        )
    s, e = int(b.indptr[0]), int(b.indptr[-1])
    items = np.asarray(b.indices[s:e], np.int64)
    return users, items, check_ratings(b.data[s:e], "the Dataset's values")


def raw_triples(x: Any, cols: Columns) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Raw ids (users, items) and float32 ratings of one local object (see the module)."""
    from ._ids import check_ids

    if hasattr(x, "csr") and hasattr(x, "chunks"):  # a data-layer Partition
        return _partition_triples(x)
    if is_sparse(x):
        m = x.tocoo()
        return (
            np.asarray(m.row, np.int64),
            np.asarray(m.col, np.int64),
            check_ratings(m.data, "the sparse matrix's entries"),
        )
    if hasattr(x, "columns"):
        u = _column(x, cols.user, "user_col")
        i = _column(x, cols.item, "item_col")
        if cols.rating in x.columns:
            r = x[cols.rating]
        elif cols.implicit:
            r = None
        else:
            _column(x, cols.rating, "rating_col")
        u, i = np.asarray(u), np.asarray(i)
        where = f"column {cols.rating!r}"
    elif isinstance(x, np.ndarray):
        u, i, r = _array_columns(x, not cols.implicit)
        where = "column 2"
    else:
        raise InvalidTypeError(
            "ratings: expected a pandas or dask DataFrame, a numpy array, a scipy.sparse "
            f"matrix or a read_ratings Dataset, got {type(x).__name__}"
        )
    u = check_ids(u, f"user_col ({cols.user!r})" if hasattr(x, "columns") else "user")
    i = check_ids(i, f"item_col ({cols.item!r})" if hasattr(x, "columns") else "item")
    rr = np.ones(u.shape[0], np.float32) if r is None else check_ratings(r, where)
    return u, i, rr


def raw_pairs(x: Any, cols: Columns) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Raw ``(users, items, ratings or None)`` of pairs to predict / score."""
    from ._ids import check_ids

    if hasattr(x, "columns"):
        u = check_ids(np.asarray(_column(x, cols.user, "user_col")), f"user_col ({cols.user!r})")
        i = check_ids(np.asarray(_column(x, cols.item, "item_col")), f"item_col ({cols.item!r})")
        r = None
        if cols.rating in x.columns:
            r = check_ratings(x[cols.rating], f"column {cols.rating!r}")
        return u, i, r
    if isinstance(x, (np.ndarray, list, tuple)):
        a = np.asarray(x)
        if a.ndim != 2 or a.shape[1] not in (2, 3):
            raise InvalidArgumentError(
                f"pairs: expected 2 or 3 columns (user, item[, rating]), got shape {a.shape}"
            )
        r = check_ratings(a[:, 2], "column 2") if a.shape[1] == 3 else None
        return check_ids(a[:, 0], "user"), check_ids(a[:, 1], "item"), r
    if is_sparse(x):
        m = x.tocoo()
        return (
            np.asarray(m.row, np.int64),
            np.asarray(m.col, np.int64),
            check_ratings(m.data, "the sparse matrix's entries"),
        )
    raise InvalidTypeError(
        f"pairs: expected a pandas DataFrame of (user, item), a numpy array or a scipy.sparse "
        f"matrix, got {type(x).__name__}"
    )
