"""The data layer: readers over fsspec, balanced partitions pinned to workers,
storage levels, and the distributed feature indexer (Angel's counter).

Example
-------
>>> import daskangel as angel                                     # doctest: +SKIP
>>> ds = angel.data.read_libsvm("s3://bucket/train/*.svm.gz", errors="skip")  # doctest: +SKIP
>>> ds = ds.persist(n_partitions=8, storage="memory_disk", memory_budget="2GiB")  # doctest: +SKIP
>>> ds.n_rows, ds.n_features, ds.skipped  # doctest: +SKIP
>>> def step(part):  # doctest: +SKIP
...     for batch in part.batches(256, shuffle=True, seed=0, epoch=0):  # doctest: +SKIP
...         ...  # doctest: +SKIP
"""

from __future__ import annotations

from ._batch import CSRBatch, DenseBatch
from ._counter import FeatureIndexer
from ._dataset import Dataset, PartitionInfo
from ._ffm import read_libffm
from ._inmemory import from_array
from ._partition import Partition
from ._readers import (
    read_csv,
    read_dense,
    read_docword,
    read_dummy,
    read_libsvm,
    read_ratings,
    read_text,
)
from ._report import BadLine
from ._synthetic import CTRSpec, ctr_chunk, ctr_coef, make_ctr
from ._tabular import hash_keys

__all__ = [
    "BadLine",
    "CSRBatch",
    "DenseBatch",
    "CTRSpec",
    "Dataset",
    "FeatureIndexer",
    "Partition",
    "PartitionInfo",
    "ctr_chunk",
    "ctr_coef",
    "from_array",
    "hash_keys",
    "make_ctr",
    "read_csv",
    "read_dense",
    "read_docword",
    "read_dummy",
    "read_libffm",
    "read_libsvm",
    "read_ratings",
    "read_text",
]
