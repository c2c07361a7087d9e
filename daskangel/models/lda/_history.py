"""``history_`` rows of a fit: held-out log-likelihood per token and tokens/s per sweep.

A sweep (CGS) or pass (MA-SVI) is ``per`` clocks; its wall time is the time between
the last clocks of two sweeps less the evaluation seconds the tasks reported.

Example
-------
>>> import numpy as np, pandas as pd
>>> class R:
...     history = pd.DataFrame({"clock": [0, 1, 2], "time": [0.5, 1.5, 2.0], "eval_s": [0, 0, 0]})
...     results = [{"tokens": 100}]
>>> rows = np.array([[-9.0, 3, 0], [-6.0, 3, 0], [-3.0, 3, 0]])
>>> [r["tokens_per_s"] for r in sweep_records(R(), rows, 2, 0, 1)]
[100.0, 200.0]
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any

import numpy as np

from .._core import RowsPlan

__all__ = ["SweepPlan", "metric_cols", "score_entries", "settle", "sweep_metrics", "sweep_records"]

# a CGS metrics row: [held-out LL sum, tokens scored, eval seconds, tokens sampled,
# sampling seconds summed over the tasks]; row i: the model after i sweeps
METRIC_COLS = 5


def metric_cols(n_tasks: int) -> int:
    """Columns of a fit's metrics array: :data:`METRIC_COLS`, then one held-out LL
    sum per task (task ``i``'s alone in column ``METRIC_COLS + i``)."""
    return METRIC_COLS + n_tasks


def score_entries(ll: float, n: int, seconds: float, task: int) -> tuple[np.ndarray, np.ndarray]:
    """``(values, cols)`` of one task's held-out sums for a metrics row.

    Column 0 sums every task's log-likelihood as pushes land, and float addition
    is not associative: with more than two tasks the order the pushes arrive in
    changed the last bit of a BSP fit's score (1 run in ~8).  So each task's sum
    also goes to its own column, where it is alone, and :func:`settle` adds those
    in task order.

    >>> score_entries(-7.5, 3, 0.1, 1)[1].tolist()
    [0, 1, 2, 6]
    """
    vals = np.array([ll, float(n), seconds, ll])
    return vals, np.array([0, 1, 2, METRIC_COLS + task])


def settle(rows: np.ndarray) -> np.ndarray:
    """The metrics rows with column 0 the tasks' own log-likelihood sums added in
    task order (exactly rounded: the same whatever order the pushes landed in).

    >>> r = np.zeros((1, 8)); r[0, 5:] = [0.1, 0.2, 0.3]; r[0, 0] = 0.1 + 0.2 + 0.3
    >>> float(settle(r)[0, 0])
    0.6
    """
    rows = np.array(rows, np.float64)
    if rows.shape[1] > METRIC_COLS:
        rows[:, 0] = [math.fsum(r) for r in rows[:, METRIC_COLS:]]
    return rows


# what :class:`.._core.Monitor` reads of a CGS fit (its rows are sweeps, one clock each;
# ``epoch0 = sweep0 - 1`` since row ``i`` is the model after ``i`` sweeps)
SweepPlan = partial(RowsPlan, task="lda")


def sweep_metrics(row: np.ndarray, n_tasks: int) -> dict[str, float]:
    """A finished metrics row as the dashboard's live figures (held-out LL per token,
    tokens/s over the tasks: their tokens over their mean sampling time).

    >>> sweep_metrics(np.array([-70.0, 10, 0.1, 1000, 2.0]), 2)
    {'heldout_ll': -7.0, 'tokens_per_s': 1000.0}
    """
    out = {}
    if row[1] > 0:
        out["heldout_ll"] = float(row[0] / row[1])
    if row.shape[0] >= METRIC_COLS and row[4] > 0:
        out["tokens_per_s"] = float(row[3] * n_tasks / row[4])
    return out


def sweep_records(
    res: Any, rows: np.ndarray, sweeps: int, sweep0: int, per: int
) -> list[dict[str, Any]]:
    """One record per sweep: ``sweep``, ``heldout_ll``, ``tokens_per_s``, ``time``."""
    h = res.history
    tokens = sum(int(r["tokens"]) for r in res.results)
    recs = []
    prev = 0.0
    total = 0.0
    if len(h):
        t_at = h.groupby("clock")["time"].max()
        ev_at = h.groupby("clock")["eval_s"].max() if "eval_s" in h else None
        prev = float(t_at.get(0, 0.0))
    for s in range(1, sweeps + 1):
        wall = float("nan")
        c = s * per
        if len(h) and c in t_at.index:
            ev = 0.0
            if ev_at is not None:
                ev = float(ev_at.reindex(range(c - per + 1, c + 1)).fillna(0.0).sum())
            wall = max(float(t_at[c]) - prev - ev, 1e-9)
            prev = float(t_at[c])
            total += wall
        ll_sum, n = rows[s, 0], rows[s, 1]
        recs.append(
            {
                "sweep": sweep0 + s,
                "heldout_ll": ll_sum / n if n else float("nan"),
                "tokens_per_s": tokens / wall if wall == wall else float("nan"),
                "time": total,
            }
        )
    return recs
