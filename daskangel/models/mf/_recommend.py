"""Top-n recommendations and similar items, scored on the workers with item factors streamed.

Queries (users for :func:`recommend`, items for :func:`similar_items`) are cut
into blocks of ``daskangel.models.mf.query-rows``; one Dask task per block
pulls its query rows from the PS and streams the item factor matrix from the
PS in blocks of ``item-block-rows`` rows (pipelined, ``get_iter``), scoring a
block with one matrix product and merging it into a running top-n
(:func:`merge_topn`), so no task ever holds the item matrix or a full score row.
Items no fit has seen are never recommended; with ``exclude_seen`` the items a
user rated in this model's fits are left out.  A model without a PS (pickled
or closed) scores the same way from its local copies.

Scores are predicted ratings ``mu + b_u + b_i + p_u . q_i`` (not clipped),
or ``p_u . q_i`` for implicit feedback; similar items are ranked by the cosine
of their factors.

Example
-------
>>> s = np.array([[0.1, 0.9, 0.5]]); ids = np.array([[7, 8, 9]])
>>> merge_topn(np.full((1, 2), -np.inf), np.full((1, 2), -1), s, ids, 2)[1].tolist()
[[8, 9]]
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd

from ... import config
from ...errors import InvalidArgumentError
from ._ids import check_ids

__all__ = ["merge_topn", "recommend", "similar_items"]


def merge_topn(
    best_s: np.ndarray, best_i: np.ndarray, s: np.ndarray, ids: np.ndarray, n: int
) -> tuple[np.ndarray, np.ndarray]:
    """The ``n`` best of a running top-n and a new block of scores (unsorted)."""
    cs = np.concatenate([best_s, s], axis=1)
    ci = np.concatenate([best_i, np.broadcast_to(ids, s.shape)], axis=1)
    if cs.shape[1] <= n:
        return cs, ci
    top = np.argpartition(-cs, n - 1, axis=1)[:, :n]
    return np.take_along_axis(cs, top, 1), np.take_along_axis(ci, top, 1)


def _blocks_ps(items: str, rows: np.ndarray, batch: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    from ...psarray import PSArray

    yield from PSArray(items).get_iter(rows, batch=batch)


def _blocks_local(
    Q: np.ndarray, rows: np.ndarray, batch: int
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    for s in range(0, rows.shape[0], batch):
        r = rows[s : s + batch]
        yield r, Q[r]


def score_block(
    query: np.ndarray,
    blocks: Iterator[tuple[np.ndarray, np.ndarray]],
    n: int,
    K: int,
    *,
    cosine: bool,
    bias: bool,
    seen: Any = None,
    self_rows: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Top-n (sorted) item rows and scores of every query row against the streamed items.

    ``seen``: a CSR matrix (queries x items) of items to leave out; ``self_rows``:
    each query's own item row (left out of its similar items).
    """
    m = query.shape[0]
    q = query[:, :K].astype(np.float32)
    if cosine:
        q = q / np.maximum(np.linalg.norm(q, axis=1, keepdims=True), 1e-12)
    best_s = np.full((m, 0), -np.inf)
    best_i = np.full((m, 0), -1, np.int64)
    for rid, vals in blocks:
        v = np.asarray(vals, np.float32)
        f = v[:, :K]
        if cosine:
            f = f / np.maximum(np.linalg.norm(f, axis=1, keepdims=True), 1e-12)
        s = (q @ f.T).astype(np.float64)
        if bias:
            s += v[:, K][None, :]
        order = np.argsort(rid)
        srt = rid[order]
        if seen is not None and seen.nnz:
            r, c = seen.nonzero()
            pos = np.searchsorted(srt, c)
            hit = (pos < srt.shape[0]) & (srt[np.minimum(pos, srt.shape[0] - 1)] == c)
            s[r[hit], order[pos[hit]]] = -np.inf
        if self_rows is not None:
            pos = np.searchsorted(srt, self_rows)
            hit = (pos < srt.shape[0]) & (srt[np.minimum(pos, srt.shape[0] - 1)] == self_rows)
            s[np.flatnonzero(hit), order[pos[hit]]] = -np.inf
        best_s, best_i = merge_topn(best_s, best_i, s, rid.astype(np.int64), n)
    o = np.argsort(-best_s, axis=1, kind="stable")
    return np.take_along_axis(best_i, o, 1), np.take_along_axis(best_s, o, 1)


