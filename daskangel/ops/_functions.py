"""Named element-wise functions that map psfs apply on the servers.

A map psf names its function (``ops.Map("exp")``, ``ops.Zip2Map("max")``) instead
of carrying a callable, so it travels without pickling.  Built-ins are below;
:func:`register_function` adds your own from an importable module: servers look
a name up here, importing the module part of ``"module:name"`` first.

Functions are vectorised: they take numpy arrays (plus the psf's ``args``) and
return an array of the same shape.

Example
-------
>>> import numpy as np
>>> get_function("soft_threshold")(np.array([-2.0, 0.5, 3.0]), 1.0).tolist()
[-1.0, 0.0, 2.0]
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import UnknownNameError

__all__ = ["FUNCTIONS", "get_function", "register_function"]

Fn = Callable[..., Any]

# {name: vectorised function(*arrays, *args) -> array}
FUNCTIONS: dict[str, Fn] = {}


def register_function(name: str) -> Callable[[Fn], Fn]:
    """Register a vectorised function under ``name`` for map psfs.

    Use ``"your.module:name"`` for your own functions so servers can import them.
    """

    def deco(fn: Fn) -> Fn:
        FUNCTIONS[name] = fn
        return fn

    return deco


def get_function(name: str) -> Fn:
    """The function registered as ``name`` (importing its module if needed)."""
    fn = FUNCTIONS.get(name)
    if fn is None and ":" in name:
        with contextlib.suppress(ImportError):
            importlib.import_module(name.partition(":")[0])
        fn = FUNCTIONS.get(name)
    if fn is None:
        raise UnknownNameError(
            f"func: no registered function {name!r}; built-ins are {sorted(FUNCTIONS)}, "
            "add yours with ops.register_function('your.module:name')"
        )
    return fn


def _unary(name: str, ufunc: Fn) -> None:
    FUNCTIONS[name] = lambda x: ufunc(x)


_UFUNCS: dict[str, Fn] = {
    "abs": np.abs,
    "exp": np.exp,
    "expm1": np.expm1,
    "log": np.log,
    "log10": np.log10,
    "log1p": np.log1p,
    "sqrt": np.sqrt,
    "ceil": np.ceil,
    "floor": np.floor,
    "round": np.round,
    "sign": np.sign,
    "negative": np.negative,
    "square": np.square,
}
for _name, _uf in _UFUNCS.items():
    _unary(_name, _uf)


@register_function("pow")
def _pow(x: np.ndarray, p: float) -> np.ndarray:
    return np.power(x, x.dtype.type(p) if x.dtype.kind == "f" else p)


@register_function("clip")
def _clip(x: np.ndarray, lo: float | None, hi: float | None) -> np.ndarray:
    return np.clip(x, lo, hi)


@register_function("soft_threshold")
def _soft_threshold(x: np.ndarray, lam: float) -> np.ndarray:
    """``sign(x) * max(|x| - lam, 0)``: the proximal step of an L1 penalty."""
    return np.sign(x) * np.maximum(np.abs(x) - lam, 0)


@register_function("add_scalar")
def _add_scalar(x: np.ndarray, v: float) -> np.ndarray:
    return x + v


@register_function("mul_scalar")
def _mul_scalar(x: np.ndarray, v: float) -> np.ndarray:
    return x * v


@register_function("add")
def _add(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return x + y


@register_function("sub")
def _sub(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return x - y


@register_function("mul")
def _mul(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return x * y


@register_function("div")
def _div(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return x / y


@register_function("max")
def _max(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.maximum(x, y)


@register_function("min")
def _min(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.minimum(x, y)


@register_function("fma")
def _fma(x: np.ndarray, y: np.ndarray, z: np.ndarray) -> np.ndarray:
    """``x * y + z``."""
    return x * y + z
