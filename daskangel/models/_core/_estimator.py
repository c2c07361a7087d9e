"""The estimator machinery every model family shares: a PS context, its arrays, history.

:class:`PSEstimator` is a scikit-learn ``BaseEstimator`` whose fitted state
lives in PS arrays of a :class:`~daskangel.PSContext`: the one given as
``ps=``, or one it opens on ``client=`` (or the default client) and closes when
the model is closed or garbage-collected.  A family (``models/linear/``,
``models/lda/`` ...) subclasses it and says

* which PS arrays it owns: ``_arrays``, a JSON-able dict whose string values
  (at any depth) are array names, e.g.
  ``{"weights": "lr-1f2e.w", "state": {"z": "lr-1f2e.opt.z"}, "rule": "FTRL"}``;
  :meth:`_array_names` lists them (override it if some strings are not names);
* what predicting needs locally: :meth:`_pull` copies it from the PS (it is
  called before pickling and closing) and :meth:`_reset` forgets the copies;
* which fitted attributes a refit from scratch forgets (``_fitted``) and which
  the zarr model format saves (``_saved``; see :mod:`._io`).

A pickled model carries what :meth:`_pull` copied and no PS: it predicts
locally, and fitting it again uploads to a new context.

Example
-------
>>> class Toy(PSEstimator):
...     def __init__(self, client=None, ps=None):
...         self.client, self.ps = client, ps
>>> t = Toy()
>>> t._arrays = {"w": "toy.w", "state": {"n": "toy.n"}, "rule": None}
>>> t._array_names()
['toy.w', 'toy.n']
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import weakref
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
from sklearn.base import BaseEstimator

from ..._compat import training_workers
from ...context import PSContext
from ._io import array_names, save_model

logger = logging.getLogger(__name__)

__all__ = ["PSEstimator"]


# contexts of garbage-collected models, closed by one long-lived thread
_to_close: queue.SimpleQueue[PSContext] = queue.SimpleQueue()
_closer: list[threading.Thread] = []  # the closer thread, once started
_closer_lock = threading.Lock()


def _close_loop() -> None:
    while True:
        ps = _to_close.get()
        with contextlib.suppress(Exception):
            if not ps.closed and getattr(ps.client, "status", None) == "running":
                ps.close()
        del ps


def _start_closer() -> None:
    """Start the closer thread, from ordinary code (when a model makes its context).

    Never from the finalizer: GC can run inside ``sys._current_frames()`` (Dask's
    profiler calls it on the event loop) while CPython 3.11 holds the thread-list
    lock, and a thread started there waits forever for that lock (the suite hung in a
    GBDT fit: the loop thread blocked in ``Thread.start`` under ``_current_frames``).
    """
    with _closer_lock:
        if not _closer or not _closer[0].is_alive():
            t = threading.Thread(target=_close_loop, name="daskangel-model-close", daemon=True)
            t.start()
            _closer[:] = [t]


def _close(ps: PSContext) -> None:
    """Free a garbage-collected model's context: queued for the closer thread
    (``SimpleQueue.put`` is safe in a finalizer; GC may run on the event loop)."""
    if not ps.closed:
        _to_close.put(ps)


_seceded = threading.local()  # .key: the task this thread has seceded for


def _task_client() -> Any:
    """Inside a Dask task (a fit run by ``joblib.parallel_backend("dask")``, as
    ``GridSearchCV`` does): the worker's client, after the task has seceded from the
    worker's thread pool.  A fit waits on training tasks that need the worker's
    threads; holding one while waiting deadlocks a worker with one thread, and every
    worker once the fits outnumber the threads.  ``None`` outside a task."""
    try:
        from distributed import get_client, get_worker, secede
        from distributed.worker import thread_state

        get_worker()
    except (ImportError, ValueError):
        return None
    key = getattr(thread_state, "key", None)
    if key is None:  # the worker's event loop or a thread of our own, not a task
        return None
    if getattr(_seceded, "key", None) != key:
        secede()  # the thread leaves the pool for good; it ends with the task
        _seceded.key = key
    return get_client()


class PSEstimator(BaseEstimator):
    """Base of every daskangel estimator (see the module docstring); not used directly."""

    # fitted attributes a fit from scratch forgets (a family adds its own)
    _fitted: ClassVar[tuple[str, ...]] = (
        "n_features_in_",
        "feature_names_in_",
        "t_",
        "n_iter_",
        "history_",
    )
    # fitted attributes the model format saves (JSON: numbers, strings, numpy arrays)
    _saved: ClassVar[tuple[str, ...]] = ("n_features_in_", "feature_names_in_", "t_", "n_iter_")
    # keys of ``_arrays`` whose values are not array names
    _not_names: ClassVar[tuple[str, ...]] = ("rule",)
    # never pickled: the live context and what refers to it
    _unpicklable: ClassVar[tuple[str, ...]] = ("_ps", "_ps_finalizer", "_arrays", "train_result_")
    # the fitted attribute whose presence means "fitted" (saving checks it)
    _fitted_marker: ClassVar[str] = "n_features_in_"

    _arrays: Any  # the family's dict of PS array names, or None

    # -- scikit-learn ----------------------------------------------------------------

    def __sklearn_clone__(self) -> PSEstimator:
        """An unfitted copy with the same parameters; ``client=`` and ``ps=`` are
        shared, not copied (they are handles to a live cluster and context: a deep
        copy of a ``Client`` fails, and a new one would be another connection)."""
        from sklearn.base import clone

        params = self.get_params(deep=False)
        live = {k: params.pop(k) for k in ("client", "ps") if k in params}
        return type(self)(**{k: clone(v, safe=False) for k, v in params.items()}, **live)

    # -- the PS side ----------------------------------------------------------------

    def _client(self) -> Any:
        """The client to train with: ``client=``, the ``ps=``'s, or the default one."""
        if getattr(self, "client", None) is not None:
            return self.client
        if getattr(self, "ps", None) is not None:
            return self.ps.client
        inside = _task_client()
        if inside is not None:
            return inside
        from distributed import default_client

        return default_client()

    def _context(self, client: Any) -> PSContext:
        """The model's context: ``ps=``, or one of its own (closed with the model)."""
        ps = getattr(self, "_ps", None)
        if ps is not None and not ps.closed:
            return ps
        if getattr(self, "ps", None) is not None:
            self._ps = self.ps
        else:
            self._ps = PSContext(client, close_with_client=True, **self._context_options())
            _start_closer()
            self._ps_finalizer = weakref.finalize(self, _close, self._ps)
        self._arrays = None
        return self._ps

    def _context_options(self) -> dict[str, Any]:
        """Keyword arguments of the :class:`PSContext` a model opens (snapshots ...)."""
        return {}

    def _resuming(self, resume: str | None) -> contextlib.AbstractContextManager[None]:
        """Around a fit: its training job continues from the snapshot ``resume``.

        ``fit(X, y, resume=url)``: ``url`` is a snapshot directory (its newest
        snapshot) or one version of it, written while an earlier fit of this model
        ran in a context made with ``snapshot=url, snapshot_every=N`` (a model's
        ``ps=``, or a family's ``snapshot`` parameters), on this cluster or a new
        one.  The fit makes its arrays afresh, loads the snapshot's into them and
        starts every task at the snapshot's clock
        (:mod:`daskangel.train._resume`): a deterministic fit ends with the model
        of the fit that was never interrupted.  ``None``: a fit from the start.

        .. warning::
           Only what is on the parameter server is resumed: the same data, the same
           parameters and ``random_state``, and as many tasks are needed (a job of
           another shape is refused).
        """
        from ...train._resume import resuming

        return resuming(resume)

    def _n_tasks(self, client: Any) -> int:
        """``n_tasks=`` or one task per worker thread of the cluster."""
        n = getattr(self, "n_tasks", None)
        return int(n) if n else sum(w["nthreads"] for w in training_workers(client).values())

    def _array_names(self) -> list[str]:
        """Every PS array the model owns (empty when it has none)."""
        return array_names(getattr(self, "_arrays", None) or {}, self._not_names)

    def _on_ps(self) -> bool:
        return bool(getattr(self, "_arrays", None)) and getattr(self, "_ps", None) is not None

    def _pull(self) -> Any:
        """Copy what predicting needs from the PS into the estimator (families override)."""
        return None

    def _keep_params(self, values: dict[str, Any]) -> None:
        """Set each ``__init__`` argument as the attribute of its name, as scikit-learn's
        contract wants; ``values`` is ``locals()`` at the top of ``__init__``."""
        for name, value in values.items():
            if name not in ("self", "__class__"):
                setattr(self, name, value)

    def _pulled(self, attr: str, fetch: Callable[[], Any]) -> Any:
        """The local copy ``attr`` of PS state (a :meth:`_pull` body): the one kept, else
        ``fetch()`` (kept as ``attr``) when the model is on the PS, else ``None``."""
        have = getattr(self, attr, None)
        if have is not None or not self._on_ps():
            return have
        setattr(self, attr, fetch())
        return getattr(self, attr)

    def _reset(self) -> None:
        """Forget local copies of the PS state (families override)."""

    def _drop_arrays(self) -> None:
        if self._on_ps():
            for n in self._array_names():
                with contextlib.suppress(Exception):
                    self._ps.drop(n)
        self._arrays = None

    def close(self) -> None:
        """Pull what predicting needs (so the model still predicts) and free its PS arrays."""
        self._pull()
        ps = getattr(self, "_ps", None)
        if ps is not None and getattr(self, "ps", None) is None:
            ps.close()
        else:
            self._drop_arrays()
        self._ps = None
        self._arrays = None

    def _forget(self) -> None:
        """Back to unfitted: drop the arrays, local copies and fitted attributes."""
        self._drop_arrays()
        self._reset()
        for a in self._fitted:
            if hasattr(self, a):
                delattr(self, a)

    # -- history --------------------------------------------------------------------

    def _append_history(
        self, records: list[dict[str, Any]], epoch0: int, job: str | None = None
    ) -> None:
        """Add one row per epoch to ``history_`` (a new frame when ``epoch0 == 0``).

        With ``job`` (the fit's training job), the rows also go to the dashboard's
        metrics plot of that job: the tasks' live reports lag the clocks, so the last
        epochs are only known here.
        """
        import pandas as pd

        new = pd.DataFrame(records)
        old = getattr(self, "history_", None)
        self.history_ = (
            new if old is None or epoch0 == 0 else pd.concat([old, new], ignore_index=True)
        )
        if job is not None and records:
            self._publish_metrics(job, records)

    def _publish_metrics(self, job: str, records: list[dict[str, Any]]) -> None:
        """Send a fit's metric rows to the scheduler (``daskangel_job_metrics``)."""
        plain = [
            {str(k): float(v) for k, v in r.items() if isinstance(v, (int, float, np.number))}
            for r in records
        ]
        try:
            client = self._client()
            client.sync(client.scheduler.daskangel_job_metrics, job=job, records=plain)
        except Exception as e:  # noqa: BLE001 - the dashboard must not fail a fit
            logger.debug("daskangel: could not publish the metrics of %s: %r", job, e)

    # -- pickling and saving ----------------------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        with contextlib.suppress(Exception):
            self._pull()
        state = dict(self.__dict__)
        for k in self._unpicklable:
            state.pop(k, None)
        return state

    def save(self, url: str) -> None:
        """Save the model: its PS arrays as zarr (readable with zarr alone), the rest as JSON.

        ``url`` is a local path or any fsspec URL; load with
        :func:`daskangel.models.load`.
        """
        save_model(self, url)

    def _after_load(self) -> None:
        """Hook: the arrays of a loaded model are on the PS (families override)."""
