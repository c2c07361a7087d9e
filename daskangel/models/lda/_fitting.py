"""Running an :class:`~daskangel.models.lda.LDA` fit on a prepared dataset.

:class:`LDAFitting` checks the data against the model (the vocabulary size),
makes the arrays on the first fit, and runs the solver: ``'ma-svi'`` through
``_svi_fit.run_svi``, ``'cgs'`` as a ``train()`` job of ``CGSTask`` with a
``Plan`` (plain values) and a metrics array the tasks fill per sweep; with clock
snapshots or a resume the plan carries the ``z`` array that keeps the topic
assignments in the snapshots (``_recover``).  It then records ``history_``
(held-out log-likelihood and tokens/s per sweep) and pulls the counts.

Example
-------
>>> LDA(n_topics=20, max_iter=50).fit(counts).history_.tail(1)        # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import uuid
from typing import Any, Self

import numpy as np

from ... import config
from ...context import PSContext
from ...errors import InvalidArgumentError
from ...scheduler._clock_rule import as_sync
from ...train import train
from .._core import Prepared, as_unlabelled
from ._cgs import CGSTask, Plan
from ._history import metric_cols, settle, sweep_records
from ._params import evaluate_every, layout, priors, sampler_kind, validate_dataset
from ._recover import make_z, resume_clock_of, token_offsets
from ._svi_fit import run_svi
from ._topics import LDATopics

__all__ = ["LDAFitting"]


class LDAFitting(LDATopics):
    """The fit of :class:`~daskangel.models.lda.LDA` (its base)."""

    def _fit(self, X: Any, sweeps: int, resume: str | None = None) -> Self:
        client = self._client()
        n_tasks = self._n_tasks(client)
        data = as_unlabelled(X, client, n_tasks, est=self)
        try:
            return self._fit_dataset(client, data, sweeps, resume)
        finally:
            data.release()

    def _fit_dataset(
        self, client: Any, data: Prepared, sweeps: int, resume: str | None = None
    ) -> Self:
        ds = data.ds
        V = int(ds.n_features)
        if hasattr(self, "n_features_in_") and self.n_features_in_ != V:
            if self.n_features_in_ < V or not data.native:
                raise InvalidArgumentError(
                    f"X has {V} words (features), but LDA is expecting "
                    f"{self.n_features_in_} words as input"
                )
            V = self.n_features_in_
        sizes = validate_dataset(ds, V)  # before anything on the PS changes
        K = int(self.n_topics)
        alpha, beta = priors(self)
        groups, group_size = layout(self, len(ds.partitions))
        ps = self._context(client)
        if not getattr(self, "_arrays", None):
            self._make_arrays(ps, V, K)
        self.n_features_in_ = V
        if getattr(self, "_uid", None) is None:
            self._uid = uuid.uuid4().hex
        self._nwk = None
        sweep0 = int(getattr(self, "t_", 0))
        if self.solver == "ma-svi":
            res, rows, sp, tokens = run_svi(self, ps, ds, V, K, alpha, beta, self._seed(),
                                            sweeps, sweep0)  # fmt: skip
            self.n_train_tokens_ = tokens
            self._record(res, rows, sweeps, sweep0, sp.rounds)
            return self._done(sweep0, sweeps, res)
        met = ps.zeros(f"{self._arrays['nwk']}.metrics-{uuid.uuid4().hex[:6]}",
                       (sweeps + 1, metric_cols(len(ds.partitions))), "float64")  # fmt: skip
        plan = Plan(
            nwk=self._arrays["nwk"], nk=self._arrays["nk"], metrics=met.name, model=self._uid,
            n_words=V, n_topics=K, alpha=alpha, beta=beta, mh_steps=int(self.mh_steps),
            sampler=sampler_kind(self),
            seed=self._seed(), sweeps=sweeps, sweep0=sweep0,
            val_fraction=float(self.validation_fraction),
            evaluate_every=evaluate_every(self),
            fold_in=int(config.get("daskangel.lda.fold-in-iters")),
            **self._z_plan(ps, sizes, resume),
        )  # fmt: skip
        try:
            res = train(
                ps, CGSTask(plan), ds, groups=groups, group_size=group_size,
                sync=as_sync(self.sync), epochs=sweeps + 1, progress=self.progress,
                unit="sweep",
            )  # fmt: skip
            rows = settle(np.asarray(ps.get_array(met.name).get()))  # (a resume may remake it)
        finally:
            with contextlib.suppress(Exception):
                ps.drop(met.name)
        if resume is not None and not plan.snap_every:  # z only carried the snapshot's topics
            with contextlib.suppress(Exception):
                ps.drop(self._arrays.pop("z"))
        self.n_train_tokens_ = int(ps.get_array(plan.nk).get().sum())
        self._record(res, rows, sweeps, sweep0, 1, first=max(plan.resume_clock, 1))
        return self._done(sweep0, sweeps, res)

    def _z_plan(
        self, ps: PSContext, sizes: list[tuple[int, int]], resume: str | None = None
    ) -> dict[str, Any]:
        """The plan's fields keeping the assignments in the snapshots (``._recover``):
        with clock snapshots or a resume, the ``z`` array of this data's layout (kept
        between fits on the same data, made anew otherwise; a resume loads the
        snapshot's into it)."""
        every = int(getattr(ps, "snapshot_every_clocks", None) or 0)
        recovery = str(getattr(ps, "recovery", "continue"))
        resume_clock = resume_clock_of(resume)
        if not every and resume is None:
            return {"recovery": recovery}
        offsets = token_offsets(sizes)
        layout = tuple(int(o) for o in offsets)
        fresh = self._arrays.get("z") is None or getattr(self, "_z_layout", None) != layout
        if fresh:
            if self._arrays.get("z") is not None:
                with contextlib.suppress(Exception):
                    ps.drop(self._arrays["z"])
            self._arrays["z"] = make_z(ps, f"{self._arrays['nwk']}.z", int(offsets[-1]))
            self._z_layout = layout
        return {"z": self._arrays["z"], "z_offsets": layout[:-1], "snap_every": every,
                "recovery": recovery, "z_fresh": fresh, "resume_clock": resume_clock}  # fmt: skip

    def _done(self, sweep0: int, sweeps: int, res: Any) -> Self:
        self.t_ = sweep0 + sweeps
        self.n_iter_ = sweeps
        self.train_result_ = res
        self._pull()  # transform / score read this copy and change nothing (scikit-learn's contract)
        return self

    def _record(
        self, res: Any, rows: np.ndarray, sweeps: int, sweep0: int, per: int, first: int = 1
    ) -> None:
        """``history_`` rows of the sweeps ``first ..`` of this fit (a resumed fit: the
        sweeps it ran)."""
        recs = sweep_records(res, rows, sweeps, sweep0, per)[first - 1 :]
        self._append_history(recs, sweep0, res.job)
        self.heldout_ll_before_ = rows[0, 0] / rows[0, 1] if rows[0, 1] else float("nan")
