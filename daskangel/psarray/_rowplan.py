"""Planning a random-row get: which server and block each row lives in.

A get of whole rows of a dense matrix cut only by rows (LDA's word-topic
counts, MF's factors) is the row path's common case (:mod:`._rowget` sends it).
Its plan, made in the caller's thread without sorting the row ids:

* :func:`unsorted_rows` says whether a request is such a get (whole rows, an
  index array not in increasing order) in one compiled pass over the ids;
* :func:`plan_rows`: one compiled pass (:mod:`._rowkernels`) finds each row's
  block and server by binary search over the row bounds and groups the rows by
  a stable counting sort of ``(server, block)`` keys, each block's run keeping
  the caller's order; each server then gets its local rows (``int32``, block
  after block) with the runs' block ids and counts (:func:`lean_msg`);
* :class:`RowSpec` holds what the plan needs of the array's metadata (row
  bounds, servers ranked, width), made once per metadata object and binding
  (:func:`row_spec`): on a loaded 2-core machine every Python step of a
  millisecond get costs several microseconds.

Example
-------
>>> from daskangel.psarray._layout import Layout
>>> from daskangel.psarray._initspec import InitSpec
>>> from daskangel.psarray._meta import ServerId
>>> lay = Layout((10, 2), (0, 4, 8, 10), "range", (0, 2), 1)
>>> m = ArrayMeta("w", (10, 2), 2, np.dtype("float32"), False, lay, InitSpec(),
...               servers=(ServerId("a", 0), ServerId("b", 0), ServerId("a", 0)))
>>> p = plan_rows(m, np.array([9, 1, 5, 0]))
>>> p.order.tolist(), p.local.tolist()
([1, 3, 0, 2], [1, 0, 1, 1])
>>> [(s.address, blocks, counts, run) for s, blocks, counts, run in p.requests]
[('a', [0, 2], [2, 1], (0, 3)), ('b', [1], [1], (3, 4))]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from distributed.protocol import to_serialize

from . import _kernels as K
from . import _rowkernels as RK
from ._meta import ArrayMeta, ServerId
from ._routing import normalize_index

if TYPE_CHECKING:
    from ._binding import Binding

__all__ = ["RowPlan", "RowSpec", "lean_msg", "plan_rows", "row_spec", "unsorted_rows"]


@dataclass(frozen=True)
class RowPlan:
    """Where the rows of a random-row get go.

    ``order[i]``: the request position of the ``i``-th row sent (rows grouped by
    server, then block); ``local``: those rows, local to their blocks;
    ``requests``: per server ``(server, block ids, rows per block, (start, stop)
    in order / local)``."""

    order: np.ndarray
    local: np.ndarray
    requests: list[tuple[ServerId, list[int], list[int], tuple[int, int]]]


class RowSpec:
    """What a random-row get of one array needs from its metadata, made once per
    :class:`ArrayMeta` object and binding (:func:`_spec`): the row bounds, each
    block's server rank, the ranked servers, the row width and whether the lean
    one-coroutine path may answer (the handlers transport, no server in this
    process).  Under a loaded 2-core machine every Python step of a millisecond
    get costs several microseconds, so none is repeated per call."""

    __slots__ = ("bounds", "lean", "meta", "nb", "rank", "row_bytes", "servers", "small", "width")

    def __init__(self, m: ArrayMeta, here: str | None) -> None:
        ranked = sorted(set(m.servers))
        rank = {s: i for i, s in enumerate(ranked)}
        self.meta = m
        self.bounds = np.asarray(m.layout.row_bounds, np.int64)
        self.rank = np.array([rank[s] for s in m.servers], np.int64)
        self.servers = ranked
        self.nb = self.bounds.shape[0] - 1
        self.width = m.shape[1]
        self.row_bytes = m.shape[1] * m.itemsize
        # requests to other processes' servers over the handlers transport go lean
        self.lean = m.transport == "handlers"
        self.small = self.lean and here not in {s.address for s in ranked}


def row_spec(b: Binding, name: str, m: ArrayMeta) -> RowSpec:
    got = b.row_specs.get(name)
    if got is None or got.meta is not m:
        here = b.local_worker.address if b.local_worker is not None else None
        got = b.row_specs[name] = RowSpec(m, here)
    return got


def unsorted_rows(m: ArrayMeta, rows: Any, cols: Any) -> np.ndarray | None:
    """The row ids of a get this module answers (whole rows of a dense matrix cut
    only by rows, given as an index array of two or more rows not in increasing
    order), else None: sorted rows are read into place block by block."""
    if (
        cols is not None
        or rows is None
        or m.ndim != 2
        or m.sparse
        or m.layout.n_col_blocks != 1
        or isinstance(rows, (int, np.integer, slice))
    ):
        return None
    if (
        isinstance(rows, np.ndarray)
        and rows.ndim == 1
        and rows.shape[0] >= 2
        and rows.dtype in (np.int64, np.int32)
    ):
        # the common case in one compiled pass (normalize_index's checks, then sortedness)
        lo, hi, ordered = RK.index_scan(rows)
        if lo >= 0 and hi < m.shape[0]:
            return None if ordered else rows.astype(np.int64, copy=False)
    r, scalar = normalize_index("rows", rows, m.shape[0])
    if r is None or scalar or r.shape[0] < 2 or K.is_sorted(r):
        return None
    return r


def plan_rows(m: ArrayMeta, rows: np.ndarray, spec: RowSpec | None = None) -> RowPlan | None:
    """Group checked row ids by server and block (None: a touched block is lost,
    or too many blocks)."""
    sp = spec if spec is not None else RowSpec(m, None)
    nb = sp.nb
    if len(sp.servers) * nb > 1 << 16:
        return None
    order, local, counts = RK.plan_rows(rows, sp.bounds, sp.rank, len(sp.servers))
    requests: list[tuple[ServerId, list[int], list[int], tuple[int, int]]] = []
    start = s0 = 0
    last = -1
    blocks: list[int] = []
    cs: list[int] = []
    lost = m.lost
    for k in np.flatnonzero(counts).tolist():
        srv, blk = divmod(k, nb)
        if lost and blk in lost:
            return None
        if srv != last:
            if last >= 0:
                requests.append((sp.servers[last], blocks, cs, (s0, start)))
            last, s0, blocks, cs = srv, start, [], []
        c = int(counts[k])
        blocks.append(blk)
        cs.append(c)
        start += c
    if last >= 0:
        requests.append((sp.servers[last], blocks, cs, (s0, start)))
    return RowPlan(order, local, requests)


def lean_msg(
    m: ArrayMeta, name: str, s: ServerId, blocks: list[int], counts: list[int], rows: np.ndarray,
    nbytes: int, direct: int,
) -> dict[str, Any]:  # fmt: skip
    """The ``daskangel_rows`` request: rows as int32 bytes, nothing wrapped."""
    msg = {
        "server": s.index, "array": name, "blocks": blocks, "counts": counts, "cost": nbytes,
        "rows": rows.tobytes() if rows.nbytes <= direct else to_serialize(rows),
    }  # fmt: skip
    if m.uid:
        msg["uid"] = m.uid
    return msg
