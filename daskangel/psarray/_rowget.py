"""Random-row gets put back into request order as each server's reply lands.

A get of unsorted rows is planned on the rows sorted (:func:`~._plan.sort_rows`):
each block then answers with one run of the sorted result, which the caller reads
from the socket into a reused scratch buffer, and the server gathers its rows in
memory order.  The rows still have to go back to the caller's order (one copy of
every byte, into the caller's new array).  That copy used to start once *every*
server had replied; here each server's part is scattered into the result
(``out[order[run]] = part``, which releases the GIL) as soon as it has landed,
in the caller's thread, while the event loop is still receiving the other
servers' replies.

Example
-------
>>> import numpy as np
>>> out = np.zeros((4, 2), "int32")
>>> scatter_part(out, np.array([2, 0, 3, 1]), slice(0, 2), np.array([[1, 1], [2, 2]]))
>>> out[:, 0].tolist()
[2, 0, 1, 0]
"""

from __future__ import annotations

import queue
from typing import Any

import numpy as np

from ._binding import Binding
from ._meta import ArrayMeta
from ._plan import direct_targets, plan_get

__all__ = ["get_in_order", "scatter_part"]


def scatter_part(out: np.ndarray, order: np.ndarray, run: slice, part: np.ndarray) -> None:
    """Put a block's reply, the sorted rows ``run``, at their request positions."""
    if run.stop > run.start:
        out[order[run]] = part.reshape(run.stop - run.start, -1)


def get_in_order(
    b: Binding, name: str, m: ArrayMeta, rows: np.ndarray, order: np.ndarray
) -> np.ndarray | None:
    """Whole rows ``rows`` (sorted; ``rows[i]`` is wanted at ``order[i]``) in request
    order, each server's reply scattered as it lands; None when the layout cuts
    rows into several column blocks (the caller then assembles as usual)."""
    if m.layout.n_col_blocks != 1:
        return None
    m, parts, places, cost, full, shape = plan_get(m, rows, None)
    # the sorted replies land in a scratch buffer: they are only scattered from
    _, into = direct_targets(m.dtype, full, places, cost, b.scratch)
    out = b.result(full, m.dtype)  # a reused buffer once the caller drops it
    landed: queue.SimpleQueue[Any] = queue.SimpleQueue()
    fut = b.submit(b.call_blocks, name, "get", parts, cost, {}, into, True, landed.put)
    fut.add_done_callback(lambda _: landed.put(None))
    while (got := landed.get()) is not None:
        for blk, part in got:
            scatter_part(out, order, places[blk][0], part)
    fut.result()  # raises what the call raised
    return out.reshape(shape)
