"""The snapshot layouts a resumed fit's arrays are created with (daskangel/_resuming.py):
paired in creation order, a temporary array of another kind skipped without using a slot."""

from __future__ import annotations

from typing import Any

import pytest

from daskangel import _resuming as r


class _PS:
    """What stored_layout needs of a context: the names of its arrays."""

    def __init__(self) -> None:
        self.made: list[str] = []

    def arrays(self) -> list[str]:
        return list(self.made)


def _info(shape: list[int], ndim: int, layout: int) -> dict[str, Any]:
    return {"shape": shape, "ndim": ndim, "dtype": "float64", "sparse": False,
            "layout": {"id": layout}}  # fmt: skip


@pytest.mark.timeout(10)
def test_new_arrays_take_the_snapshot_layouts_in_creation_order() -> None:
    manifest = {
        "arrays": {
            "a.w": _info([1, 10], 1, 1),
            "a.m": _info([3, 4], 2, 2),
            "k": _info([2, 2], 2, 3),
        },
        "job_state": {"arrays": ["k", "a.w", "a.m"]},
    }
    ps = _PS()
    assert r.stored_layout(ps, "b.w", ((10,), "float64", False)) is None  # nothing pending
    with r.resuming("ckpt"):
        pending = r._PENDING.get()
        assert pending is not None
        pending.manifest = manifest
        assert r.stored_layout(ps, "k", ((2, 2), "float64", False)) == {"id": 3}  # its name
        ps.made.append("k")
        assert r.stored_layout(ps, "tmp", ((5,), "int64", False)) is None  # no slot used
        assert r.stored_layout(ps, "b.w", ((10,), "float64", False)) == {"id": 1}
        ps.made.append("b.w")
        assert r.stored_layout(ps, "b.m", ((3, 4), "float64", False)) == {"id": 2}
        ps.made.append("b.m")
        assert r.take_pending() == "ckpt"
        assert r.stored_layout(ps, "c.w", ((10,), "float64", False)) is None  # the job took it
    assert r.take_pending() is None
