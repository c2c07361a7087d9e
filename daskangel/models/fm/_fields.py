"""The field of every feature of a field-aware factorization machine, from what the user gives.

``fields=`` of :class:`~daskangel.models.FFMClassifier` is one of

* an array of ``n_features`` ints ``>= 0`` (``fields[j]`` is feature ``j``'s
  field), as :func:`daskangel.data.read_libffm` returns for a libsvm-ffm file;
* a dict ``{field name: [column, ...]}``: column groups of the pandas / dask
  DataFrame the model is fitted on (fields numbered in the dict's order);
* ``None`` with a DataFrame: every column its own field.

A map that misses features (too short, a column in no group), names a column
the frame does not have, puts a column in two groups or holds a negative or
non-integer field is refused before anything is made on the PS.

Example
-------
>>> field_map([0, 0, 1], 3, None).tolist()
[0, 0, 1]
>>> field_map({"user": ["age", "sex"], "item": ["id"]}, 3, ["id", "age", "sex"]).tolist()
[1, 0, 0]
>>> field_map([0, 1], 3, None)
Traceback (most recent call last):
...
daskangel.errors.InvalidArgumentError: fields: the field map misses features: it has 2 entries, but X has 3 features (features 2.. have no field)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ...errors import InvalidArgumentError

__all__ = ["field_map"]


def _from_groups(groups: Mapping[Any, Any], names: Sequence[Any] | None) -> np.ndarray:
    if names is None:
        raise InvalidArgumentError(
            "fields: a dict of column groups needs a pandas or dask DataFrame (named "
            "columns); for arrays, sparse matrices and Datasets give an array of the "
            "field of every feature"
        )
    col = {str(n): j for j, n in enumerate(names)}
    out = np.full(len(col), -1, np.int64)
    for f, (gname, cols) in enumerate(groups.items()):
        members = [cols] if isinstance(cols, str) else list(cols)
        for c in members:
            j = col.get(str(c))
            if j is None:
                raise InvalidArgumentError(
                    f"fields: group {gname!r} names column {c!r}, which X does not have "
                    f"(columns: {list(col)[:10]}{' ...' if len(col) > 10 else ''})"
                )
            if out[j] >= 0:
                raise InvalidArgumentError(
                    f"fields: column {c!r} is in two groups ({list(groups)[out[j]]!r} and "
                    f"{gname!r})"
                )
            out[j] = f
    missing = [str(n) for n, j in col.items() if out[j] < 0]
    if missing:
        raise InvalidArgumentError(
            f"fields: the field map misses features: columns {missing[:10]}"
            f"{' ...' if len(missing) > 10 else ''} are in no group"
        )
    return out


def field_map(spec: Any, n_features: int, names: Sequence[Any] | None) -> np.ndarray:
    """The int32 field of each of ``n_features`` features (see the module docstring)."""
    if spec is None:
        if names is None:
            raise InvalidArgumentError(
                "fields: FFMClassifier needs the field of every feature: an array of "
                "n_features ints, a dict of DataFrame column groups, or a DataFrame input "
                "(a field per column); got None"
            )
        return np.arange(n_features, dtype=np.int32)
    if isinstance(spec, Mapping):
        out = _from_groups(spec, names)
    else:
        arr = np.asarray(spec)
        if arr.ndim != 1 or not (
            np.issubdtype(arr.dtype, np.integer)
            or (np.issubdtype(arr.dtype, np.floating) and bool(np.all(arr == np.round(arr))))
        ):
            raise InvalidArgumentError(
                f"fields: expected a 1-D array of integer fields, a dict of column groups or "
                f"None, got {type(spec).__name__} of shape {arr.shape} and dtype {arr.dtype}"
            )
        out = arr.astype(np.int64)
    if out.shape[0] < n_features:
        raise InvalidArgumentError(
            f"fields: the field map misses features: it has {out.shape[0]} entries, but X "
            f"has {n_features} features (features {out.shape[0]}.. have no field)"
        )
    if out.shape[0] > n_features:
        raise InvalidArgumentError(
            f"fields: the field map has {out.shape[0]} entries, but X has {n_features} features"
        )
    if n_features and int(out.min()) < 0:
        j = int(np.argmin(out))
        raise InvalidArgumentError(f"fields: expected fields >= 0, feature {j} has {out[j]}")
    return out.astype(np.int32)
