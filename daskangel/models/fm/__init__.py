"""The factorization-machine family: FM on the parameter server, for sparse CTR-style data.

Rendle's factorization machine (:class:`FMClassifier`, :class:`FMRegressor`)
and the field-aware :class:`FFMClassifier` (a factor vector per feature and
field), with the bias, linear weights and factor matrix in one PS matrix, pulled
pruned per batch, gradients through the server-side optimisers (Adam,
AdaGrad, FTRL, SGD) or MA-SGD's averaged local passes.  The per-task machinery
(pruned keys, local slots, metrics rows, monitor) is the families' shared
``models/_core``.  User guide: ``docs/models.md``.

Example
-------
>>> import daskangel as angel                                           # doctest: +SKIP
>>> ds = angel.data.read_libsvm("a9a", n_features=123)                  # doctest: +SKIP
>>> fm = angel.models.FMClassifier(n_factors=8).fit(ds)                 # doctest: +SKIP
"""

from __future__ import annotations

from ._base import FMModel
from ._estimators import FFMClassifier, FMClassifier, FMRegressor
from ._params import SOLVERS

__all__ = ["SOLVERS", "FFMClassifier", "FMClassifier", "FMModel", "FMRegressor"]
