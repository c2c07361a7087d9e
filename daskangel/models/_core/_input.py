"""What a linear model accepts as data, turned into a persisted data-layer Dataset.

numpy arrays, ``scipy.sparse`` matrices and pandas frames are checked like
scikit-learn checks them (finite, 2-D, numeric) and spread over the workers
with :func:`daskangel.data.from_array`; dask arrays and dataframes go there
without being computed on the driver; a daskangel ``Dataset`` (e.g.
``angel.data.read_libsvm(...)``) is used as it is (persisted if it is not).

Classifier labels given with ``X`` are encoded on the driver (``classes_`` may
be strings); a Dataset's labels are numbers and are their own classes.

Example
-------
>>> import numpy as np
>>> classes, y = encode_labels(np.array(["b", "a", "b"]), None)
>>> classes.tolist(), y.tolist()
(['a', 'b'], [1.0, 0.0, 1.0])
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

import numpy as np

from ...data import Dataset, from_array
from ...errors import InvalidArgumentError, InvalidTypeError

__all__ = [
    "Prepared",
    "as_dataset",
    "as_unlabelled",
    "check_finite",
    "check_feature_names",
    "dataset_classes",
    "encode_labels",
    "feature_names",
    "is_dask",
]


def is_dask(x: Any) -> bool:
    return hasattr(x, "dask") and hasattr(x, "__dask_graph__")


def encode_labels(y: np.ndarray, classes: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """``(classes, y as class indices)``; labels outside given ``classes`` raise."""
    y = np.asarray(y)
    if classes is None:
        classes, inv = np.unique(y, return_inverse=True)
        return classes, inv.astype(np.float64)
    classes = np.asarray(classes)
    idx = np.clip(np.searchsorted(classes, y), 0, len(classes) - 1)
    bad = classes[idx] != y
    if bad.any():
        raise InvalidArgumentError(
            f"y: label {y[bad][0]!r} is not one of the classes {classes.tolist()} "
            "(pass every class to the first partial_fit as classes=)"
        )
    return classes, idx.astype(np.float64)


class Prepared:
    """A persisted Dataset for training or prediction, and whether we made it."""

    def __init__(
        self,
        ds: Dataset,
        owned: bool,
        classes: np.ndarray | None,
        encoded: bool = False,
        native: bool = False,
    ) -> None:
        self.ds = ds
        self.owned = owned
        self.classes = classes  # the classes found (or given), in label order
        self.encoded = encoded  # True: the rows carry class indices, not the labels
        self.native = native  # True: the input was a daskangel Dataset

    def release(self) -> None:
        if self.owned:
            self.ds.release()


def _check_local(
    est: Any, X: Any, y: Any, classifier: bool, reset: bool, allow_nan: bool = False
) -> tuple[Any, Any]:
    from sklearn.utils.validation import check_array, check_X_y

    if y is None:
        raise InvalidArgumentError(
            f"y: {type(est).__name__} requires y to be passed, but the target y is None "
            "(only a daskangel Dataset carries its own labels)"
        )
    X, y = check_X_y(
        X,
        y,
        accept_sparse="csr",
        dtype=[np.float64, np.float32],
        y_numeric=not classifier,
        multi_output=False,
        ensure_all_finite="allow-nan" if allow_nan else True,
    )
    check_array(X, accept_sparse="csr", ensure_all_finite="allow-nan" if allow_nan else True)
    if classifier:
        from sklearn.utils.multiclass import check_classification_targets

        check_classification_targets(y)  # a continuous y: "Unknown label type: continuous"
    return X, y


def feature_names(X: Any) -> np.ndarray | None:
    """The column names of a DataFrame ``X`` (pandas or dask) as scikit-learn keeps
    them: an object array when every name is a string, else ``None``.

    Example
    -------
    >>> import pandas as pd
    >>> feature_names(pd.DataFrame({"a": [1.0], "b": [2.0]})).tolist()
    ['a', 'b']
    >>> feature_names(pd.DataFrame([[1.0, 2.0]])) is None
    True
    """
    cols = getattr(X, "columns", None)
    if cols is None:
        return None
    names = list(cols)
    strings = [isinstance(c, str) for c in names]
    if names and all(strings):
        return np.asarray(names, dtype=object)
    if any(strings):
        kinds = sorted({type(c).__name__ for c in names})
        raise InvalidTypeError(
            f"X: feature names are only supported if all input features have string "
            f"names, but X has feature names of types {kinds}; convert them all to str"
        )
    return None


def check_feature_names(est: Any, X: Any, reset: bool) -> None:
    """Set ``est.feature_names_in_`` from ``X`` (``reset``: a fit from scratch), or
    check that ``X``'s names are the fitted ones (later fits, predictions)."""
    names = feature_names(X)
    if reset:
        if names is not None:
            est.feature_names_in_ = names
        elif hasattr(est, "feature_names_in_"):
            del est.feature_names_in_
        return
    fitted = getattr(est, "feature_names_in_", None)
    if fitted is None or names is None:
        return
    if len(names) != len(fitted) or bool((names != fitted).any()):
        unseen = [n for n in names if n not in set(fitted)][:5]
        missing = [n for n in fitted if n not in set(names)][:5]
        raise InvalidArgumentError(
            f"X: the feature names should match those that were passed during fit "
            f"(unseen at fit: {unseen}, seen at fit but missing: {missing}"
            + ("; same names, another order" if not unseen and not missing else "")
            + ")"
        )


