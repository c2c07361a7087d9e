"""RowBoundsPartitioner: full-width row blocks cut where the caller says."""

from __future__ import annotations

import numpy as np
import pytest

import daskangel as angel
from daskangel.errors import InvalidArgumentError, ShapeMismatchError

pytestmark = pytest.mark.timeout(120)


def test_layout_keeps_the_given_bounds() -> None:
    lay = angel.RowBoundsPartitioner((0, 3, 4, 10)).layout((10, 6), 8, 2, False)
    assert lay.row_bounds == (0, 3, 4, 10)
    assert lay.col_bounds == (0, 6)
    assert lay.n_blocks == 3
    assert [lay.block_rows(b) for b in range(3)] == [(0, 3), (3, 4), (4, 10)]


@pytest.mark.parametrize(
    "bounds", [(0,), (1, 10), (0, 5), (0, 5, 5, 10), (0, 6, 4, 10), (0, 10, 11)]
)
def test_bad_bounds_name_the_argument(bounds: tuple[int, ...]) -> None:
    with pytest.raises(InvalidArgumentError, match=r"^row_bounds: expected increasing bounds"):
        angel.RowBoundsPartitioner(bounds).layout((10, 2), 8, 2, False)


def test_empty_shape_is_refused() -> None:
    with pytest.raises(ShapeMismatchError, match=r"^shape:"):
        angel.RowBoundsPartitioner((0,)).layout((0, 2), 8, 2, False)


def test_array_on_row_bounds_round_trips(ps: angel.PSContext) -> None:
    a = ps.zeros("rb", (10, 4), "float64", partitioner=angel.RowBoundsPartitioner((0, 3, 10)))
    try:
        assert a.meta.layout.row_bounds == (0, 3, 10)
        x = np.arange(40, dtype=np.float64).reshape(10, 4)
        a.increment(x)
        a.increment(np.ones((2, 2)), rows=[2, 3], cols=slice(1, 3))
        want = x.copy()
        want[2:4, 1:3] += 1
        np.testing.assert_array_equal(a.get(), want)
        assert len(set(a.meta.servers)) == 2  # the two blocks on both servers
    finally:
        ps.drop("rb")
