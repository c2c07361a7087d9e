"""From what ``fit`` was given to one :class:`~._parts.RatingsPart` per training task.

* local input (pandas, numpy, scipy.sparse) is checked, numbered and cut on
  the driver; the parts go to the trainer as a list, which scatters them (and
  scatters a part again if its worker dies);
* dask DataFrames and ``read_ratings`` Datasets stay on the workers
  (:mod:`._distributed`); the parts are futures, recomputed from their chunks
  if lost.

Both extend the model's id maps with new users and items (``partial_fit``).

Example
-------
>>> import pandas as pd
>>> df = pd.DataFrame({"user": [1, 1, 2], "item": ["x", "y", "x"], "rating": [4.0, 3, 5]})
>>> got = ingest(df, None, Columns(), None, None, 2, client=None)
>>> len(got.umap), len(got.imap), [p.n_ratings for p in got.parts]
(2, 2, [2, 1])
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ...errors import InvalidArgumentError
from .._core import is_dask
from ._ids import IdMap
from ._parts import split_by_user, user_bounds
from ._ratings import Columns, is_sparse, raw_pairs, raw_triples

__all__ = ["Ingested", "PartFutures", "ingest"]


class PartFutures:
    """Training data whose parts are futures on the workers (what ``angel.train`` takes)."""

    def __init__(self, partitions: list[Any], workers: list[str], source: Any = None) -> None:
        self.partitions = partitions
        self.workers = workers
        # what the parts are computed from (a persisted Dataset or dask collection),
        # kept while training so a lost part can be recomputed; dropped after the fit
        self.source = source

    def __len__(self) -> int:
        return len(self.partitions)


@dataclass
class Ingested:
    """Parts and what the driver knows about them."""

    parts: Any  # list[RatingsPart] (local input) or PartFutures
    umap: IdMap
    imap: IdMap
    n: int  # ratings
    total: float  # their sum
    lo: float
    hi: float
    bounds: np.ndarray  # user rows per task
    user_counts: np.ndarray  # ratings per user row (int64)
    item_counts: np.ndarray  # ratings per item row

    @property
    def local(self) -> bool:
        return isinstance(self.parts, list)


def _check_local_input(x: Any) -> None:
    if x is None:
        raise InvalidArgumentError("ratings: expected ratings to fit, got None")
    if (hasattr(x, "columns") and len(x) == 0) or (hasattr(x, "shape") and x.shape[0] == 0):
        raise InvalidArgumentError("ratings: empty (no ratings to train on)")


def _maps(
    u: np.ndarray,
    i: np.ndarray,
    umap: IdMap | None,
    imap: IdMap | None,
    sparse_shape: tuple[int, int] | None,
) -> tuple[IdMap, IdMap]:
    if sparse_shape is not None:
        nu, ni = sparse_shape
        if (umap is not None and len(umap) > nu) or (imap is not None and len(imap) > ni):
            raise InvalidArgumentError(
                f"ratings: a sparse matrix of shape {sparse_shape} has fewer rows or columns "
                f"than the model has users / items ({len(umap or [])}, {len(imap or [])})"
            )
        return IdMap.range(nu, "user"), IdMap.range(ni, "item")
    umap = IdMap.of(u, "user") if umap is None else umap.extend(u)[0]
    imap = IdMap.of(i, "item") if imap is None else imap.extend(i)[0]
    return umap, imap


def _local(
    x: Any, eval_set: Any, cols: Columns, umap: IdMap | None, imap: IdMap | None, n_tasks: int
) -> Ingested:
    _check_local_input(x)
    u_raw, i_raw, r = raw_triples(x, cols)
    if r.shape[0] == 0:
        raise InvalidArgumentError("ratings: empty (no ratings to train on)")
    umap, imap = _maps(u_raw, i_raw, umap, imap, x.shape if is_sparse(x) else None)
    u, i = umap.encode(u_raw), imap.encode(i_raw)
    bounds = user_bounds(np.bincount(u, minlength=len(umap)), n_tasks)
    evals = None
    if eval_set is not None:
        eu, ei, er = raw_pairs(eval_set, cols)
        if er is None:
            raise InvalidArgumentError("eval_set: needs a rating column to evaluate against")
        evals = (umap.encode(eu), imap.encode(ei), er)
    parts = split_by_user(u, i, r, bounds, len(imap), evals)
    ucounts = np.bincount(np.concatenate([p.u + p.user0 for p in parts]), minlength=len(umap))
    icounts = np.bincount(np.concatenate([p.i for p in parts]), minlength=len(imap))
    return Ingested(
        parts,
        umap,
        imap,
        int(r.shape[0]),
        float(r.sum(dtype=np.float64)),
        float(r.min()),
        float(r.max()),
        bounds,
        ucounts.astype(np.int64),
        icounts.astype(np.int64),
    )


def _chunks(client: Any, x: Any) -> tuple[list[Any], Any]:
    """Futures of the chunks of a dask DataFrame or the partitions of a Dataset, and
    the persisted object holding them."""
    from distributed import futures_of

    if hasattr(x, "partitions") and hasattr(x, "persisted"):  # a daskangel Dataset
        ds = x if x.persisted else x.persist(client)
        return list(ds.partitions), ds
    if hasattr(x, "to_delayed") and hasattr(x, "columns"):
        held = client.persist(x)
        return list(futures_of(held)), held
    raise InvalidArgumentError(
        f"ratings: expected a dask DataFrame or a daskangel Dataset, got {type(x).__name__}"
    )


def _distributed(
    x: Any,
    eval_set: Any,
    cols: Columns,
    umap: IdMap | None,
    imap: IdMap | None,
    n_tasks: int,
    client: Any,
) -> Ingested:
    from ..._compat import workers_info
    from ._distributed import build

    if hasattr(x, "columns"):
        missing = [c for c in (cols.user, cols.item) if c not in x.columns]
        if cols.rating not in x.columns and not cols.implicit:
            missing.append(cols.rating)
        if missing:
            param = {cols.user: "user_col", cols.item: "item_col", cols.rating: "rating_col"}
            raise InvalidArgumentError(
                f"{param[missing[0]]}: column {missing[0]!r} is not in the ratings "
                f"(columns: {list(x.columns)})"
            )
    chunks, held = _chunks(client, x)
    ev = None
    ev_held: Any = None
    if eval_set is not None:
        if is_dask(eval_set) or hasattr(eval_set, "persisted"):
            ev, ev_held = _chunks(client, eval_set)
        else:
            ev = [client.scatter(eval_set)]
            ev_held = ev
    workers = sorted(workers_info(client))
    parts, umap, imap, st, bounds, counts = build(
        client, chunks, cols, umap, imap, n_tasks, workers, ev
    )
    where = client.who_has(parts)
    placed = [(where.get(p.key) or [workers[0]])[0] for p in parts]
    return Ingested(
        PartFutures(parts, placed, (held, ev_held)),
        umap,
        imap,
        st.n,
        st.total,
        st.lo,
        st.hi,
        bounds,
        counts[0],
        counts[1],
    )


def ingest(
    x: Any,
    eval_set: Any,
    cols: Columns,
    umap: IdMap | None,
    imap: IdMap | None,
    n_tasks: int,
    client: Any,
) -> Ingested:
    """Parts of ``x`` for ``n_tasks`` tasks, with the model's maps extended (see module)."""
    if is_dask(x) or hasattr(x, "persisted"):
        return _distributed(x, eval_set, cols, umap, imap, n_tasks, client)
    return _local(x, eval_set, cols, umap, imap, n_tasks)
