"""PS functions of OWL-QN (Andrew & Gao 2007): element-wise, next to the vectors.

OWL-QN minimises ``f(w) + l1 |w|_1`` with L-BFGS steps kept inside one orthant.
Its three element-wise operations run on the servers over co-partitioned
vectors, like ``ops.Axpy`` / ``ops.Dot`` do for plain L-BFGS:

* :class:`PseudoGradient` — ``ps.psf(PseudoGradient(l1), w, g, pg)`` writes the
  pseudo-gradient of the L1-regularised objective into ``pg``;
* :class:`ProjectDirection` — ``ps.psf(ProjectDirection(), d, pg)`` zeroes the
  entries of the direction ``d`` that do not descend (sign differs from ``-pg``);
* :class:`OrthantProject` — ``ps.psf(OrthantProject(), w, x, pg)`` zeroes the
  entries of the trial point ``w`` that left the orthant of ``x`` (chosen by
  ``-pg`` where ``x`` is zero).

Example
-------
>>> import numpy as np
>>> PseudoGradient(l1=1.0).apply(np.array([0.0, 0.0, 2.0]), np.array([0.5, -3.0, 1.0]))
array([ 0., -2.,  2.])
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ...ops import ZipMap

__all__ = ["OrthantProject", "ProjectDirection", "PseudoGradient"]


@dataclass(frozen=True)
class PseudoGradient(ZipMap):
    """``pg`` of ``g + l1 sign(w)`` (the one-sided derivative towards zero at ``w = 0``)."""

    l1: float = 0.0

    def apply(self, w: Any, g: Any) -> Any:  # type: ignore[override]
        right = g + self.l1
        left = g - self.l1
        at0 = np.where(right < 0, right, np.where(left > 0, left, 0.0))
        return np.where(w > 0, right, np.where(w < 0, left, at0))


@dataclass(frozen=True)
class ProjectDirection(ZipMap):
    """``d = d`` where ``d`` and ``-pg`` agree in sign, else 0 (writes ``d``)."""

    def apply(self, d: Any, pg: Any) -> Any:  # type: ignore[override]
        return np.where(d * pg < 0, d, 0.0)


@dataclass(frozen=True)
class OrthantProject(ZipMap):
    """``w = w`` where it stays in the orthant of ``x`` (or of ``-pg`` where ``x == 0``)."""

    n_inputs: ClassVar[int] = 3

    def apply(self, w: Any, x: Any, pg: Any) -> Any:  # type: ignore[override]
        xi = np.where(x != 0, np.sign(x), -np.sign(pg))
        return np.where(np.sign(w) == xi, w, 0.0)
