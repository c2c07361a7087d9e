"""Synchronous server-side optimiser steps: gradients summed over a clock, one step applied.

A server-side optimiser (:class:`~._optim.BoundOptimizer`) steps the weights and
its state as each gradient arrives, so when several tasks push in one clock the
result depends on their arrival order (AdaGrad's accumulator, Adam's moments and
FTRL's ``z`` / ``n`` are not additive).  For a repeatable data-parallel step the
tasks instead *add* their gradients to an accumulator array co-partitioned with
the weights (``ps.zeros_like(w)``; increments are sums, independent of the
order), wait for each other (a clock), and then each calls
:meth:`AccumulatedStep.of` on the rows it touched: every entry whose accumulated
gradient is non-zero takes one step of the rule with that sum and its
accumulator goes back to zero, under the server lock.  An entry a faster task
already stepped reads zero and is left alone, so each touched entry steps once,
whatever the order the tasks call in (entries whose summed gradient is exactly
zero are not stepped: lazy updates, as for the entries no gradient touched).

Example
-------
>>> opt = angel.ops.AdaGrad(lr=0.1).attach(ps, w)                 # doctest: +SKIP
>>> acc = ps.zeros_like(w)                                         # doctest: +SKIP
>>> acc.increment(grad, rows=keys)        # every task, then a clock  # doctest: +SKIP
>>> step_accumulated(opt, acc, rows=keys)  # every task, any order  # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ..errors import InvalidArgumentError
from ..psarray import Partition, psf_name
from ..psarray._routing import normalize_index, route_coo
from ._optim import BoundOptimizer, Optimizer, RuleStep, _rule

__all__ = ["AccumulatedStep", "step_accumulated"]


@dataclass(frozen=True)
class AccumulatedStep(RuleStep):
    """The psf of one step with accumulated gradients: arrays are the weights, the
    accumulator, then the rule's state slots (see the module docstring).

    ``plan`` (caller only) is ``{block: {"rows", "cols"}}`` of local coordinates.
    """

    arity: ClassVar[tuple[int, int]] = (2, 64)
    _sized: ClassVar[str] = "rows"

    @classmethod
    def of(cls, opt: Optimizer, meta: Any, rows: Any) -> AccumulatedStep:
        """The step of rule ``opt`` on every column of ``rows`` of a 2-D array ``meta``."""
        if opt.needs_versions:
            raise InvalidArgumentError(
                f"opt: {type(opt).__name__} needs the versions a gradient was computed "
                "against; accumulated gradients have none"
            )
        if meta.ndim != 2:
            raise InvalidArgumentError(f"weights: expected a 2-D array, got {meta.ndim}-D")
        ri, _ = normalize_index("rows", rows, meta.shape[0])
        r = np.arange(meta.shape[0], dtype=np.int64) if ri is None else np.unique(ri)
        nc = int(meta.shape[1])
        rr = np.repeat(r, nc)
        cc = np.tile(np.arange(nc, dtype=np.int64), r.shape[0])
        routed = route_coo(meta.layout, rr, cc, np.arange(rr.shape[0]))
        plan = {b: {"rows": p["coo_rows"], "cols": p["coo_cols"]} for b, p in routed.items()}
        return cls(psf_name(type(opt)), opt.hyper(), plan)

    def partition_update(self, *parts: Partition, **params: Any) -> None:
        rule = _rule(self.rule, self.hyper)
        names = [s[0] for s in rule.state_slots()]
        w, acc = parts[0], parts[1]
        state_parts = dict(zip(names, parts[2:], strict=True))
        rows = np.asarray(params["rows"], np.int64)
        cols = np.asarray(params["cols"], np.int64)
        g = np.asarray(acc.read(rows, cols))
        hit = g != 0
        if not hit.any():
            return
        rows, cols, g = rows[hit], cols[hit], g[hit]
        state = {n: p.read(rows, cols) for n, p in state_parts.items()}
        new_w, new_state = rule.update(w.read(rows, cols), state, g, None)
        w.write(rows, cols, new_w)
        for n, p in state_parts.items():
            p.write(rows, cols, new_state[n])
        acc.write(rows, cols, np.zeros(rows.shape[0], acc.dtype))


def step_accumulated(
    opt: BoundOptimizer, acc: Any, rows: Any = None, *, atomic: bool = True
) -> None:
    """Step ``opt``'s weights at ``rows`` (every column) with the gradients summed in
    ``acc`` (co-partitioned with them), zeroing what it applied (see the module docstring)."""
    func = AccumulatedStep.of(opt.optimizer, opt.weights.meta, rows)
    opt.weights.psf(func, acc, *opt.arrays[1:], atomic=atomic)