# {(dataset id, partition keys): sorted labels}: a persisted Dataset's rows never change
_CLASSES: OrderedDict[tuple[Any, ...], np.ndarray] = OrderedDict()
_CLASSES_KEPT = 16
_classes_lock = threading.Lock()


def dataset_classes(ds: Dataset) -> np.ndarray:
    """Sorted distinct labels of a persisted Dataset (computed on its workers once: a
    round trip to every partition, ~20 ms of each fit on a 2-worker cluster)."""

    def labels(p: Any) -> np.ndarray:
        return np.unique(p.csr().labels)

    key = (ds.id, *(getattr(p, "key", id(p)) for p in ds.partitions))
    with _classes_lock:
        hit = _CLASSES.get(key)
        if hit is not None:
            _CLASSES.move_to_end(key)
            return hit.copy()
    parts = ds.client.gather(ds.map_partitions(labels)) if ds.partitions else []  # type: ignore[union-attr]
    out = np.unique(np.concatenate(parts)).astype(np.float64) if parts else np.zeros(0)
    if ds.partitions:
        with _classes_lock:
            _CLASSES[key] = out.copy()
            while len(_CLASSES) > _CLASSES_KEPT:
                _CLASSES.popitem(last=False)
    return out


def as_dataset(
    est: Any,
    X: Any,
    y: Any,
    client: Any,
    n_tasks: int,
    *,
    classifier: bool,
    classes: np.ndarray | None,
    allow_nan: bool = False,
) -> Prepared:
    """Turn ``X, y`` into a persisted Dataset with ``n_tasks`` partitions.

    ``allow_nan``: NaN in ``X`` is a missing value (tree models), not an error.
    A DataFrame's string column names become ``est.feature_names_in_`` on a fit
    from scratch, and must match them on later fits.
    """
    check_feature_names(est, X, reset=not hasattr(est, "n_features_in_"))
    if isinstance(X, Dataset):
        if y is not None:
            raise InvalidArgumentError("y: a daskangel Dataset carries its own labels; pass y=None")
        owned = not X.persisted
        ds = X.persist(client, n_partitions=n_tasks) if owned else X
        found = dataset_classes(ds) if classifier else None
        if classifier and classes is not None and found is not None:
            extra = sorted(set(found.tolist()) - {float(c) for c in classes})
            if extra:
                raise InvalidArgumentError(
                    f"y: labels {extra} of the Dataset are not among the classes "
                    f"{np.asarray(classes).tolist()}"
                )
            found = np.asarray(classes)
        return Prepared(ds, owned, found, native=True)
    if hasattr(X, "to_dask_array"):  # dask DataFrame / Series
        X = X.to_dask_array(lengths=True)
    if y is not None and hasattr(y, "to_dask_array"):
        y = y.to_dask_array(lengths=True)
    if is_dask(X) or is_dask(y):
        if y is None:
            raise InvalidArgumentError(
                f"y: {type(est).__name__} requires y to be passed, but the target y is None"
            )
        found = None
        if classifier:
            import dask.array as da

            yd = y if is_dask(y) else da.from_array(np.asarray(y))
            found, _ = encode_labels(np.asarray(da.unique(yd).compute()), classes)
            y = yd.map_blocks(lambda b, c=found: np.searchsorted(c, b).astype(np.float64))
        ds = from_array(X, y).persist(client, n_partitions=n_tasks)
        return Prepared(ds, True, found, encoded=classifier)
    X, y = _check_local(est, X, y, classifier, True, allow_nan)
    found = None
    if classifier:
        found, y = encode_labels(y, classes)
    ds = from_array(X, np.asarray(y, np.float64)).persist(client, n_partitions=n_tasks)
    return Prepared(ds, True, found, encoded=classifier)


