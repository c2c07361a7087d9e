"""Latent Dirichlet allocation on the parameter server.

| module | what |
| --- | --- |
| ``_estimator`` | :class:`LDA`, the scikit-learn-style estimator |
| ``_params`` | parameter and input checks |
| ``_corpus`` | a task's tokens laid out word by word |
| ``_docs`` | held-out split by content hash, worker-side token state |
| ``_sampler`` | the compiled MH/alias Gibbs sampler |
| ``_cgs`` | the CGS training task (pipelined row pulls, sparse pushes) |
| ``_vb`` | compiled SVI kernels: fast digamma, E-step, lazy sparse lambda update |
| ``_svi`` | the MA-SVI training task (MA-LDA: local SVI steps, models averaged on the PS) |
| ``_svi_fit`` | MA-SVI arrays, plan and the rebase of lambda's scale after a fit |
| ``_recover`` | topic assignments in the snapshots, a task's restart after a failure |
| ``_history`` | ``history_`` rows per sweep, the live figures of the dashboard |
| ``_synthetic`` | corpora with planted topics (tests, benchmarks, the notebook) |
| ``_eval`` | document-completion scoring and folding in |
| ``_apply`` | transform / score on any input |

Example
-------
>>> from daskangel.models.lda import heldout_mask
>>> import numpy as np
>>> heldout_mask(np.ones((3, 4), int), 0.0).tolist()
[False, False, False]
"""

from __future__ import annotations

from ._docs import heldout_mask
from ._estimator import LDA
from ._eval import completion_log_likelihood
from ._synthetic import planted_counts

__all__ = ["LDA", "completion_log_likelihood", "heldout_mask", "planted_counts"]
