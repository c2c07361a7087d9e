"""Named element-wise psfs: unary functions, scalar arithmetic, binary ops, BLAS-1.

All follow the operand rule of the map helpers (``_maps.py``): with as many
arrays as inputs the first is written, with one more the last is.  ``Axpy`` and
``Copy`` keep BLAS order: ``ps.psf(Axpy(alpha), x, y)`` is ``y += alpha * x``.

Example
-------
>>> import numpy as np
>>> SoftThreshold(1.0).apply(np.array([-2.0, 0.5])).tolist()
[-1.0, 0.0]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ..psarray import Partition
from . import _kernels as K
from ._base import UpdateFunc
from ._functions import get_function
from ._maps import ElementMap, ZipMap, zip_apply

__all__ = [
    "Abs",
    "Add",
    "AddS",
    "Axpy",
    "Ceil",
    "Clip",
    "Copy",
    "Div",
    "DivS",
    "Exp",
    "Expm1",
    "Floor",
    "Log",
    "Log10",
    "Log1p",
    "MaxV",
    "MinV",
    "Mul",
    "MulS",
    "Pow",
    "Round",
    "Scale",
    "Signum",
    "SoftThreshold",
    "Sqrt",
    "Sub",
    "SubS",
]


# -- named unary maps ------------------------------------------------------------------------


class _Named(ElementMap):
    __slots__ = ()
    fname: ClassVar[str] = ""

    def apply(self, x: Any) -> Any:  # type: ignore[override]
        return get_function(self.fname)(x)


@dataclass(frozen=True)
class Abs(_Named):
    """``x = |x|`` (Angel ``Abs``)."""

    fname: ClassVar[str] = "abs"


@dataclass(frozen=True)
class Exp(_Named):
    """``x = exp(x)`` (Angel ``Exp``)."""

    fname: ClassVar[str] = "exp"


@dataclass(frozen=True)
class Expm1(_Named):
    """``x = exp(x) - 1`` (Angel ``Expm1``)."""

    fname: ClassVar[str] = "expm1"


@dataclass(frozen=True)
class Log(_Named):
    """``x = ln(x)`` (Angel ``Log``)."""

    fname: ClassVar[str] = "log"


@dataclass(frozen=True)
class Log10(_Named):
    """``x = log10(x)`` (Angel ``Log10``)."""

    fname: ClassVar[str] = "log10"


@dataclass(frozen=True)
class Log1p(_Named):
    """``x = ln(1 + x)`` (Angel ``Log1p``)."""

    fname: ClassVar[str] = "log1p"


@dataclass(frozen=True)
class Sqrt(_Named):
    """``x = sqrt(x)`` (Angel ``Sqrt``)."""

    fname: ClassVar[str] = "sqrt"


@dataclass(frozen=True)
class Ceil(_Named):
    """``x = ceil(x)`` (Angel ``Ceil``)."""

    fname: ClassVar[str] = "ceil"


@dataclass(frozen=True)
class Floor(_Named):
    """``x = floor(x)`` (Angel ``Floor``)."""

    fname: ClassVar[str] = "floor"


@dataclass(frozen=True)
class Round(_Named):
    """``x = round(x)``, halves to even (Angel ``Round``)."""

    fname: ClassVar[str] = "round"


@dataclass(frozen=True)
class Signum(_Named):
    """``x = sign(x)`` (Angel ``Signum``)."""

    fname: ClassVar[str] = "sign"


@dataclass(frozen=True)
class Pow(ElementMap):
    """``x = x ** p`` (Angel ``Pow``)."""

    p: float

    def apply(self, x: Any) -> Any:  # type: ignore[override]
        return get_function("pow")(x, self.p)


@dataclass(frozen=True)
class Clip(ElementMap):
    """``x = min(max(x, lo), hi)``; ``None`` leaves a side open."""

    lo: float | None = None
    hi: float | None = None

    def apply(self, x: Any) -> Any:  # type: ignore[override]
        return get_function("clip")(x, self.lo, self.hi)


@dataclass(frozen=True)
class SoftThreshold(ElementMap):
    """``x = sign(x) * max(|x| - lam, 0)``, the L1 proximal step."""

    lam: float

    def apply(self, x: Any) -> Any:  # type: ignore[override]
        return get_function("soft_threshold")(x, self.lam)


# -- scalar arithmetic -------------------------------------------------------------------------


@dataclass(frozen=True)
class AddS(ElementMap):
    """``x = x + value`` (Angel ``AddS``)."""

    value: float

    def apply(self, x: Any) -> Any:  # type: ignore[override]
        return x + self.value


@dataclass(frozen=True)
class SubS(ElementMap):
    """``x = x - value`` (Angel ``SubS``)."""

    value: float

    def apply(self, x: Any) -> Any:  # type: ignore[override]
        return x - self.value


@dataclass(frozen=True)
class MulS(ElementMap):
    """``x = x * value`` (Angel ``MulS``)."""

    value: float

    def apply(self, x: Any) -> Any:  # type: ignore[override]
        return x * self.value


@dataclass(frozen=True)
class DivS(ElementMap):
    """``x = x / value`` (Angel ``DivS``)."""

    value: float

    def apply(self, x: Any) -> Any:  # type: ignore[override]
        return x / self.value


@dataclass(frozen=True)
class Scale(ElementMap):
    """``x = alpha * x`` (Angel ``Scale``, BLAS ``scal``)."""

    alpha: float

    def apply(self, x: Any) -> Any:  # type: ignore[override]
        return x * self.alpha


# -- element-wise binary ------------------------------------------------------------------------


@dataclass(frozen=True)
class Add(ZipMap):
    """``a = a + b`` / ``out = a + b`` (Angel ``Add``)."""

    def apply(self, x: Any, y: Any) -> Any:  # type: ignore[override]
        return x + y


@dataclass(frozen=True)
class Sub(ZipMap):
    """``a = a - b`` / ``out = a - b`` (Angel ``Sub``)."""

    def apply(self, x: Any, y: Any) -> Any:  # type: ignore[override]
        return x - y


@dataclass(frozen=True)
class Mul(ZipMap):
    """``a = a * b`` / ``out = a * b`` (Angel ``Mul``)."""

    def apply(self, x: Any, y: Any) -> Any:  # type: ignore[override]
        return x * y


@dataclass(frozen=True)
class Div(ZipMap):
    """``a = a / b`` / ``out = a / b`` (Angel ``Div``)."""

    def apply(self, x: Any, y: Any) -> Any:  # type: ignore[override]
        return x / y


@dataclass(frozen=True)
class MaxV(ZipMap):
    """``a = max(a, b)`` element-wise (Angel ``MaxV``)."""

    def apply(self, x: Any, y: Any) -> Any:  # type: ignore[override]
        return np.maximum(x, y)


@dataclass(frozen=True)
class MinV(ZipMap):
    """``a = min(a, b)`` element-wise (Angel ``MinV``)."""

    def apply(self, x: Any, y: Any) -> Any:  # type: ignore[override]
        return np.minimum(x, y)


@dataclass(frozen=True)
class Axpy(UpdateFunc):
    """``y += alpha * x`` for ``ps.psf(Axpy(alpha), x, y)`` (Angel ``Axpy``, BLAS order)."""

    arity: ClassVar[tuple[int, int]] = (2, 2)
    alpha: float = 1.0

    def writes_for(self, n_arrays: int) -> tuple[int, ...]:
        return (1,)

    def partition_update(self, *parts: Partition, **params: Any) -> None:
        x, y = parts
        a = self.alpha
        if not x.sparse and not y.sparse and y.dtype.kind == "f" and x.dtype == y.dtype:
            y.assign(K.axpy(y.dtype.type(a), x.array, y.array))
            return
        zip_apply(lambda xv, yv: a * xv + yv, [x, y], y)


@dataclass(frozen=True)
class Copy(UpdateFunc):
    """``y = x`` for ``ps.psf(Copy(), x, y)`` (Angel ``Copy``, BLAS order)."""

    arity: ClassVar[tuple[int, int]] = (2, 2)

    def writes_for(self, n_arrays: int) -> tuple[int, ...]:
        return (1,)

    def partition_update(self, *parts: Partition, **params: Any) -> None:
        x, y = parts
        zip_apply(lambda xv: xv, [x], y)