def _remote_block(
    users: str, items: str, rows: np.ndarray, candidates: np.ndarray, n: int, K: int,
    cosine: bool, bias: bool, seen: Any, self_rows: np.ndarray | None, batch: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    from ...psarray import PSArray

    query = np.asarray(PSArray(users).get(rows=rows), np.float32)
    blocks = _blocks_ps(items, candidates, batch)
    top, sc = score_block(
        query, blocks, n, K, cosine=cosine, bias=bias, seen=seen, self_rows=self_rows
    )
    return query[:, K], top, sc


def _run(
    est: Any, src: str, rows: np.ndarray, n: int, *, cosine: bool, bias: bool,
    seen: Any, self_rows: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """Query bias, top item rows and scores for query ``rows`` of matrix ``src``."""
    K = int(est.n_factors)
    candidates = np.flatnonzero(est.item_counts_ > 0).astype(np.int64)
    n = min(n, candidates.shape[0])
    qrows = int(config.get("daskangel.models.mf.query-rows"))
    batch = int(config.get("daskangel.models.mf.item-block-rows"))
    pieces = [(s, min(rows.shape[0], s + qrows)) for s in range(0, rows.shape[0], qrows)]
    P, Q = getattr(est, "_P", None), getattr(est, "_Q", None)
    outs: list[Any] = []
    if P is not None and Q is not None:  # no PS: local copies
        for a, b in pieces:
            query = (P if src == "users" else Q)[rows[a:b]]
            top, sc = score_block(
                query,
                _blocks_local(Q, candidates, batch),
                n,
                K,
                cosine=cosine,
                bias=bias,
                seen=None if seen is None else seen[a:b],
                self_rows=rows[a:b] if self_rows else None,
            )
            outs.append((query[:, K], top, sc))
    else:
        client = est._client()
        names = est._arrays
        futs = [
            client.submit(
                _remote_block,
                names[src],
                names["items"],
                rows[a:b],
                candidates,
                n,
                K,
                cosine,
                bias,
                None if seen is None else seen[a:b],
                rows[a:b] if self_rows else None,
                batch,
                pure=False,
            )
            for a, b in pieces
        ]
        outs = client.gather(futs)
    if not outs:
        z = np.zeros((0, n))
        return np.zeros(0), z.astype(np.int64), z
    return tuple(np.concatenate([o[k] for o in outs]) for k in range(3))  # type: ignore[return-value]


def _seen(est: Any, rows: np.ndarray) -> Any:
    """CSR (len(rows) x n_items) of the items each user row rated in the model's fits."""
    import scipy.sparse as sp

    pos = pd.Index(rows)
    us, its = [], []
    for ing in getattr(est, "_seen", []):
        if ing.local:
            chunks = [_seen_of(p, rows) for p in ing.parts]
        else:
            client = est._client()
            chunks = client.gather(
                [client.submit(_seen_of, f, rows, pure=False) for f in ing.parts.partitions]
            )
        for u, i in chunks:
            us.append(pos.get_indexer(u))
            its.append(i)
    if not us:
        return None
    u, i = np.concatenate(us), np.concatenate(its)
    m = sp.csr_matrix((np.ones(u.shape[0], np.int8), (u, i)), shape=(rows.shape[0], est.n_items_))
    m.sum_duplicates()
    return m


def _seen_of(part: Any, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(user row, item row) of the ratings of ``rows`` in one part."""
    lo, hi = part.user0, part.user0 + part.n_users
    mine = rows[(rows >= lo) & (rows < hi)] - lo
    if mine.shape[0] == 0 or part.n_ratings == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    a = np.searchsorted(part.u, mine, side="left")
    b = np.searchsorted(part.u, mine, side="right")
    idx = np.concatenate([np.arange(x, y) for x, y in zip(a, b, strict=True)])
    return part.u[idx].astype(np.int64) + lo, part.i[idx].astype(np.int64)


def _frame(
    ids: np.ndarray, top: np.ndarray, sc: np.ndarray, decode: Any, names: tuple[str, str]
) -> pd.DataFrame:
    n = top.shape[1]
    valid = (top >= 0) & np.isfinite(sc)
    return pd.DataFrame(
        {
            names[0]: np.repeat(ids, n)[valid.ravel()],
            "rank": np.tile(np.arange(1, n + 1), ids.shape[0])[valid.ravel()],
            names[1]: decode(top[valid]),
            "score": sc[valid],
        }
    )


def recommend(est: Any, users: Any, n: int, exclude_seen: bool) -> pd.DataFrame:
    """See :meth:`MatrixFactorization.recommend`."""
    _check_n(n)
    raw = check_ids(np.asarray(users if not np.isscalar(users) else [users]), "users")
    umap, imap = est._id_maps()
    u = umap.encode(raw)
    u[u >= 0] = np.where(est.user_counts_[u[u >= 0]] > 0, u[u >= 0], -1)
    explicit = est.feedback == "explicit"
    known = np.unique(u[u >= 0])
    seen = _seen(est, known) if exclude_seen and known.shape[0] else None
    if exclude_seen and known.shape[0] and seen is None:
        raise InvalidArgumentError(
            "exclude_seen: this model no longer holds the ratings it was fitted on (it was "
            "loaded, unpickled or closed); pass exclude_seen=False"
        )
    m = min(int(n), int((est.item_counts_ > 0).sum()))
    ub, top, sc = _run(
        est, "users", known, m, cosine=False, bias=explicit, seen=seen, self_rows=False
    )
    if explicit:
        sc = sc + ub[:, None] + float(est.global_mean_)
    # unknown users: the items with the best biases (implicit: the most rated)
    pop_top, pop_sc = _popular(est, m)
    at = np.searchsorted(known, np.maximum(u, 0))
    all_top = np.empty((u.shape[0], m), np.int64)
    all_sc = np.empty((u.shape[0], m))
    kn = u >= 0
    if kn.any():
        all_top[kn], all_sc[kn] = top[at[kn]], sc[at[kn]]
    all_top[~kn], all_sc[~kn] = pop_top, pop_sc
    return _frame(raw, all_top, all_sc, imap.decode, ("user", "item"))


def _popular(est: Any, n: int) -> tuple[np.ndarray, np.ndarray]:
    valid = np.flatnonzero(est.item_counts_ > 0)
    if est.feedback == "explicit":
        b = np.asarray(est.item_biases_, np.float64)[valid] + float(est.global_mean_)
    else:
        b = est.item_counts_[valid].astype(np.float64)
    top = np.argsort(-b, kind="stable")[:n]
    return valid[top], b[top]


def similar_items(est: Any, items: Any, n: int) -> pd.DataFrame:
    """See :meth:`MatrixFactorization.similar_items`."""
    _check_n(n)
    raw = check_ids(np.asarray(items if not np.isscalar(items) else [items]), "items")
    _, imap = est._id_maps()
    i = imap.encode(raw)
    bad = (i < 0) | (est.item_counts_[np.maximum(i, 0)] == 0)
    if bad.any():
        raise InvalidArgumentError(
            f"items: {raw[bad][:5].tolist()} are not items this model was fitted on"
        )
    rows, inv = np.unique(i, return_inverse=True)
    _, top, sc = _run(est, "items", rows, n + 1, cosine=True, bias=False, seen=None, self_rows=True)
    top, sc = top[:, :n], sc[:, :n]
    return _frame(raw, top[inv], sc[inv], imap.decode, ("item", "similar"))


def _check_n(n: Any) -> None:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise InvalidArgumentError(f"n: expected an int >= 1, got {n!r}")
