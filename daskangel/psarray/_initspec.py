"""How a block's entries start: :class:`InitSpec`, a value object shared by the
array metadata (which records it) and the blocks (which draw from it).

Example
-------
>>> import numpy as np
>>> InitSpec("const", 2.0).draw(np.arange(3), np.dtype("float32")).tolist()
[2.0, 2.0, 2.0]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from . import _kernels as K

__all__ = ["InitSpec"]


@dataclass(frozen=True, slots=True)
class InitSpec:
    """How a block's entries start: a constant, or counter-based random numbers.

    ``kind`` is ``"const"`` (``a`` is the value), ``"uniform"`` (on ``[a, b)``) or
    ``"normal"`` (mean ``a``, std ``b``).  ``lazy`` (sparse storage only) draws a
    missing key's value when it is first read or written instead of reading 0.
    """

    kind: str = "const"
    a: float = 0.0
    b: float = 1.0
    seed: int = 0
    lazy: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "a": self.a, "b": self.b, "seed": self.seed, "lazy": self.lazy}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> InitSpec:
        return cls(str(d["kind"]), float(d["a"]), float(d["b"]), int(d["seed"]), bool(d["lazy"]))

    def draw(self, index: np.ndarray, dtype: np.dtype) -> np.ndarray:
        """Values of the entries with global flat indices ``index``."""
        if self.kind == "const":
            return np.full(index.shape[0], self.a, dtype=dtype)
        out = K.hash_random(
            np.uint64(self.seed), index.astype(np.int64), self.kind == "normal", self.a, self.b
        )
        if dtype.kind in "iu":
            out = np.floor(out)
        return out.astype(dtype)
