"""Matrix factorisation on the parameter server: SGD (data, model and hybrid parallel,
with server-side SGD / AdaGrad / AdaRevision), ALS-WR and implicit-feedback ALS.

| module | what |
| --- | --- |
| ``_estimator`` | :class:`MatrixFactorization`: fit / partial_fit / predict / recommend |
| ``_ids`` | raw user and item ids of any type and the factor rows |
| ``_ratings``, ``_ingest``, ``_distributed``, ``_parts`` | input checks; ratings cut by user into one part per task (locally or on the workers) |
| ``_prep`` | a task's item keys, slots, split and pull groups (cached per partition) |
| ``_plan``, ``_fit`` | the frozen plan of a fit, the training job, the metrics rows |
| ``_sgd`` | data-parallel SGD tasks (pipelined pulls, pushes through the update buffer or a server optimiser) |
| ``_dsgd`` | model / hybrid parallel SGD: DSGD strata, item blocks rotating in a group |
| ``_als`` | ALS-WR and implicit ALS (batched row solves) |
| ``_recommend`` | top-n recommendations and similar items on the workers |
| ``_arrays``, ``_kernels`` | the PS arrays of a model; compiled inner loops |
| ``_synthetic`` | ratings with a planted low-rank structure (tests, benchmarks, the notebook) |
"""

from __future__ import annotations

from ._estimator import MatrixFactorization
from ._synthetic import planted_ratings

__all__ = ["MatrixFactorization", "planted_ratings"]
