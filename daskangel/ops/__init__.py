"""PS functions (psfs): run next to the blocks, return only what is needed.

Built-ins carry Angel's names (``ops.Sum``, ``ops.Dot``, ``ops.Axpy`` ...); helper
bases (``ElementMap``, ``ZipMap``, ``RowMap``, ``Reduce``, or plain ``GetFunc`` /
``UpdateFunc``) are for writing your own; optimisers (``ops.Adam(...)``) apply
pushed gradients on the servers.  ``docs/psf.md`` lists them all.

Example
-------
>>> import daskangel as angel                                   # doctest: +SKIP
>>> with angel.PSContext(client) as ps:                         # doctest: +SKIP
...     x = ps.random("x", shape=(10**6,), seed=0)  # doctest: +SKIP
...     y = ps.zeros_like(x)  # doctest: +SKIP
...     ps.psf(angel.ops.Axpy(alpha=2.0), x, y)                 # y += 2 x  # doctest: +SKIP
...     ps.psf(angel.ops.Dot(), x, y)                           # 2 |x|^2  # doctest: +SKIP
"""

from __future__ import annotations

from ..psarray import Partition, register_psf
from ._accumulated import AccumulatedStep, step_accumulated
from ._base import GetFunc, PSFunc, UpdateFunc
from ._dot import Dot
from ._elementwise import (
    Abs,
    Add,
    AddS,
    Axpy,
    Ceil,
    Clip,
    Copy,
    Div,
    DivS,
    Exp,
    Expm1,
    Floor,
    Log,
    Log1p,
    Log10,
    MaxV,
    MinV,
    Mul,
    MulS,
    Pow,
    Round,
    Scale,
    Signum,
    SoftThreshold,
    Sqrt,
    Sub,
    SubS,
)
from ._functions import FUNCTIONS, get_function, register_function
from ._init import (
    Diag,
    Eye,
    Fill,
    KaimingNormal,
    KaimingUniform,
    RandomNormal,
    RandomUniform,
    Reset,
    XavierNormal,
    XavierUniform,
)
from ._maps import (
    ElementMap,
    ElementMapWithIndex,
    Map,
    MapWithIndex,
    RowMap,
    Zip2Map,
    Zip2MapWithIndex,
    Zip3Map,
    Zip3MapWithIndex,
    ZipMap,
)
from ._optim import BoundOptimizer, Optimizer, OptimizerStep, PullWithVersions
from ._reduce import Amax, Amin, Asum, Max, Min, Nnz, Norm, Nrm2, Reduce, Sum
from ._rules import FTRL, SGD, AdaGrad, Adam, AdaRevision, Momentum
from ._select import Argmax, GetCols, GetRows, TopK, UpdateCols
from ._steppull import StepPull, step_pull_async

__all__ = [
    "FTRL",
    "FUNCTIONS",
    "SGD",
    "Abs",
    "AccumulatedStep",
    "AdaGrad",
    "AdaRevision",
    "Adam",
    "Add",
    "AddS",
    "Amax",
    "Amin",
    "Argmax",
    "Asum",
    "Axpy",
    "BoundOptimizer",
    "Ceil",
    "Clip",
    "Copy",
    "Diag",
    "Div",
    "DivS",
    "Dot",
    "ElementMap",
    "ElementMapWithIndex",
    "Exp",
    "Expm1",
    "Eye",
    "Fill",
    "Floor",
    "GetCols",
    "GetFunc",
    "GetRows",
    "KaimingNormal",
    "KaimingUniform",
    "Log",
    "Log10",
    "Log1p",
    "Map",
    "MapWithIndex",
    "Max",
    "MaxV",
    "Min",
    "MinV",
    "Momentum",
    "Mul",
    "MulS",
    "Nnz",
    "Norm",
    "Nrm2",
    "Optimizer",
    "OptimizerStep",
    "PSFunc",
    "Partition",
    "Pow",
    "PullWithVersions",
    "RandomNormal",
    "RandomUniform",
    "Reduce",
    "Reset",
    "Round",
    "RowMap",
    "Scale",
    "Signum",
    "SoftThreshold",
    "Sqrt",
    "Sub",
    "SubS",
    "StepPull",
    "Sum",
    "TopK",
    "UpdateCols",
    "UpdateFunc",
    "XavierNormal",
    "XavierUniform",
    "Zip2Map",
    "Zip2MapWithIndex",
    "Zip3Map",
    "Zip3MapWithIndex",
    "ZipMap",
    "get_function",
    "register_function",
    "register_psf",
    "step_accumulated",
    "step_pull_async",
]
