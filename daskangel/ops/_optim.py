"""Server-side optimisers: the rule base, the step psf and the bound handle.

Gradients are validated and split by block in ``_gradplan.py``.

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
from ..psarray._plan import assemble, plan_get
from ..psarray._psf_server import importable
from ._base import GetFunc, UpdateFunc
from ._gradplan import _coo_plan as _coo_plan  # also read here (tests/ops/test_optim.py)
from ._gradplan import _sorted_plan as _sorted_plan  # likewise
from ._gradplan import plan_gradient

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
