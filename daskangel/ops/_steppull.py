"""One request per server for an optimiser step and the next pull: :class:`StepPull`.

Angel's PS-SGD worker pushes a minibatch's gradient to the server-side optimiser
and pulls the next minibatch's weights: two requests to every server a
minibatch, each paying the transport and the server's dispatch.  A *step-pull*
sends both in one message per server: the server applies the step (the rule and
its state, as :class:`~._optim.OptimizerStep` does) and returns the weights of
the keys to pull, read *after* the step (an entry both stepped and pulled reads
its new value), so a task pipelining its minibatches sends half the messages.

Both key lists are strictly increasing global indices along one axis of a
range-partitioned array: ``cols`` of a 1-D array, or ``rows`` (every column) of
a 2-D array with one column block.  Either list may be empty (a pull alone, a
step alone).  The update is all-or-nothing per server like every update psf;
with ``atomic=False`` (the default here, as the minibatch solvers push) each
server commits on its own.

Example
-------
>>> opt = angel.ops.AdaGrad(lr=0.1).attach(ps, w)                 # doctest: +SKIP
>>> f = angel.ops.step_pull_async(opt, grad, keys, next_keys, axis="cols")  # doctest: +SKIP
>>> next_w = f.result()       # w[next_keys] after the step       # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from ..errors import InvalidArgumentError, PSIndexError
from ..psarray import ArrayMeta, Partition, PSFuture, psf_name
from ..psarray._kernels import is_strictly_sorted
from ..psarray._routing import check_values, plan_axis
from ._optim import BoundOptimizer, RuleStep, _rule

__all__ = ["StepPull", "fusable", "step_pull_async"]


@dataclass(frozen=True)
class StepPull(RuleStep):
    """The psf of a step and a pull along ``axis``: arrays are the weights, then
    the rule's state slots.

    A block's params are ``k`` (local keys stepped) with ``g`` (their gradient:
    1-D for ``cols``, ``(len(k), n_cols)`` for ``rows``) and / or ``p`` (local
    keys pulled).  ``plan`` and ``where`` (caller only): ``{block: params}`` and
    ``(n pulled, [(block, slice of the result)], row width or None)``.
    """

    arity: ClassVar[tuple[int, int]] = (1, 64)
    axis: str = "cols"
    where: Any = field(default=None, compare=False)

    def params(self) -> dict[str, Any]:
        return {"rule": self.rule, "hyper": self.hyper, "axis": self.axis}

    def cost(self, metas: list[ArrayMeta], block: int, params: dict[str, Any]) -> int:
        n = np.asarray(params.get("g", ())).size + np.asarray(params.get("p", ())).size
        return int(n) * 8 * len(metas)

    def partition_update(self, *parts: Partition, **params: Any) -> np.ndarray | None:
        rule = _rule(self.rule, self.hyper)
        names = [s[0] for s in rule.state_slots()]
        w, state_parts = parts[0], dict(zip(names, parts[1:], strict=True))
        k = params.get("k")
        new_w = None
        if k is not None:
            k = _local(w, self.axis, k)
            g = np.asarray(params["g"])
            state = {n: _read(p, self.axis, k) for n, p in state_parts.items()}
            new_w, new_state = rule.update(_read(w, self.axis, k), state, g, None)
            _write(w, self.axis, k, new_w)
            for n, p in state_parts.items():
                _write(p, self.axis, k, new_state[n])
        pk = params.get("p")
        if pk is None:
            return None
        pk = _local(w, self.axis, pk)
        out = _read(w, self.axis, pk)  # committed: patch the entries stepped above
        if new_w is not None and k is not None and k.shape[0] and pk.shape[0]:
            at = np.minimum(np.searchsorted(k, pk), k.shape[0] - 1)
            hit = k[at] == pk
            out[hit] = np.asarray(new_w, dtype=out.dtype)[at[hit]]
        return out

    def merge_update(self, partials: dict[int, Any], metas: list[ArrayMeta]) -> Any:
        """The pulled weights in the order of the pulled keys; ``None`` when a part
        came back without values (a resend found its step applied already)."""
        n, where, width = self.where
        out = np.empty((n,) if width is None else (n, width), dtype=metas[0].dtype)
        for b, sl in where:
            part = partials.get(b)
            if not isinstance(part, np.ndarray):
                return None
            out[sl] = part
        return out


def _local(p: Partition, axis: str, keys: Any) -> np.ndarray:
    """``keys`` as local indices along ``axis`` of ``p``, checked in range."""
    k = np.asarray(keys, dtype=np.int64).reshape(-1)
    ext = p.shape[1] if axis == "cols" else p.shape[0]
    if k.shape[0] and (int(k.min()) < 0 or int(k.max()) >= ext):
        raise PSIndexError(
            f"{axis}: local index outside [0, {ext}) in block {p.block} of {p.name!r}"
        )
    return k


def _read(p: Partition, axis: str, k: np.ndarray) -> np.ndarray:
    """Committed values of keys ``k`` (a copy): a 1-D take of a dense block's row."""
    if axis == "cols":
        if not p.sparse:
            return p.array[0].take(k)
        return p.read(np.zeros(1, np.int64), k)
    if not p.sparse:
        return p.array.take(k, axis=0)
    nc = p.shape[1]
    return p.read(np.repeat(k, nc), np.tile(np.arange(nc), k.shape[0])).reshape(-1, nc)


