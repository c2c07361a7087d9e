"""Value objects describing an array: its servers, blocks and metadata.

:class:`ArrayMeta` is what a handle needs to route a request.  It travels to and
from the scheduler plugin as a plain dict (:meth:`ArrayMeta.to_dict`), so the
control plane never imports this module.

Example
-------
>>> from daskangel.psarray._layout import BlockPartitioner
>>> lay = BlockPartitioner((1, 5)).layout((1, 10), 4, 2, False)
>>> m = ArrayMeta.new("w", (10,), "float32", False, lay, InitSpec())
>>> [b["shape"] for b in m.block_specs()]
[[1, 5], [1, 5]]
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from .._wire import TRANSPORTS
from ..errors import InvalidArgumentError
from ._initspec import InitSpec
from ._layout import Layout

__all__ = ["DTYPES", "ArrayMeta", "BlockInfo", "ServerId"]

DTYPES = ("float32", "float64", "int32", "int64")


@dataclass(frozen=True, slots=True, order=True)
class ServerId:
    """A PS server: a Dask worker address and the server's index on it."""

    address: str
    index: int

    def __str__(self) -> str:
        return f"{self.address}#{self.index}"


@dataclass(frozen=True, slots=True)
class BlockInfo:
    """One block of an array, as listed by :attr:`PSArray.blocks`."""

    id: int
    rows: tuple[int, int]
    cols: tuple[int, int] | str
    shape: tuple[int, int]
    server: ServerId


@dataclass(frozen=True, slots=True)
class ArrayMeta:
    """Everything a handle needs to route requests for one array."""

    name: str
    shape: tuple[int, int]
    ndim: int
    dtype: np.dtype
    sparse: bool
    layout: Layout
    init: InitSpec
    servers: tuple[ServerId, ...] = ()
    generation: int = 0
    # the creation this metadata describes (a new array of the same name has another)
    uid: str = ""
    ctx: str = ""
    transport: str = "handlers"
    lost: frozenset[int] = frozenset()
    recovering: bool = False
    recovery_error: str | None = None
    # why lost blocks are not being rebuilt, or what their rebuilding waits for
    recovery_note: str | None = None

    @classmethod
    def new(
        cls,
        name: str,
        shape: tuple[int, ...],
        dtype: Any,
        sparse: bool,
        layout: Layout,
        init: InitSpec,
        transport: str = "handlers",
    ) -> ArrayMeta:
        two_d = (1, int(shape[0])) if len(shape) == 1 else (int(shape[0]), int(shape[1]))
        if transport not in TRANSPORTS:
            raise InvalidArgumentError(
                f"transport: expected one of {TRANSPORTS}, got {transport!r}"
            )
        return cls(
            name, two_d, len(shape), np.dtype(dtype), sparse, layout, init, transport=transport
        )

    @property
    def itemsize(self) -> int:
        return int(self.dtype.itemsize)

    def block_specs(self) -> list[dict[str, Any]]:
        """Plain-value creation specs of every block, with a byte estimate each."""
        lay = self.layout
        out = []
        for b in range(lay.n_blocks):
            shape = lay.block_shape(b)
            r0, _ = lay.block_rows(b)
            c0, _ = lay.block_cols(b)
            n = shape[0] * shape[1]
            # sparse blocks grow with use: balance them by count (equal weights)
            nbytes = 1 << 20 if self.sparse else n * self.itemsize
            out.append(
                {
                    "block": b,
                    "kind": "sparse" if self.sparse else "dense",
                    "shape": [shape[0], shape[1]],
                    "dtype": self.dtype.name,
                    "init": self.init.to_dict(),
                    "row0": r0,
                    "col0": c0,
                    "n_cols": self.shape[1],
                    "bytes": max(nbytes, 1),
                }
            )
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "shape": list(self.shape),
            "ndim": self.ndim,
            "dtype": self.dtype.name,
            "sparse": self.sparse,
            "layout": self.layout.to_dict(),
            "init": self.init.to_dict(),
            "transport": self.transport,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ArrayMeta:
        return cls(
            name=d["name"],
            shape=(int(d["shape"][0]), int(d["shape"][1])),
            ndim=int(d["ndim"]),
            dtype=np.dtype(d["dtype"]),
            sparse=bool(d["sparse"]),
            layout=Layout.from_dict(d["layout"]),
            init=InitSpec.from_dict(d["init"]),
            servers=tuple(ServerId(str(s[0]), int(s[1])) for s in d.get("servers", ())),
            generation=int(d.get("generation", 0)),
            uid=str(d.get("uid", "")),
            ctx=str(d.get("ctx", "")),
            transport=str(d.get("transport", "handlers")),
            lost=frozenset(int(b) for b in d.get("lost", ())),
            recovering=bool(d.get("recovering", False)),
            recovery_error=d.get("recovery_error"),
            recovery_note=d.get("recovery_note"),
        )

    def with_servers(self, servers: tuple[ServerId, ...], generation: int) -> ArrayMeta:
        return replace(self, servers=servers, generation=generation)

    def blocks(self) -> list[BlockInfo]:
        lay = self.layout
        out = []
        for b in range(lay.n_blocks):
            cols: tuple[int, int] | str = (
                lay.block_cols(b) if lay.col_mode == "range" else f"hash {b % lay.n_col_blocks}"
            )
            out.append(BlockInfo(b, lay.block_rows(b), cols, lay.block_shape(b), self.servers[b]))
        return out
