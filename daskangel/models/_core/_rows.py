"""A task's rows with local column indices, its pruned keys, and pulls / pushes of them.

Every sparse-feature family (linear models, factorization machines) trains a
partition the same way: a seeded split of its rows into training and
validation, Angel's *pruned key list* (the sorted global feature indices the
partition uses, plus the intercept's key ``n_features``), and the rows'
column indices rewritten as *slots* (positions in that list, or hot features
first, see :mod:`._prep`).  The task then pulls and pushes only those keys and
works on a dense ``(n_keys, width)`` local copy of its parameters: a weight per
key (a vector), or a row per key (a matrix: one column per output, or a
factorization machine's linear weight and factors).

Example
-------
>>> import numpy as np
>>> from daskangel.data._batch import CSRBatch
>>> rows = CSRBatch.from_arrays([0, 1, 3], [7, 2, 7], [1.0, 1.0, 1.0], [1, 0], 10)
>>> d = split_rows(rows, index=0, fraction=0.0, seed=0, n_features=10, has_bias=True)
>>> d.keys.tolist(), d.train.indices.tolist()
([2, 7, 10], [1, 0, 1])
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...data._batch import CSRBatch, index_dtype
from ._order import split_ids
from ._prep import place_rows, slot_positions, used_keys

__all__ = ["LocalRows", "pull", "push", "split_rows"]


@dataclass(frozen=True)
class LocalRows:
    """A partition's training and validation rows with local slots, and its keys."""

    keys: np.ndarray  # sorted global keys (int64), the intercept's last
    train: CSRBatch  # indices are local slots (positions in keys, or see pos)
    val: CSRBatch
    pos: np.ndarray | None = None  # slot -> position in keys (hot slots first); None: same

    @property
    def nbytes(self) -> int:
        """Bytes held (for the cache of prepared rows)."""
        arrays = [self.keys]
        for b in (self.train, self.val):
            arrays += [b.indptr, b.indices, b.data, b.labels]
        return sum(a.nbytes for a in arrays)


def split_rows(
    rows: CSRBatch | Sequence[CSRBatch],
    *,
    index: int,
    fraction: float,
    seed: int,
    n_features: int,
    has_bias: bool,
    shuffle: bool = False,
    hot: int = 0,
) -> LocalRows:
    """Split a partition's rows into training and validation; localise the keys.

    ``rows`` is one batch or the partition's chunks (read in place: the rows
    are copied once, straight to their place, see :mod:`._prep`).  With
    ``shuffle`` the training rows are laid out in a seeded random order, so that
    an epoch can visit them in blocks of adjacent rows (:func:`._order.epoch_order`)
    and read memory sequentially.  With ``hot`` the most frequent features (at
    most ``hot``) take the first local slots (``LocalRows.pos`` maps slots to
    positions in ``keys``).
    """
    pieces = [rows] if isinstance(rows, CSRBatch) else [p for p in rows if p.n_rows]
    n = sum(p.n_rows for p in pieces)
    train_rows, val_rows = split_ids(n, index=index, fraction=fraction, seed=seed)
    n_val = val_rows.shape[0]
    if not shuffle:
        train_rows = np.sort(train_rows)
    dest = np.empty(n, np.int64)
    dest[train_rows] = np.arange(train_rows.shape[0])
    dest[val_rows] = -1 - np.arange(n_val)
    lengths = np.concatenate([np.diff(p.indptr) for p in pieces] or [np.zeros(0, np.int64)])
    labels = np.concatenate([p.labels for p in pieces] or [np.zeros(0)])
    used, hot_bits, used_bits = used_keys(
        [p.indices[p.indptr[0] : p.indptr[-1]] for p in pieces], n_features, hot
    )
    starts = np.cumsum([0] + [p.n_rows for p in pieces])
    nk = used.shape[0] + (1 if has_bias else 0)
    tr_p, tr_i, tr_v, va_p, va_i, va_v = place_rows(
        [(p.indptr, p.indices, p.data) for p in pieces],
        [dest[a:b] for a, b in itertools.pairwise(starts)],
        lengths[train_rows],
        lengths[val_rows],
        hot_bits,
        used_bits,
        index_dtype(nk),
    )
    pos = slot_positions(used, hot_bits)
    keys = np.append(used, n_features) if has_bias else used
    if pos is not None and has_bias:
        pos = np.append(pos, nk - 1)
    train = CSRBatch(tr_p, tr_i, tr_v, labels[train_rows], nk)
    val = CSRBatch(va_p, va_i, va_v, labels[val_rows], nk)
    return LocalRows(keys, train, val, pos)


def pull(
    w: Any,
    keys: np.ndarray,
    K: int,
    key_set: Any = None,
    full: bool = False,
    pos: np.ndarray | None = None,
) -> np.ndarray:
    """Parameters of ``keys`` as a float64 ``(n_keys, K)`` array (in slot order with ``pos``).

    ``K == 1``: ``w`` is a vector (one weight per key, addressed by column);
    else a matrix with a row of ``K`` values per key.  ``key_set`` (vectors): a registered key set of
    exactly ``keys`` (pruned pull by tag); ``full``: pull the whole model and
    pick (the naive way, for the pruning experiment); ``pos``:
    :attr:`LocalRows.pos`.
    """
    if full:
        v = np.asarray(w.get())
        v = v[keys] if K == 1 else v[keys, :]
    elif K == 1:
        v = w.get(cols=key_set if key_set is not None else keys)
    else:
        v = w.get(rows=keys)
    out = np.asarray(v, np.float64).reshape(keys.shape[0], K)
    return out if pos is None else out[pos]


def push(
    w: Any, keys: np.ndarray, delta: np.ndarray, K: int, pos: np.ndarray | None = None
) -> None:
    """Add ``delta`` (``(n_keys, K)``, in slot order with ``pos``) to the parameters of
    ``keys`` (buffered in a task)."""
    if keys.shape[0] == 0:
        return
    if pos is not None:
        d = np.empty_like(delta)
        d[pos] = delta
        delta = d
    if K == 1:
        w.increment(delta[:, 0], cols=keys, casting="same_kind")
    else:
        w.increment(delta, rows=keys, casting="same_kind")
