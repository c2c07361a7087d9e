"""One request per server for an optimiser step and the next pull: :class:`StepPull`.

Angel's PS-SGD worker pushes a minibatch's gradient to the server-side optimiser
and pulls the next minibatch's weights: two requests to every server a
minibatch, each paying the transport and the server's dispatch.  A *step-pull*
sends steps and pulls in one message per server: the server applies the steps in
order (the rule and its state, as :class:`~._optim.OptimizerStep` does; a step
reads the ones before it) and returns the weights of each key list to pull, read
*after* the steps (an entry both stepped and pulled reads its new value).  A
task pipelining its minibatches sends one message per server for a minibatch's
step and a later one's pull, or for several of each.

Every key list is strictly increasing global indices along one axis of a
range-partitioned array: ``cols`` of a 1-D array, or ``rows`` (every column) of
a 2-D array with one column block.  There may be no step (pulls alone) or no
pull (steps alone).  The update is all-or-nothing per server like every update
psf; with ``atomic=False`` (the default here, as the minibatch solvers push)
each server commits on its own.

Example
-------
>>> opt = angel.ops.AdaGrad(lr=0.1).attach(ps, w)                 # doctest: +SKIP
>>> f = angel.ops.step_pull_async(opt, [grad], [keys], [next_keys])  # doctest: +SKIP
>>> [next_w] = f.result()     # w[next_keys] after the step       # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from ..errors import InvalidArgumentError, PSIndexError
from ..psarray import ArrayMeta, Partition, PSFuture, psf_name
from ..psarray._kernels import is_strictly_sorted
from ..psarray._routing import check_values, plan_axis
from ._kernels import patch_sorted
from ._optim import BoundOptimizer, RuleStep, _rule

__all__ = ["StepPull", "fusable", "step_pull_async"]


@dataclass(frozen=True)
class StepPull(RuleStep):
    """The psf of steps and pulls along ``axis``: arrays are the weights, then the
    rule's state slots.

    A block's params are ``k`` (a list: the local keys of each step touching the
    block, in order) with ``g`` (their gradients: 1-D for ``cols``, ``(len(k),
    n_cols)`` for ``rows``) and / or ``p`` (a list of ``(pull number, local keys)``).
    The steps apply one after the other (each reads the ones before), then every
    pull reads the block as they left it.  ``plan`` and ``where`` (caller only):
    ``{block: params}`` and ``[(n keys, [(block, slice of the result)])]`` per pull,
    with ``width`` the row width (``None``: 1-D).
    """

    arity: ClassVar[tuple[int, int]] = (1, 64)
    axis: str = "cols"
    where: Any = field(default=None, compare=False)
    width: Any = field(default=None, compare=False)

    def params(self) -> dict[str, Any]:
        return {"rule": self.rule, "hyper": self.hyper, "axis": self.axis}

    def cost(self, metas: list[ArrayMeta], block: int, params: dict[str, Any]) -> int:
        n = sum(np.asarray(g).size for g in params.get("g", ()))
        n += sum(np.asarray(k).size for _, k in params.get("p", ()))
        return int(n) * 8 * len(metas)

    def partition_update(self, *parts: Partition, **params: Any) -> list[Any] | None:
        rule = _rule(self.rule, self.hyper)
        names = [s[0] for s in rule.state_slots()]
        w, state_parts = parts[0], dict(zip(names, parts[1:], strict=True))
        ks = [_local(w, self.axis, k) for k in params.get("k", ())]
        gs = [np.asarray(g) for g in params.get("g", ())]
        if len(ks) != len(gs):
            raise InvalidArgumentError(f"g: expected {len(ks)} gradients, got {len(gs)}")
        # u: the touched keys, strictly increasing (a hand-made request's unsorted or
        # repeated keys are merged: the pulls' patch below walks u in order)
        single = len(ks) == 1 and is_strictly_sorted(ks[0])
        u = ks[0] if single else np.unique(np.concatenate(ks)) if ks else None
        cur = None
        if u is not None:  # the touched entries, stepped in order, then staged
            cur = _read(w, self.axis, u)
            st = {n: _read(p, self.axis, u) for n, p in state_parts.items()}
            for k, g in zip(ks, gs, strict=True):
                at: Any = slice(None) if single else np.searchsorted(u, k)
                new_w, new_st = rule.update(cur[at], {n: a[at] for n, a in st.items()}, g, None)
                cur[at] = new_w
                for n, a in st.items():
                    a[at] = new_st[n]
            _write(w, self.axis, u, cur)
            for n, p in state_parts.items():
                _write(p, self.axis, u, st[n])
        pulls = params.get("p")
        if not pulls:
            return None
        out = []
        for j, pk in pulls:
            pk = _local(w, self.axis, pk)
            got = _read(w, self.axis, pk)  # committed: patch the entries stepped above
            if u is not None and cur is not None and u.shape[0] and pk.shape[0]:
                if is_strictly_sorted(pk):
                    patch_sorted(u, _2d(cur), pk, _2d(got))
                else:  # (the caller plans increasing keys; any others the slow way)
                    at = np.minimum(np.searchsorted(u, pk), u.shape[0] - 1)
                    hit = u[at] == pk
                    got[hit] = cur[at[hit]]
            out.append([int(j), got])
        return out

    def merge_update(self, partials: dict[int, Any], metas: list[ArrayMeta]) -> Any:
        """The pulled weights, a list in the order of the pulls; ``None`` when a part
        came back without values (a resend found its steps applied already)."""
        outs = []
        for n, _ in self.where:
            shape = (n,) if self.width is None else (n, self.width)
            outs.append(np.empty(shape, dtype=metas[0].dtype))
        got: dict[tuple[int, int], np.ndarray] = {}
        for b, part in partials.items():
            if isinstance(part, (list, tuple)):  # (msgpack gives tuples)
                got.update(((b, int(j)), v) for j, v in part)
        for j, (_, where) in enumerate(self.where):
            for b, sl in where:
                v = got.get((b, j))
                if v is None:
                    return None
                outs[j][sl] = v
        return outs


def _2d(a: np.ndarray) -> np.ndarray:
    return a.reshape(a.shape[0], -1)


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
    grads: Sequence[Any],
    keys: Sequence[Any],
    pulls: Sequence[Any],
    *,
    axis: str = "cols",
    casting: str | None = None,
    atomic: bool = False,
) -> PSFuture:
    """Apply ``opt``'s steps ``grads`` at ``keys`` in order, then pull the weights at
    each of ``pulls``, one message per server; ``result()`` is the list of pulled
    arrays (``None`` when a resend found a part applied already: pull them again).

    Every key list is strictly increasing along ``axis`` (``'cols'`` of a 1-D array:
    a gradient of shape ``(len(keys),)``; ``'rows'`` of a 2-D array with one column
    block: ``(len(keys), n_cols)``).  Refused (named) when the layout or the rule does
    not allow it (:func:`fusable`), or on a malformed argument, before anything is sent.
    """
    if not fusable(opt, axis):
        raise InvalidArgumentError(
            f"opt: a step-pull needs a range-partitioned array along {axis!r} (cols of a 1-D "
            "array, rows of a 2-D array with one column block) and a rule without versions, "
            f"got {opt.weights.name!r} {opt.weights.meta.layout.describe()}, "
            f"{type(opt.optimizer).__name__}"
        )
    if len(grads) != len(keys):
        raise InvalidArgumentError(
            f"grads: expected one gradient per key list ({len(keys)}), got {len(grads)}"
        )
    m = opt.weights.meta
    extent = m.shape[1] if axis == "cols" else m.shape[0]
    width = None if axis == "cols" else m.shape[1]
    lay = m.layout
    plan: dict[int, dict[str, Any]] = {}
    for grad, kk in zip(grads, keys, strict=True):
        k = _keys("keys", kk, extent)
        g = np.asarray(grad)
        want = (k.shape[0],) if width is None else (k.shape[0], width)
        if g.shape != want:
            raise InvalidArgumentError(f"grad: expected shape {want} (one per key), got {g.shape}")
        g, keep = check_values(g, m.dtype, casting, "raise")
        assert keep is None  # non-finite entries raise above
        if k.shape[0]:
            ax = plan_axis(lay, axis, k, extent)
            for b, loc, sl in zip(ax.blocks, ax.local, ax.out, strict=True):
                part = plan.setdefault(_block(lay, axis, b), {"k": [], "g": []})
                part["k"].append(loc)
                part["g"].append(np.array(g[sl]))  # the caller may reuse its gradient
    where: list[tuple[int, list[tuple[int, slice]]]] = []
    for j, pull in enumerate(pulls):
        pk = _keys("pulls", pull, extent)
        runs: list[tuple[int, slice]] = []
        if pk.shape[0]:
            ax = plan_axis(lay, axis, pk, extent)
            for b, loc, sl in zip(ax.blocks, ax.local, ax.out, strict=True):
                blk = _block(lay, axis, b)
                plan.setdefault(blk, {}).setdefault("p", []).append([j, loc])
                assert isinstance(sl, slice)  # increasing keys: runs
                runs.append((blk, sl))
        where.append((pk.shape[0], runs))
    func = StepPull(
        psf_name(type(opt.optimizer)),
        opt.optimizer.hyper(),
        plan,
        axis=axis,
        where=where,
        width=width,
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
