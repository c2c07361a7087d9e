"""Block storage rules that the server relies on (no cluster needed)."""

from __future__ import annotations

import numpy as np
import pytest

from daskangel.psarray._blocks import DenseBlock
from daskangel.psarray._partition import Partition


def test_get_returns_new_arrays_unless_the_whole_block_is_lent() -> None:
    blk = DenseBlock(np.arange(6.0).reshape(2, 3))
    assert blk.get(None, None) is not blk.data
    assert not np.shares_memory(blk.get(np.array([0]), None), blk.data)
    lent = blk.get(None, None, lend=True)
    assert lent is blk.data and blk.lent


@pytest.mark.parametrize(
    "write",
    [
        lambda b: b.update(None, None, np.ones((2, 3)), True),
        lambda b: b.update(np.array([1]), np.array([2]), np.ones((1, 1)), False),
        lambda b: b.update_coo(np.array([0]), np.array([0]), np.ones(1), True),
        lambda b: b.fill(7.0),
    ],
    ids=["increment", "set", "coo", "fill"],
)
def test_a_lent_array_never_changes_after_it_was_read(write) -> None:  # type: ignore[no-untyped-def]
    blk = DenseBlock(np.arange(6.0).reshape(2, 3))
    lent = blk.get(None, None, lend=True)
    write(blk)
    np.testing.assert_array_equal(lent, np.arange(6.0).reshape(2, 3))
    assert blk.data is not lent and not blk.lent
    before = blk.data
    write(blk)  # not lent any more: written in place
    assert blk.data is before


def test_psf_writes_respect_a_lent_array() -> None:
    blk = DenseBlock(np.zeros((2, 2)))
    lent = blk.get(None, None, lend=True)
    p = Partition("w", 0, blk, writable=True)
    p.write(np.array([0]), np.array([1]), np.array([5.0]))
    p.validate()
    p.commit()
    assert lent[0, 1] == 0.0 and blk.data[0, 1] == 5.0