def as_unlabelled(
    X: Any, client: Any, n_tasks: int, est: Any = None, dense: bool = False
) -> Prepared:
    """Rows without labels (topic models, clustering) as a persisted Dataset.

    ``dense=True``: dense numpy / dask input is stored as dense float32 blocks
    (:class:`~daskangel.data.DenseBatch`) for a family with dense kernels.

    With ``est``, a DataFrame's string column names become ``est.feature_names_in_``
    on a fit from scratch (no ``n_features_in_`` yet) and must match them on later fits.

    numpy and ``scipy.sparse`` are checked like scikit-learn checks them
    (2-D, numeric, finite; integer counts keep their values); dask arrays and
    dataframes are persisted without computing them on the driver; a Dataset
    is used as it is (persisted with ``n_tasks`` partitions if it is not).
    """
    if est is not None:
        check_feature_names(est, X, reset=not hasattr(est, "n_features_in_"))
    if isinstance(X, Dataset):
        owned = not X.persisted
        ds = X.persist(client, n_partitions=n_tasks) if owned else X
        return Prepared(ds, owned, None, native=True)
    if hasattr(X, "to_dask_array"):  # dask DataFrame
        X = X.to_dask_array(lengths=True)
    if is_dask(X):
        ds = from_array(X, dense=dense).persist(client, n_partitions=n_tasks)
        return Prepared(ds, True, None)
    from sklearn.utils.validation import check_array

    X = check_array(X, accept_sparse="csr", dtype="numeric")
    return Prepared(from_array(X, dense=dense).persist(client, n_partitions=n_tasks), True, None)


def _non_finite(p: Any) -> tuple[int, int]:
    b = p.csr()
    return int((~np.isfinite(b.data)).sum()), int((~np.isfinite(b.labels)).sum())


def check_finite(data: Prepared) -> None:
    """Refuse a Dataset holding NaN or infinity in its values or labels (before training).

    Local inputs are checked by scikit-learn's ``check_X_y``; a Dataset or a dask
    input is checked here, next to its partitions (one pass, nothing moves).
    """
    ds = data.ds
    if not ds.partitions:
        return
    counts = ds.client.gather(ds.map_partitions(_non_finite))  # type: ignore[union-attr]
    bad_x = sum(c[0] for c in counts)
    bad_y = sum(c[1] for c in counts)
    if bad_x:
        raise InvalidArgumentError(
            f"X: expected finite values, got {bad_x} NaN or infinite value(s)"
        )
    if bad_y:
        raise InvalidArgumentError(f"y: expected finite labels, got {bad_y} NaN or infinite")
