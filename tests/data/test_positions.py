"""Rows of a persisted Dataset know where they stood in the input (data._positions)."""

from __future__ import annotations

import numpy as np
import pytest

from daskangel.data._positions import positions
from daskangel.data._report import SplitReport
from daskangel.errors import InvalidStateError

pytestmark = pytest.mark.timeout(30)


def _r(order: int, start: int, share: int = 0) -> SplitReport:
    return SplitReport((f"file{order}", order, start, share), 0)


def test_runs_of_files_and_byte_ranges_are_numbered_in_input_order() -> None:
    parts = [
        ([_r(1, 0), _r(0, 50)], ((4, 1), (2, 1))),  # second file, then the first's tail
        ([_r(0, 0)], ((3, 1),)),
    ]
    got = positions(parts)  # type: ignore[arg-type]
    assert [p.tolist() for p in got] == [[5, 6, 7, 8, 3, 4], [0, 1, 2]]


def test_interleaved_shares_of_mixed_strides_and_a_header() -> None:
    # lines 0, 1 are the header; shares (0 of 4), (2 of 4), (1 of 2) of 10 data lines
    parts = [
        ([_r(0, 0, 1)], ((5, 2),)),
        ([_r(0, 0, 0), _r(0, 0, 2)], ((2, 4), (3, 4))),
    ]
    got = positions(parts, header_lines=2)  # type: ignore[arg-type]
    assert sorted(np.concatenate(got).tolist()) == list(range(10))
    assert got[0].tolist() == [1, 3, 5, 7, 9]  # lines 3, 5, ... hold rows 1, 3, ...
    assert got[1].tolist() == [2, 6, 0, 4, 8]


def test_unknown_order_is_refused_not_guessed() -> None:
    skipped = [([_r(0, 0, 0)], ((2, 2),)), ([_r(0, 0, 1)], ((3, 2),))]  # 5 rows, not 2+2
    with pytest.raises(InvalidStateError, match=r"file0.*input order is unknown"):
        positions(skipped)  # type: ignore[arg-type]
    with pytest.raises(InvalidStateError, match="partition 0 does not record"):
        positions([([_r(0, 0)], None)])
