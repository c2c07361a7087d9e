"""K-means on the parameter server: centres on the PS, assignment next to the data.

| module | what |
| --- | --- |
| ``_estimator`` | :class:`KMeans` (scikit-learn's contract, save / load) |
| ``_mbestimator`` | :class:`MiniBatchKMeans` (Sculley's per-centre rates, SSP allowed) |
| ``_fit`` | one run from the driver: arrays, the Lloyd or mini-batch job |
| ``_lloyd`` | the Lloyd task: assign, push sums and counts, server-side update |
| ``_minibatch`` | the mini-batch task: per-centre rate updates pushed each clock |
| ``_parallel`` | k-means|| initialisation, oversampled on the workers |
| ``_psfs`` | ``Recenter`` / ``Shift``: the centre update next to the blocks |
| ``_kernels`` | compiled assignment (dense blocks through BLAS, CSR without densifying) |
| ``_rows`` | a partition's rows prepared for assignment |
| ``_init`` | data statistics, row samples, k-means++ / random / given centres |
| ``_predict`` | labels and distances of any input |
| ``_params`` | parameter checks |

Example
-------
>>> from daskangel.models import KMeans                               # doctest: +SKIP
>>> KMeans(n_clusters=3, random_state=0).fit(X).cluster_centers_      # doctest: +SKIP
"""

from __future__ import annotations

from ._estimator import KMeans
from ._mbestimator import MiniBatchKMeans

__all__ = ["KMeans", "MiniBatchKMeans"]