def _write(p: Partition, axis: str, k: np.ndarray, values: np.ndarray) -> None:
    if axis == "cols":
        p.write(np.zeros(1, np.int64), k, values)
        return
    nc = p.shape[1]
    p.write(np.repeat(k, nc), np.tile(np.arange(nc, dtype=np.int64), k.shape[0]), values)


def fusable(opt: BoundOptimizer, axis: str) -> bool:
    """Whether :func:`step_pull_async` can serve ``opt``'s weights along ``axis``."""
    m = opt.weights.meta
    lay = m.layout
    if opt.optimizer.needs_versions or lay.col_mode != "range":
        return False
    if axis == "cols":
        return m.ndim == 1
    return axis == "rows" and m.ndim == 2 and lay.n_col_blocks == 1


def step_pull_async(
    opt: BoundOptimizer,
    grad: Any,
    keys: Any,
    pull: Any,
    *,
    axis: str = "cols",
    casting: str | None = None,
    atomic: bool = False,
) -> PSFuture:
    """Step ``opt`` with ``grad`` at ``keys`` and pull the weights at ``pull``, one
    message per server; ``result()`` returns the pulled weights (``None`` when a
    resend found a part applied already: pull them again).

    ``keys`` and ``pull`` are strictly increasing indices along ``axis``
    (``'cols'`` of a 1-D array: ``grad`` of shape ``(len(keys),)``; ``'rows'`` of
    a 2-D array with one column block: ``(len(keys), n_cols)``).  Refused (named)
    when the layout or the rule does not allow it (:func:`fusable`).
    """
    if not fusable(opt, axis):
        raise InvalidArgumentError(
            f"opt: a step-pull needs a range-partitioned array along {axis!r} (cols of a 1-D "
            "array, rows of a 2-D array with one column block) and a rule without versions, "
            f"got {opt.weights.name!r} {opt.weights.meta.layout.describe()}, "
            f"{type(opt.optimizer).__name__}"
        )
    m = opt.weights.meta
    extent = m.shape[1] if axis == "cols" else m.shape[0]
    width = None if axis == "cols" else m.shape[1]
    k = _keys("keys", keys, extent)
    pk = _keys("pull", pull, extent)
    g = np.asarray(grad)
    want = (k.shape[0],) if width is None else (k.shape[0], width)
    if g.shape != want:
        raise InvalidArgumentError(f"grad: expected shape {want} (one per key), got {g.shape}")
    g, keep = check_values(g, m.dtype, casting, "raise")
    assert keep is None  # non-finite entries raise above
    lay = m.layout
    plan: dict[int, dict[str, Any]] = {}
    if k.shape[0]:
        ax = plan_axis(lay, axis, k, extent)
        for b, loc, sl in zip(ax.blocks, ax.local, ax.out, strict=True):
            plan[_block(lay, axis, b)] = {"k": loc, "g": np.array(g[sl])}  # caller may reuse g
    where: list[tuple[int, slice]] = []
    if pk.shape[0]:
        ax = plan_axis(lay, axis, pk, extent)
        for b, loc, sl in zip(ax.blocks, ax.local, ax.out, strict=True):
            blk = _block(lay, axis, b)
            plan.setdefault(blk, {})["p"] = loc
            assert isinstance(sl, slice)  # increasing keys: runs
            where.append((blk, sl))
    func = StepPull(
        psf_name(type(opt.optimizer)),
        opt.optimizer.hyper(),
        plan,
        axis=axis,
        where=(pk.shape[0], where, width),
    )
    return opt.weights.psf_async(func, *opt.arrays[1:], atomic=atomic)


def _keys(name: str, keys: Any, extent: int) -> np.ndarray:
    k = np.asarray(keys)
    if k.ndim != 1 or (k.shape[0] and k.dtype.kind not in "iu"):
        raise InvalidArgumentError(f"{name}: expected a 1-D integer array, got {k.dtype} {k.shape}")
    k = k.astype(np.int64, copy=False)
    if k.shape[0] and not is_strictly_sorted(k):
        raise InvalidArgumentError(f"{name}: expected strictly increasing indices")
    if k.shape[0] and (int(k[0]) < 0 or int(k[-1]) >= extent):
        raise InvalidArgumentError(
            f"{name}: expected indices in [0, {extent}), got {int(k[0])}..{int(k[-1])}"
        )
    return k


def _block(lay: Any, axis: str, b: int) -> int:
    """The block id (``i * n_col_blocks + j``) of axis group ``b``: the other axis
    has one block (a 1-D array's one row; rows of a single column block)."""
    return int(b) if axis == "cols" else int(b) * lay.n_col_blocks
