"""The psf framework: :class:`GetFunc` and :class:`UpdateFunc`.

A psf is a small object naming what to run next to the blocks.  The caller
splits it into one call per touched block (:meth:`PSFunc.split`), each server
runs the partition method on its blocks, and a get psf's partial results are
combined by :meth:`GetFunc.merge` on the caller::

    caller: split(metas) -> {block: params}       (one message per server)
    server: partition_get(*parts, **params)       (one call per block)
    caller: merge({block: partial}, metas) -> result

An update psf runs ``partition_update(*parts, **params)`` on staged views of each
block and the servers commit only when every block succeeded (see
``daskangel/psarray/_psf_server.py``).

Subclasses defined in an importable module register themselves, so servers run
them by name (``"module:QualName"``) with their dataclass fields as parameters.
A psf defined in ``__main__``, in a function, or holding a callable travels
pickled, which servers refuse unless ``daskangel.ops.allow-pickled-psf`` is true.

Example
-------
>>> import dataclasses, numpy as np
>>> @dataclasses.dataclass(frozen=True)
... class CountAbove(GetFunc):
...     threshold: float = 0.0
...     def partition_get(self, part):
...         return int((part.array > self.threshold).sum())
...     def merge(self, partials, metas):
...         return sum(partials.values())
>>> CountAbove(0.5).params()
{'threshold': 0.5}
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import numpy as np

from .. import config
from ..errors import InvalidArgumentError, PSFNotAllowedError
from ..psarray import ArrayMeta, Partition, psf_name, register_psf
from ..psarray._psf_server import importable

__all__ = ["GetFunc", "PSFunc", "UpdateFunc", "plain"]


def plain(value: Any) -> bool:
    """True when ``value`` can travel as a psf parameter without pickling."""
    if value is None or isinstance(value, (bool, int, float, str, bytes, np.ndarray)):
        return not isinstance(value, np.ndarray) or value.dtype.kind in "biuf"
    if isinstance(value, np.generic):
        return True
    if isinstance(value, (list, tuple)):
        return all(plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and plain(v) for k, v in value.items())
    return False


class PSFunc:
    """Common base of get and update psfs (see the module docstring).

    Class attributes: ``psf_kind`` (``"get"`` / ``"update"``) and ``arity``, the
    ``(min, max)`` number of arrays the psf takes.
    """

    __slots__ = ()
    psf_kind: ClassVar[str] = ""
    arity: ClassVar[tuple[int, int]] = (1, 1)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if importable(cls):
            register_psf(cls)

    # -- travelling ------------------------------------------------------------------

    def params(self) -> dict[str, Any]:
        """The parameters servers rebuild the psf from (default: dataclass fields)."""
        if dataclasses.is_dataclass(self):
            return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.init}
        return {}

    @classmethod
    def from_params(cls, params: dict[str, Any]) -> PSFunc:
        """Rebuild the psf on a server from :meth:`params`."""
        return cls(**params)

    def psf_spec(self) -> dict[str, Any]:
        """How the psf travels: by importable name, or pickled when that is allowed."""
        cls = type(self)
        params = self.params()
        if importable(cls) and plain(params):
            return {"name": psf_name(cls), "params": params}
        if not bool(config.get("daskangel.ops.allow-pickled-psf")):
            why = (
                f"it is defined in {cls.__module__}, which servers cannot import"
                if not importable(cls)
                else "its parameters hold a callable or an object"
            )
            raise PSFNotAllowedError(
                f"func: psf {cls.__qualname__} would have to travel pickled ({why}); define "
                "it in an importable module with plain parameters (numbers, strings, numpy "
                "arrays, registered function names), or set daskangel.ops.allow-pickled-psf: "
                "true on the client and the workers"
            )
        import cloudpickle

        return {"pickled": cloudpickle.dumps(self)}

    # -- planning on the caller -----------------------------------------------------------

    def check(self, metas: list[ArrayMeta]) -> None:
        """Validate the call before anything is sent (default: the number of arrays)."""
        lo, hi = self.arity
        if not lo <= len(metas) <= hi:
            want = str(lo) if lo == hi else f"{lo} to {hi}"
            raise InvalidArgumentError(
                f"arrays: {type(self).__name__} takes {want} arrays, got {len(metas)}"
            )

    def split(self, metas: list[ArrayMeta]) -> dict[int, dict[str, Any]]:
        """``{block_id: params}`` of the blocks to run on (default: all, no params)."""
        return {b: {} for b in range(metas[0].layout.n_blocks)}


class GetFunc(PSFunc):
    """A psf that reads blocks and returns a merged result.

    Implement ``partition_get(*parts, **params)`` (runs on the server holding the
    block, one :class:`~daskangel.psarray.Partition` per array) and
    ``merge(partials, metas)`` (runs on the caller).  ``output(metas)`` may
    return the expected ``(shape, dtype)`` of the result, which is then checked.
    """

    __slots__ = ()
    psf_kind: ClassVar[str] = "get"

    def partition_get(self, *parts: Partition, **params: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must implement partition_get")

    def merge(self, partials: dict[int, Any], metas: list[ArrayMeta]) -> Any:
        """Combine ``{block_id: partial}`` (default: return them as they are)."""
        return partials

    def output(self, metas: list[ArrayMeta]) -> Any:
        """Expected ``(shape, dtype)`` of the merged result, or ``None`` (unchecked)."""
        return None


class UpdateFunc(PSFunc):
    """A psf that changes blocks in place, all-or-nothing.

    Implement ``partition_update(*parts, **params)``: change the writable views
    (``part.data[...] = ...``, ``part.assign(new)``, ``part.write(rows, cols,
    values)``, ``part.replace(keys, values)`` ...).  ``writes_for(n)`` says which of
    the ``n`` arrays of a call are written (default: the first); the others are
    read-only views.  It returns ``None``, or values that a ``merge_update(partials,
    metas)`` method combines into the call's result (``ops._steppull.StepPull``: a
    step that returns the weights of the next pull).
    """

    __slots__ = ()
    psf_kind: ClassVar[str] = "update"

    def partition_update(self, *parts: Partition, **params: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must implement partition_update")

    def writes_for(self, n_arrays: int) -> tuple[int, ...]:
        return (0,)
