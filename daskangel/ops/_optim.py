"""Server-side optimisers: the step psf, gradient routing and the bound handle.

An optimiser rule (``ops.SGD``, ``ops.Adam``, ... in ``_rules.py``) is a frozen
dataclass of hyper-parameters with a vectorised ``update`` formula.  Its state
lives in extra arrays co-partitioned with the weights (Angel's convention: the
optimiser's slots sit next to the weights on the same servers), so a step is
one psf call: workers push a gradient, and the update runs where the weights
live, reading and writing weights and state together under the server lock.

:meth:`Optimizer.attach` creates the state arrays and returns a
:class:`BoundOptimizer`, which pickles to array names and can be used from any
Dask task::

    opt = ops.Adam(lr=0.01).attach(ps, w)
    opt.step(grad_values, cols=keys)      # sparse gradient of a 1-D w
    opt.step(dense_grad)                  # whole-array gradient

Example
-------
>>> import numpy as np
>>> from daskangel.ops._rules import SGD
>>> w, st = SGD(lr=0.5).update(np.ones(2), {}, np.array([1.0, -1.0]))
>>> w.tolist()
[0.5, 1.5]
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from ..errors import InvalidArgumentError, UnknownNameError
from ..psarray import ArrayMeta, Partition, PSArray, PSFuture, psf_name
from ..psarray._kernels import is_strictly_sorted
from ..psarray._plan import assemble, plan_get
from ..psarray._plan import coo_parts as _coo_parts
from ..psarray._plan import is_sparse_input as _is_sparse_input
from ..psarray._psf_server import importable
from ..psarray._routing import check_values, normalize_index, plan_axis, route_coo
from ._base import GetFunc, UpdateFunc

if TYPE_CHECKING:
    from ..context import PSContext

__all__ = [
    "BoundOptimizer",
    "OPTIMIZERS",
    "Optimizer",
    "OptimizerStep",
    "PullWithVersions",
    "RuleStep",
]

# {"module:QualName": Optimizer subclass}: rules servers may run by name
OPTIMIZERS: dict[str, type] = {}


class Optimizer:
    """Base of optimiser rules: hyper-parameters plus a vectorised ``update``.

    ``state_slots()`` lists ``(name, dtype or None, initial value)`` of the state
    arrays (``None``: the weights' dtype).  ``update(w, state, g, versions)``
    takes numpy arrays of the touched entries (any shape, all the same) and
    returns the new weights and the new value of every state slot.
    """

    __slots__ = ()
    needs_versions: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if importable(cls):
            OPTIMIZERS[psf_name(cls)] = cls

    def state_slots(self) -> list[tuple[str, str | None, float]]:
        return []

    def update(
        self,
        w: np.ndarray,
        state: dict[str, np.ndarray],
        g: np.ndarray,
        versions: np.ndarray | None = None,
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        raise NotImplementedError(f"{type(self).__name__} must implement update")

    def hyper(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}  # type: ignore[arg-type]

    def _base(self, weights: PSArray, name: str | None) -> str:
        return name or f"{weights.name}-{type(self).__name__.lower()}"

    def attach(self, ps: PSContext, weights: PSArray, name: str | None = None) -> BoundOptimizer:
        """Create the state arrays next to ``weights``; return the bound optimiser.

        State arrays are named ``{name}-{slot}``, ``name`` defaulting to
        ``{weights.name}-{optimiser}`` (e.g. ``w-adam-m``).
        """
        base = self._base(weights, name)
        state = {}
        for slot, dtype, init in self.state_slots():
            state[slot] = ps.full_like(weights, init, f"{base}-{slot}", dtype=dtype)
        return BoundOptimizer(self, weights, state)

    def reattach(self, ps: PSContext, weights: PSArray, name: str | None = None) -> BoundOptimizer:
        """Bind to state arrays an earlier :meth:`attach` created (e.g. in another process)."""
        base = self._base(weights, name)
        state = {slot: ps.get_array(f"{base}-{slot}") for slot, _, _ in self.state_slots()}
        return BoundOptimizer(self, weights, state)


def _rule(name: str, hyper: dict[str, Any]) -> Optimizer:
    cls = OPTIMIZERS.get(name)
    if cls is None:
        import importlib

        importlib.import_module(name.partition(":")[0])
        cls = OPTIMIZERS.get(name)
    if cls is None:
        raise UnknownNameError(f"rule: {name!r} is not a registered optimiser")
    return cls(**hyper)  # type: ignore[no-any-return]


@dataclass(frozen=True)
class RuleStep(UpdateFunc):
    """A psf applying an update rule (``rule``, ``hyper``) to every array it names,
    with a caller-side ``plan`` ``{block: params}``; ``_sized`` names the param
    whose size prices a block."""

    _sized: ClassVar[str] = "g"
    rule: str = ""
    hyper: dict[str, Any] = field(default_factory=dict)
    plan: Any = field(default=None, compare=False)

    def params(self) -> dict[str, Any]:
        return {"rule": self.rule, "hyper": self.hyper}

    def writes_for(self, n_arrays: int) -> tuple[int, ...]:
        return tuple(range(n_arrays))

    def split(self, metas: list[ArrayMeta]) -> dict[int, dict[str, Any]]:
        return dict(self.plan)

    def cost(self, metas: list[ArrayMeta], block: int, params: dict[str, Any]) -> int:
        return int(np.asarray(params[self._sized]).size) * 8 * len(metas)


@dataclass(frozen=True)
class OptimizerStep(RuleStep):
    """The psf of one optimiser step: arrays are the weights then the state slots.

    ``plan`` (caller only) is ``{block: params}`` from :func:`plan_gradient`.
    """

    arity: ClassVar[tuple[int, int]] = (1, 64)

    def partition_update(self, *parts: Partition, **params: Any) -> None:
        rule = _rule(self.rule, self.hyper)
        names = [s[0] for s in rule.state_slots()]
        w, state_parts = parts[0], dict(zip(names, parts[1:], strict=True))
        g = np.asarray(params["g"])
        v = params.get("v")
        v = None if v is None else np.asarray(v)
        if params.get("full"):
            state = {n: p.array for n, p in state_parts.items()}
            new_w, new_state = rule.update(w.array, state, g, v)
            w.assign(new_w)
            for n, p in state_parts.items():
                p.assign(new_state[n])
            return
        rows, cols = params["rows"], params["cols"]
        state = {n: p.read(rows, cols) for n, p in state_parts.items()}
        new_w, new_state = rule.update(w.read(rows, cols), state, g, v)
        w.write(rows, cols, new_w)
        for n, p in state_parts.items():
            p.write(rows, cols, new_state[n])


def plan_gradient(
    meta: ArrayMeta,
    grad: Any,
    rows: Any,
    cols: Any,
    versions: Any,
    casting: str | None,
    on_nonfinite: str | None,
) -> dict[int, dict[str, Any]]:
    """Validate a gradient and split it into ``{block: params}`` for :class:`OptimizerStep`.

    A dense gradient of the whole array goes block by block (``full``); anything
    else becomes coordinates, duplicates summed (their version is the oldest).
    """
    lay = meta.layout
    shape = (meta.shape[1],) if meta.ndim == 1 else meta.shape
    ver: np.ndarray | None = None
    if _is_sparse_input(grad):
        if rows is not None or cols is not None:
            raise InvalidArgumentError(
                "grad: a sparse matrix carries its own coordinates; drop rows=/cols="
            )
        r, c, g, gshape = _coo_parts(grad)
        if gshape not in (shape, meta.shape):
            raise InvalidArgumentError(
                f"grad: expected a sparse matrix of shape {shape}, got {gshape}"
            )
        if versions is not None:
            ver = np.asarray(versions, dtype=np.int64).reshape(-1)
    else:
        if meta.ndim == 1 and rows is not None:
            raise InvalidArgumentError(f"rows: array {meta.name!r} is 1-D; select with cols=")
        ri, _ = normalize_index("rows", rows, meta.shape[0])
        ci, _ = normalize_index("cols", cols, meta.shape[1])
        nr = meta.shape[0] if ri is None else ri.shape[0]
        nc = meta.shape[1] if ci is None else ci.shape[0]
        want = (nc,) if meta.ndim == 1 else (nr, nc)
        g2 = np.asarray(grad)
        if g2.shape != want:
            raise InvalidArgumentError(
                f"grad: expected shape {want} (the rows x cols selected), got {g2.shape}"
            )
        if versions is not None:
            v2 = np.asarray(versions)
            if v2.shape != want or v2.dtype.kind not in "iu":
                raise InvalidArgumentError(
                    f"versions: expected integers of shape {want}, got {v2.dtype} {v2.shape}"
                )
            ver = np.asarray(v2.reshape(nr, nc), dtype=np.int64)
        g2 = g2.reshape(nr, nc)
        fast = _sorted_plan(meta, ri, ci, g2, ver, casting, on_nonfinite)
        if fast is not None:
            return fast
        if ri is None and ci is None and lay.col_mode == "range":
            g2, keep = check_values(g2, meta.dtype, casting, on_nonfinite)
            if keep is None:
                return _full_plan(meta, g2, ver)
            r, c = np.nonzero(keep)
            g = g2[r, c]
            ver = None if ver is None else ver[r, c]
            return _coo_plan(meta, r.astype(np.int64), c.astype(np.int64), g, ver)
        rr = np.arange(nr, dtype=np.int64) if ri is None else ri
        cc = np.arange(nc, dtype=np.int64) if ci is None else ci
        r = np.repeat(rr, nc)
        c = np.tile(cc, nr)
        g = g2.reshape(-1)
        ver = None if ver is None else ver.reshape(-1)
    g, keep = check_values(np.asarray(g), meta.dtype, casting, on_nonfinite)
    if keep is not None:
        r, c, g = r[keep], c[keep], g[keep]
        ver = None if ver is None else ver[keep]
    return _coo_plan(meta, r, c, g, ver)


def _sorted_plan(
    meta: ArrayMeta,
    ri: np.ndarray | None,
    ci: np.ndarray | None,
    g2: np.ndarray,
    ver: np.ndarray | None,
    casting: str | None,
    on_nonfinite: str | None,
) -> dict[int, dict[str, Any]] | None:
    """The plan of a gradient on increasing keys along one axis of a range layout
    (``cols=`` of a 1-D array, ``rows=`` with all columns of a single column block),
    or ``None`` when the general path must plan it.

    Increasing keys have no duplicate to sum and fall into blocks as contiguous
    runs, so the plan cuts them (binary search of the block bounds) where the
    general path sorts and groups every entry: the keys a minibatch pulled, sorted
    as a pull sends them, are planned for its step in a few slices.
    """
    lay = meta.layout
    nr, nc = g2.shape
    if ri is None and ci is not None and nr == 1 and lay.col_mode == "range":
        axis, idx, extent = "cols", ci, meta.shape[1]
    elif (
        ci is None
        and ri is not None
        and lay.n_col_blocks == 1
        and lay.col_mode == "range"
        and nc == meta.shape[1]
    ):
        axis, idx, extent = "rows", ri, meta.shape[0]
    else:
        return None
    if not is_strictly_sorted(idx):
        return None
    g, keep = check_values(g2, meta.dtype, casting, on_nonfinite)
    if keep is not None:  # entries to drop: the general path removes them
        return None
    ax = plan_axis(lay, axis, idx, extent)
    out: dict[int, dict[str, Any]] = {}
    for b, loc, sl in zip(ax.blocks, ax.local, ax.out, strict=True):
        assert loc is not None and isinstance(sl, slice)  # increasing keys: runs
        if axis == "cols":
            part: dict[str, Any] = {
                "rows": np.zeros(1, np.int64),  # one row: broadcast by Partition.read/write
                "cols": loc,
                "g": g[0, sl].copy(),  # the caller may reuse its gradient array
            }
            if ver is not None:
                part["v"] = ver[0, sl].copy()
        else:
            part = {
                "rows": np.repeat(loc, nc),
                "cols": np.tile(np.arange(nc, dtype=np.int64), loc.shape[0]),
                "g": g[sl].reshape(-1),
            }
            if ver is not None:
                part["v"] = ver[sl].reshape(-1)
        out[b] = part
    return out


def _full_plan(meta: ArrayMeta, g: np.ndarray, ver: np.ndarray | None) -> dict[int, dict[str, Any]]:
    lay = meta.layout
    out = {}
    for b in range(lay.n_blocks):
        r0, r1 = lay.block_rows(b)
        c0, c1 = lay.block_cols(b)
        part: dict[str, Any] = {"full": True, "g": np.ascontiguousarray(g[r0:r1, c0:c1])}
        if ver is not None:
            part["v"] = np.ascontiguousarray(ver[r0:r1, c0:c1])
        out[b] = part
    return out


def _coo_plan(
    meta: ArrayMeta, r: np.ndarray, c: np.ndarray, g: np.ndarray, ver: np.ndarray | None
) -> dict[int, dict[str, Any]]:
    if ver is not None and ver.shape != g.shape:
        raise InvalidArgumentError(f"versions: expected {g.shape[0]} versions, got {ver.shape[0]}")
    flat = r * meta.shape[1] + c
    uniq, inv = np.unique(flat, return_inverse=True)
    if uniq.shape[0] != flat.shape[0]:
        gs = np.zeros(uniq.shape[0], np.result_type(g.dtype, np.float64))
        np.add.at(gs, inv, g)
        g = gs.astype(meta.dtype)
        if ver is not None:
            vs = np.full(uniq.shape[0], np.iinfo(np.int64).max, np.int64)
            np.minimum.at(vs, inv, ver)
            ver = vs
        r, c = np.divmod(uniq, meta.shape[1])
    routed = route_coo(meta.layout, r, c, np.arange(r.shape[0]))
    out = {}
    for b, p in routed.items():
        pos = p["values"]
        part: dict[str, Any] = {"rows": p["coo_rows"], "cols": p["coo_cols"], "g": g[pos]}
        if ver is not None:
            part["v"] = ver[pos]
        out[b] = part
    return out


@dataclass(frozen=True)
class PullWithVersions(GetFunc):
    """Weights and their per-entry versions, read together (for versioned optimisers).

    ``plan`` (caller only) is ``{block: {"rows", "cols"}}`` of local indices.
    """

    arity: ClassVar[tuple[int, int]] = (2, 2)
    plan: Any = field(default=None, compare=False)
    finish: Any = field(default=None, compare=False)

    def params(self) -> dict[str, Any]:
        return {}

    def split(self, metas: list[ArrayMeta]) -> dict[int, dict[str, Any]]:
        return {b: {"rows": p["rows"], "cols": p["cols"]} for b, p in self.plan.items()}

    def partition_get(self, *parts: Partition, **params: Any) -> Any:
        return [_grid_get(p, params["rows"], params["cols"]) for p in parts]

    def merge(self, partials: dict[int, Any], metas: list[ArrayMeta]) -> Any:
        fw, fv = self.finish
        return fw({b: p[0] for b, p in partials.items()}), fv(
            {b: p[1] for b, p in partials.items()}
        )


def _grid_get(p: Partition, rows: Any, cols: Any) -> np.ndarray:
    r = np.arange(p.shape[0], dtype=np.int64) if rows is None else np.asarray(rows, np.int64)
    c = np.arange(p.shape[1], dtype=np.int64) if cols is None else np.asarray(cols, np.int64)
    if not p.sparse:
        return p.array[np.ix_(r, c)]
    return p.read(np.repeat(r, c.shape[0]), np.tile(c, r.shape[0])).reshape(r.shape[0], -1)


@dataclass(frozen=True)
class BoundOptimizer:
    """An optimiser attached to a weights array and its state arrays.

    Pickles to array names, so it can be sent to Dask tasks.  ``state`` maps slot
    names to their co-partitioned arrays.
    """

    optimizer: Optimizer
    weights: PSArray
    state: dict[str, PSArray]

    @property
    def arrays(self) -> list[PSArray]:
        """Weights then state arrays, in the order the step psf takes them."""
        return [self.weights] + [self.state[s[0]] for s in self.optimizer.state_slots()]

    def _step(
        self,
        grad: Any,
        rows: Any,
        cols: Any,
        versions: Any,
        casting: str | None,
        on_nonfinite: str | None,
    ) -> OptimizerStep:
        if self.optimizer.needs_versions and versions is None:
            raise InvalidArgumentError(
                f"versions: {type(self.optimizer).__name__} needs the versions the gradient "
                "was computed against, as returned by opt.pull()"
            )
        plan = plan_gradient(self.weights.meta, grad, rows, cols, versions, casting, on_nonfinite)
        return OptimizerStep(psf_name(type(self.optimizer)), self.optimizer.hyper(), plan)

    def step_async(
        self,
        grad: Any,
        rows: Any = None,
        cols: Any = None,
        *,
        versions: Any = None,
        casting: str | None = None,
        on_nonfinite: str | None = None,
        atomic: bool = True,
    ) -> PSFuture:
        """Start :meth:`step`; ``result()`` returns ``None`` once applied."""
        func = self._step(grad, rows, cols, versions, casting, on_nonfinite)
        return self.weights.psf_async(func, *self.arrays[1:], atomic=atomic)

    def step(
        self,
        grad: Any,
        rows: Any = None,
        cols: Any = None,
        *,
        versions: Any = None,
        casting: str | None = None,
        on_nonfinite: str | None = None,
        atomic: bool = True,
    ) -> None:
        """Apply one optimiser step for ``grad`` on the servers.

        ``grad`` is shaped like the selection ``rows`` x ``cols`` (as in
        ``PSArray.increment``), a dense gradient of the whole array, or a
        ``scipy.sparse`` / ``sparse.COO`` matrix of the array's shape.  Only the
        touched entries (and their state) change; duplicate indices are summed.
        ``versions`` (versioned optimisers) are those :meth:`pull` returned.
        """
        func = self._step(grad, rows, cols, versions, casting, on_nonfinite)
        self.weights.psf(func, *self.arrays[1:], atomic=atomic)

    def pull(self, rows: Any = None, cols: Any = None) -> Any:
        """The weights at ``rows`` x ``cols``; with versions ``(values, versions)``."""
        if not self.optimizer.needs_versions:
            return self.weights.get(rows, cols)
        ver = self.state["ver"]
        m, parts, places, _, full, shape = plan_get(self.weights.meta, rows, cols)
        fw = assemble(m, places, full, shape)
        fv = assemble(ver.meta, places, full, shape)
        plan = {b: {"rows": p["rows"], "cols": p["cols"]} for b, p in parts.items()}
        return self.weights.psf(PullWithVersions(plan, (fw, fv)), ver)

    def drop(self, ps: PSContext) -> None:
        """Free the state arrays."""
        for arr in self.state.values():
            ps.drop(arr.name)
