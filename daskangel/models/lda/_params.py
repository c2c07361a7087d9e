"""Checking an LDA's parameters and its input, before anything on the PS changes.

Example
-------
>>> class P:
...     n_topics, doc_topic_prior, topic_word_prior = 4, None, 0.01
>>> priors(P())
(0.25, 0.01)
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

from ...errors import InvalidArgumentError, InvalidTypeError
from ...scheduler._clock_rule import as_sync
from ._corpus import check_counts

__all__ = [
    "PARALLELISMS",
    "SAMPLERS",
    "SOLVERS",
    "check_params",
    "evaluate_every",
    "layout",
    "priors",
    "sampler_kind",
    "validate_dataset",
]

SOLVERS = ("cgs", "ma-svi")
SAMPLERS = ("auto", "dense", "mh", "warp")
PARALLELISMS = ("data", "model", "hybrid")


def _int(name: str, v: Any, lo: int) -> None:
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        raise InvalidTypeError(f"{name}: expected an int >= {lo}, got {v!r}")
    if v < lo:
        raise InvalidArgumentError(f"{name}: expected an int >= {lo}, got {v!r}")


def _prior(name: str, v: Any) -> None:
    if v is None:
        return
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise InvalidTypeError(f"{name}: expected a float > 0 or None, got {v!r}")
    if not math.isfinite(float(v)) or float(v) <= 0:
        raise InvalidArgumentError(f"{name}: expected a float > 0 or None, got {v!r}")


def check_params(est: Any) -> None:
    """Raise on any bad parameter, naming it."""
    _int("n_topics", est.n_topics, 1)
    _int("max_iter", est.max_iter, 1)
    _int("mh_steps", est.mh_steps, 1)
    if est.evaluate_every is not None:
        _int("evaluate_every", est.evaluate_every, 0)
    if est.n_tasks is not None:
        _int("n_tasks", est.n_tasks, 1)
    _prior("doc_topic_prior", est.doc_topic_prior)
    _prior("topic_word_prior", est.topic_word_prior)
    if est.solver not in SOLVERS:
        raise InvalidArgumentError(f"solver: expected one of {SOLVERS}, got {est.solver!r}")
    if est.sampler not in SAMPLERS:
        raise InvalidArgumentError(f"sampler: expected one of {SAMPLERS}, got {est.sampler!r}")
    if est.parallelism not in PARALLELISMS:
        raise InvalidArgumentError(
            f"parallelism: expected one of {PARALLELISMS}, got {est.parallelism!r}"
        )
    f = est.validation_fraction
    if isinstance(f, bool) or not isinstance(f, numbers.Real) or not 0.0 <= float(f) < 1.0:
        raise InvalidArgumentError(f"validation_fraction: expected a float in [0, 1), got {f!r}")
    if est.groups is not None:
        _int("groups", est.groups, 1)
    if est.snapshot_every is not None:
        _int("snapshot_every", est.snapshot_every, 1)
    as_sync(est.sync)
    if est.solver == "ma-svi":
        _svi_params(est)


def evaluate_every(est: Any) -> int:
    """Sweeps (passes) between two held-out scores: ``evaluate_every``, or by default
    every 10th CGS sweep (a score folds every held-out document in, 50 iterations
    each: at K=20 it costs more than a sweep) and every MA-SVI pass."""
    if est.evaluate_every is None:
        return 1 if est.solver == "ma-svi" else 10
    return int(est.evaluate_every)


def sampler_kind(est: Any) -> str:
    """The CGS sampler a fit runs: ``sampler``, or for ``'auto'`` the exact conditional
    (``'dense'``) while ``n_topics <= daskangel.lda.dense-max-topics``, else ``'warp'``."""
    if est.sampler == "auto":
        from ... import config

        small = int(est.n_topics) <= int(config.get("daskangel.lda.dense-max-topics"))
        return "dense" if small else "warp"
    return str(est.sampler)


def _real(name: str, v: Any, lo: float, hi: float, lo_open: bool = True) -> None:
    ok = isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(float(v))
    if ok:
        ok = (float(v) > lo if lo_open else float(v) >= lo) and float(v) <= hi
    if not ok:
        side = "(" if lo_open else "["
        raise InvalidArgumentError(f"{name}: expected a float in {side}{lo}, {hi}], got {v!r}")


def _svi_params(est: Any) -> None:
    """The parameters of ``solver='ma-svi'``."""
    if est.parallelism != "data":
        raise InvalidArgumentError(
            f"parallelism: solver='ma-svi' averages whole models (data parallel only), "
            f"got {est.parallelism!r}"
        )
    if not (isinstance(est.batch_size, str) and est.batch_size == "auto"):
        if isinstance(est.batch_size, str):
            raise InvalidArgumentError(
                f"batch_size: expected an int >= 1 or 'auto', got {est.batch_size!r}"
            )
        _int("batch_size", est.batch_size, 1)
    _int("average_every", est.average_every, 1)
    _int("max_doc_update_iter", est.max_doc_update_iter, 1)
    _real("learning_offset", est.learning_offset, 0.0, math.inf)
    _real("learning_decay", est.learning_decay, 0.0, 1.0)
    _real("mean_change_tol", est.mean_change_tol, 0.0, math.inf)


def layout(est: Any, n_tasks: int) -> tuple[int, int]:
    """``(groups, group_size)`` of the training tasks for ``parallelism``."""
    if est.parallelism == "data":
        return n_tasks, 1
    if est.parallelism == "model":
        return 1, n_tasks
    g = 2 if est.groups is None else int(est.groups)
    if n_tasks % g or n_tasks // g < 2:
        raise InvalidArgumentError(
            f"groups: 'hybrid' needs n_tasks ({n_tasks}) to be a multiple of groups ({g}) "
            "with at least 2 tasks a group"
        )
    return g, n_tasks // g


def priors(est: Any) -> tuple[float, float]:
    """``(alpha, beta)``: the given priors, or ``1 / n_topics`` like scikit-learn."""
    k = float(est.n_topics)
    a = est.doc_topic_prior
    b = est.topic_word_prior
    return (1.0 / k if a is None else float(a)), (1.0 / k if b is None else float(b))


def _check_part(part: Any, n_words: int) -> tuple[int, int]:
    rows = part.csr()
    check_counts(rows.data)
    top = int(rows.indices.max()) if rows.indices.size else -1
    if top >= n_words:
        raise InvalidArgumentError(
            f"X: word id {top} is out of range for a vocabulary of {n_words} words"
        )
    return rows.n_rows, int(np.asarray(rows.data, np.float64).sum())


def validate_dataset(ds: Any, n_words: int) -> list[tuple[int, int]]:
    """Check every partition's counts on its worker; return ``(rows, tokens)`` per partition.

    Raises :class:`InvalidArgumentError` naming ``X`` for a negative, fractional
    or non-finite count or a word id ``>= n_words``.
    """
    futs = ds.map_partitions(_check_part, n_words)
    try:
        out = ds.client.gather(futs)
    finally:
        ds.client.cancel(futs)
    return [(int(r), int(t)) for r, t in out]
