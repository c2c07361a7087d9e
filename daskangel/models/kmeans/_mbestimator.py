"""``MiniBatchKMeans``: Sculley's mini-batch k-means with the centres on the parameter server.

Same contract as :class:`~._estimator.KMeans` (it is one, with
``algorithm='minibatch'``): every task steps through its rows ``batch_size /
n_tasks`` at a time and pushes per-centre updates at Sculley's per-centre
rate (:mod:`._minibatch`); ``max_iter`` counts epochs.  ``sync`` may relax
BSP to SSP (``'ssp:2'``) or ASP.  After the last epoch one assignment pass on
the workers gives ``labels_`` and ``inertia_``.  ``history_`` holds the mean
batch inertia per epoch (each batch scored before its update).

.. warning:: Unlike scikit-learn's ``MiniBatchKMeans`` there is no early stop
   (``max_no_improvement``, ``tol``) and no reassignment of small clusters
   (``reassignment_ratio``): every fit runs ``max_iter`` epochs.

Example
-------
>>> from daskangel.models import MiniBatchKMeans                      # doctest: +SKIP
>>> mb = MiniBatchKMeans(n_clusters=20, batch_size=2048, max_iter=10,
...                      sync="ssp:1", random_state=0).fit(X)         # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

from ._estimator import KMeans

__all__ = ["MiniBatchKMeans"]


class MiniBatchKMeans(KMeans):
    """Mini-batch k-means trained on the parameter server (see the module docstring).

    Parameters
    ----------
    n_clusters, init, n_init, n_tasks, snapshot, snapshot_every, random_state, progress, client, ps
        As :class:`KMeans`.
    max_iter
        Epochs (passes over every task's rows).
    batch_size
        Rows of one global mini-batch (split evenly over the tasks).
    sync
        ``'bsp'``, ``'ssp:<s>'``, ``'asp'`` or a protocol object.
    """

    def __init__(
        self,
        n_clusters: int = 8,
        *,
        init: Any = "lloyd-sample",
        max_iter: int = 10,
        batch_size: int = 1024,
        sync: Any = "bsp",
        n_init: int = 1,
        n_tasks: int | None = None,
        snapshot: str | None = None,
        snapshot_every: int | None = None,
        random_state: int | None = None,
        progress: bool = False,
        client: Any = None,
        ps: Any = None,
    ) -> None:
        self._keep_params(locals())

    def _algorithm(self) -> str:
        return "minibatch"
