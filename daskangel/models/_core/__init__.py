"""The machinery every model family shares (family-neutral; families import from here).

| module | what |
| --- | --- |
| ``_estimator`` | :class:`PSEstimator`: the PS context a model trains in, its arrays, closing, pickling, history, ``save`` |
| ``_fitting`` | :class:`EpochEstimator`: ``fit`` / ``partial_fit`` of the families trained by epochs |
| ``_params`` | hyper-parameter checks and plan values those families share |
| ``_input`` | what estimators accept (numpy, scipy.sparse, pandas, dask, Datasets) as a persisted Dataset |
| ``_io`` | the zarr model format: :func:`save_model` / :func:`load` for every family |
| ``_metrics`` | AUC from histograms, scikit-learn's early-stopping rule |
| ``_cache`` | data derived from a partition, kept on its worker while it lives |
| ``_order`` | seeded train / validation splits, epoch orders, rounds and their shares |
| ``_prep``, ``_rows`` | a partition's split rows with local slots and pruned keys; pulls / pushes of those keys |
| ``_epochs``, ``_monitor`` | per-epoch metric sums in a PS array row, finished into ``history_``; the task-side monitor (reports, early stopping) |
| ``_predict`` | predictions shaped like the input (local or dask) |
| ``_rounds`` | rounds of clocks with the BSP read barrier; divergence refused |
| ``_faults`` | the kill-a-worker test hook (:class:`ExitHook`) the fault-tolerance tests arm |
"""

from __future__ import annotations

from ._cache import PREPARED, PartitionCache
from ._epochs import finish, row_width
from ._estimator import PSEstimator
from ._faults import ExitHook
from ._fitting import EpochEstimator
from ._input import (
    Prepared,
    as_dataset,
    as_unlabelled,
    check_feature_names,
    check_finite,
    dataset_classes,
    encode_labels,
    feature_names,
    is_dask,
)
from ._io import array_names, load, rename_arrays, save_model
from ._metrics import auc_from_hist, should_stop
from ._monitor import Monitor, RowsPlan
from ._order import SHUFFLE_BLOCK, epoch_order, round_share, rows_per_round, split_ids
from ._params import (
    check_fraction,
    check_int,
    check_number,
    early_stopping_on,
    epoch_fields,
    train_rows,
)
from ._predict import apply_rows, check_width, in_input_order, input_order, map_rows
from ._rounds import Rounds, barrier, check_finite_step, diverged
from ._rows import LocalRows, pull, push, split_rows

__all__ = [
    "PREPARED",
    "EpochEstimator",
    "ExitHook",
    "LocalRows",
    "Monitor",
    "RowsPlan",
    "SHUFFLE_BLOCK",
    "PSEstimator",
    "PartitionCache",
    "Prepared",
    "Rounds",
    "apply_rows",
    "array_names",
    "as_dataset",
    "check_feature_names",
    "feature_names",
    "as_unlabelled",
    "auc_from_hist",
    "barrier",
    "check_finite",
    "check_finite_step",
    "check_width",
    "check_fraction",
    "check_int",
    "check_number",
    "early_stopping_on",
    "epoch_fields",
    "dataset_classes",
    "diverged",
    "encode_labels",
    "epoch_order",
    "finish",
    "in_input_order",
    "input_order",
    "is_dask",
    "load",
    "map_rows",
    "pull",
    "push",
    "rename_arrays",
    "round_share",
    "row_width",
    "rows_per_round",
    "save_model",
    "should_stop",
    "split_ids",
    "split_rows",
    "train_rows",
]
