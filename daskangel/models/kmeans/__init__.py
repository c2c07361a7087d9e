"""K-means on the parameter server: centres on the PS, assignment next to the data.

| module | what |
| --- | --- |
| ``_estimator`` | :class:`KMeans` (scikit-learn's contract, save / load) |
| ``_fit`` | one run from the driver: arrays, the Lloyd job |
| ``_lloyd`` | the training task: assign, push sums and counts, server-side update |
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

__all__ = ["KMeans"]
