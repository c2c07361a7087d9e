"""The machinery every model family shares (family-neutral; families import from here).

| module | what |
| --- | --- |
| ``_estimator`` | :class:`PSEstimator`: the PS context a model trains in, its arrays, closing, pickling, history, ``save`` |
| ``_input`` | what estimators accept (numpy, scipy.sparse, pandas, dask, Datasets) as a persisted Dataset |
| ``_io`` | the zarr model format: :func:`save_model` / :func:`load` for every family |
| ``_metrics`` | AUC from histograms, scikit-learn's early-stopping rule |
| ``_cache`` | data derived from a partition, kept on its worker while it lives |
| ``_order`` | seeded train / validation splits and epoch orders |
| ``_predict`` | predictions shaped like the input (local or dask) |
"""

from __future__ import annotations

from ._cache import PREPARED, PartitionCache
from ._estimator import PSEstimator
from ._input import (
    Prepared,
    as_dataset,
    as_unlabelled,
    dataset_classes,
    encode_labels,
    is_dask,
)
from ._io import array_names, load, rename_arrays, save_model
from ._metrics import auc_from_hist, should_stop
from ._order import SHUFFLE_BLOCK, epoch_order, split_ids
from ._predict import map_rows

__all__ = [
    "PREPARED",
    "SHUFFLE_BLOCK",
    "PSEstimator",
    "PartitionCache",
    "Prepared",
    "array_names",
    "as_dataset",
    "as_unlabelled",
    "auc_from_hist",
    "dataset_classes",
    "encode_labels",
    "epoch_order",
    "is_dask",
    "load",
    "map_rows",
    "rename_arrays",
    "save_model",
    "should_stop",
    "split_ids",
]
