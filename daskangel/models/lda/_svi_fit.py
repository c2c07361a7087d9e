"""The driver side of the MA-SVI solver: arrays, the plan of a fit, and the rebase after it.

``lambda`` lives on the PS as ``lam`` (``V x K`` float64, ``lambda - eta`` at rest)
and ``lamsum`` (its column sums, ``1 x K``).  A fit first builds every partition's
worker-side state (which also counts the training documents ``D`` and tokens),
plans the passes (``steps_per_pass`` minibatches of about ``batch_size``
documents per task, a clock every ``average_every`` of them), trains, and then
multiplies both arrays by the scale ``S`` the tasks reached, so the next fit
starts from ``S = 1`` again.

Example
-------
>>> steps_and_scale(doc_counts=[300, 250], batch_size=128, passes=2, step0=0,
...                 offset=10.0, decay=0.7)[0]
3
"""

from __future__ import annotations

import contextlib
import math
import uuid
from typing import Any

import numpy as np

from ... import config
from ..._compat import workers_info
from ...errors import InvalidArgumentError
from ...ops import Scale, Sum
from ...scheduler._clock_rule import as_sync
from ...train import train
from ._history import metric_cols, settle
from ._params import evaluate_every
from ._svi import SVIPlan, SVITask, prepare_svi

__all__ = ["make_svi_arrays", "run_svi", "steps_and_scale", "task_batch"]

# the smallest log-scale a fit may reach (exp(-650) ~ 1e-283: mu stays a float64)
MIN_LOG_SCALE = -650.0


def make_svi_arrays(ps: Any, V: int, K: int, seed: int, init: np.ndarray | None) -> dict[str, str]:
    """``lam`` (random ``Uniform(0.5, 1.5)`` entries, or ``init``) and ``lamsum``."""
    name = f"lda-{uuid.uuid4().hex[:8]}"
    n_servers = max(1, len(workers_info(ps.client)))
    rows = max(1, math.ceil(V / (2 * n_servers)))
    lam = ps.random(f"{name}.lam", (V, K), seed=seed, low=0.5, high=1.5, dtype="float64",
                    block_shape=(rows, K))  # fmt: skip
    lamsum = ps.zeros(f"{name}.lamsum", (1, K), "float64")
    if init is not None and init.shape == (V, K):
        lam.set(np.asarray(init, np.float64))
        lamsum.set(init.sum(axis=0, dtype=np.float64)[None, :])
    else:
        lamsum.set(np.asarray(lam.psf(Sum(axis=0)), np.float64).reshape(1, K))
    return {"lam": lam.name, "lamsum": lamsum.name}


def task_batch(doc_counts: list[int], batch_size: int | str) -> int:
    """Documents per minibatch of a task: ``batch_size``, or for ``'auto'`` the largest
    task's documents over ``daskangel.lda.svi-steps-per-pass``, at least
    ``daskangel.lda.svi-min-batch``.

    >>> task_batch([8450, 8400], "auto"), task_batch([1542, 1543], "auto"), task_batch([5], 64)
    (529, 128, 64)
    """
    if batch_size != "auto":
        return int(batch_size)
    steps = max(1, int(config.get("daskangel.lda.svi-steps-per-pass")))
    least = max(1, int(config.get("daskangel.lda.svi-min-batch")))
    return max(least, -(-max(doc_counts, default=0) // steps))


def steps_and_scale(
    doc_counts: list[int], batch_size: int | str, passes: int, step0: int, offset: float,
    decay: float,
) -> tuple[int, float]:  # fmt: skip
    """``(steps per pass, log S after the fit)``; refuses a fit whose ``S`` would underflow."""
    n_b = max(1, -(-max(doc_counts, default=0) // task_batch(doc_counts, batch_size)))
    t = step0 + np.arange(1, passes * n_b + 1, dtype=np.float64)
    log_s = float(np.log1p(-((offset + t) ** -decay)).sum())
    if log_s < MIN_LOG_SCALE:
        raise InvalidArgumentError(
            f"max_iter: {passes} passes of {n_b} minibatch steps in one fit decay lambda by "
            f"exp({log_s:.0f}), past float64; fit fewer passes at a time (partial_fit), or raise "
            "batch_size or learning_offset"
        )
    return n_b, log_s


def run_svi(est: Any, ps: Any, ds: Any, V: int, K: int, alpha: float, eta: float,
            seed: int, passes: int, pass0: int) -> tuple[Any, np.ndarray, SVIPlan, int]:  # fmt: skip
    """Train ``passes`` passes; returns ``(TrainResult, metrics rows, plan, training tokens)``."""
    futs = ds.map_partitions(prepare_svi, est._uid, float(est.validation_fraction), seed)
    try:
        counts = ds.client.gather(futs)
    finally:
        ds.client.cancel(futs)
    n_docs = sum(d for d, _ in counts)
    tokens = sum(t for _, t in counts)
    step0 = int(getattr(est, "n_steps_", 0))
    n_b, log_s = steps_and_scale(
        [d for d, _ in counts], est.batch_size, passes, step0,
        float(est.learning_offset), float(est.learning_decay),
    )  # fmt: skip
    met = ps.zeros(f"{est._arrays['lam']}.metrics-{uuid.uuid4().hex[:6]}",
                   (passes + 1, metric_cols(len(ds.partitions))), "float64")  # fmt: skip
    plan = SVIPlan(
        lam=est._arrays["lam"], lamsum=est._arrays["lamsum"], metrics=met.name, model=est._uid,
        n_words=V, n_topics=K, alpha=alpha, eta=eta, seed=seed, passes=passes, pass0=pass0,
        step0=step0, n_docs=max(n_docs, 1), steps_per_pass=n_b,
        average_every=int(est.average_every), offset=float(est.learning_offset),
        decay=float(est.learning_decay), tol=float(est.mean_change_tol),
        max_doc_iter=int(est.max_doc_update_iter),
        val_fraction=float(est.validation_fraction), evaluate_every=evaluate_every(est),
        fold_in=int(config.get("daskangel.lda.fold-in-iters")),
    )  # fmt: skip
    try:
        res = train(
            ps, SVITask(plan), ds, groups=len(ds.partitions), group_size=1,
            sync=as_sync(est.sync), epochs=passes * plan.rounds + 1, progress=est.progress,
            unit="pass", clocks_per_unit=plan.rounds,
        )  # fmt: skip
        rows = settle(np.asarray(met.get()))
    finally:
        with contextlib.suppress(Exception):
            ps.drop(met.name)
    # back to S = 1: the arrays hold lambda - eta again
    s = math.exp(log_s)
    ps.get_array(plan.lam).psf(Scale(s))
    ps.get_array(plan.lamsum).psf(Scale(s))
    est.n_steps_ = step0 + passes * n_b
    return res, rows, plan, tokens
