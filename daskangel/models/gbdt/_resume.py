"""Snapshots and ``fit(..., resume=url)`` of a GBDT fit: what is kept, what is checked.

A GBDT fit keeps on the PS (so in every clock snapshot of its context) the
trees of the finished rounds (``<model>.trees``, one row per tree, written by
the leader before the round's clock) and one row of metrics per finished round
(``<model>.metrics``: a flag per metric of :data:`METRICS`, then the values),
besides the histogram array, which every round zeroes first.  Everything else
is rebuilt by a task that starts at clock ``t > 0`` (a resumed fit, or a task
rolled back to a snapshot): its rows' margins are the baseline plus the
values of the trees of rounds ``0 .. t-1``, walked in round order as the
uninterrupted fit added them (:meth:`~._worker.RowState.replay`), and the
leader's ``history_`` (which early stopping reads) comes back from the
metrics rows.  Subsamples and column samples are seeded by the round, so the
resumed fit grows the trees the uninterrupted one grew.

The arrays of a fit are named ``<class>-<uuid>-<params><data>.<part>``: two
fingerprints (8 hex digits each) of the parameters that shape the trees and of
the data's bin edges, baseline and classes (:func:`fingerprints`).  Before
anything is made, a resumed fit reads the snapshot's manifest and refuses one
taken by another model or with other parameters or data
(:func:`check_snapshot`).

Example
-------
>>> row = metrics_values({"train_loss": 0.5, "val_auc": 0.75})
>>> history_rows(np.stack([row]), 0)
[{'iteration': 1, 'train_loss': 0.5, 'val_auc': 0.75}]
>>> parse_trees_name("gbdtregressor-0a1b2c3d-1234abcd5678ef90.trees")
('gbdtregressor', '1234abcd', '5678ef90')
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

import numpy as np

from ... import _snapshot_format as fmt
from ...errors import InvalidArgumentError

__all__ = [
    "METRICS", "check_snapshot", "fingerprints", "history_rows", "metrics_values",
    "parse_trees_name",
]  # fmt: skip

# the columns of the metrics array (a history_ row's metrics)
METRICS = ("train_loss", "val_loss", "val_accuracy", "val_rmse", "val_mae", "val_auc")

# plan entries that are the data's (the rest are parameters), and those that change
# neither the trees nor the metrics (how rows are stored; the tasks: the job's shape)
_DATA = ("spec", "baseline", "classes")
_IGNORED = ("dense_fraction", "n_tasks")
_NAME = re.compile(r"^(gbdt[a-z]+)-[0-9a-f]{8}-([0-9a-f]{8})([0-9a-f]{8})\.trees$")


def _digest(obj: Any) -> str:
    return hashlib.sha1(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:8]


def fingerprints(plan_kw: dict[str, Any]) -> tuple[str, str]:
    """``(params, data)``: 8 hex digits of the plan's parameters, and of its data
    (bin edges, baseline, classes)."""
    params = {
        k: (list(v) if isinstance(v, tuple) else v)
        for k, v in plan_kw.items()
        if k not in _DATA and k not in _IGNORED
    }
    spec = plan_kw["spec"]
    data = {
        "n_bins": spec.n_bins.tolist(), "cut_ptr": spec.cut_ptr.tolist(),
        "cuts": spec.cuts.tolist(), "baseline": list(plan_kw["baseline"]),
        "classes": None if plan_kw["classes"] is None else list(plan_kw["classes"]),
    }  # fmt: skip
    return _digest(params), _digest(data)


def parse_trees_name(name: str) -> tuple[str, str, str] | None:
    """``(class, params, data)`` of a fit's trees array name, else ``None``."""
    m = _NAME.match(name)
    return None if m is None else (m.group(1), m.group(2), m.group(3))


def check_snapshot(url: str, cls: str, params: str, data: str) -> None:
    """Refuse (:class:`InvalidArgumentError`) a snapshot not taken by a fit of the
    class ``cls`` (lower case) with these parameter and data fingerprints."""
    if not isinstance(url, str) or not url:
        raise InvalidArgumentError(f"resume: expected a snapshot URL (a str), got {url!r}")
    try:
        version, manifest = fmt.resolve(url)
    except (FileNotFoundError, KeyError) as e:
        raise InvalidArgumentError(f"resume: no snapshot at {url!r} ({e!r})") from None
    names = list((manifest.get("job_state") or {}).get("arrays") or manifest.get("arrays") or [])
    found = [p for n in names if (p := parse_trees_name(n)) is not None]
    if not found:
        raise InvalidArgumentError(
            f"resume: the snapshot {version} holds no GBDT fit (arrays {names}); expected a "
            f"snapshot of a {cls} fit"
        )
    got_cls, got_params, got_data = found[-1]
    if got_cls != cls:
        raise InvalidArgumentError(
            f"resume: the snapshot {version} was taken by a {got_cls} fit; this is a {cls}"
        )
    if got_params != params:
        raise InvalidArgumentError(
            f"resume: the snapshot {version} was taken by a fit with other parameters "
            f"(fingerprint {got_params}, this fit's {params}); resume with the parameters "
            "and the int random_state of that fit"
        )
    if got_data != data:
        raise InvalidArgumentError(
            f"resume: the snapshot {version} was taken by a fit on other data (bin edges, "
            f"baseline or classes: fingerprint {got_data}, this fit's {data})"
        )


def metrics_values(row: dict[str, float]) -> np.ndarray:
    """A round's metrics as a row of the metrics array: a flag per metric (1: there,
    finite; the PS refuses NaN), then the values (0 where the flag is 0)."""
    v = np.asarray([float(row.get(k, np.nan)) for k in METRICS], np.float64)
    there = np.isfinite(v)
    return np.concatenate([there.astype(np.float64), np.where(there, v, 0.0)])


def history_rows(values: np.ndarray, start: int) -> list[dict[str, float]]:
    """``history_`` rows of the metrics array's rows (round ``start`` first)."""
    out: list[dict[str, float]] = []
    M = len(METRICS)
    for i, v in enumerate(np.asarray(values, np.float64)):
        row: dict[str, Any] = {"iteration": start + i + 1}
        row.update({k: float(v[M + j]) for j, k in enumerate(METRICS) if v[j] > 0.5})
        out.append(row)
    return out
