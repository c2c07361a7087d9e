"""A first end-to-end round trip on a real 2-process LocalCluster."""

from __future__ import annotations

import numpy as np


def test_roundtrip_vector(ps):
    w = ps.zeros("w", shape=(10,), dtype="float64")
    w.increment([1.0, 2.0, 3.0], cols=[0, 7, 7])
    np.testing.assert_array_equal(w.get(), [1, 0, 0, 0, 0, 0, 0, 5, 0, 0])
    assert len({b.server for b in w.blocks}) == 2


def test_random_is_partition_independent(ps):
    a = ps.random("a", shape=(50, 9), block_shape=(7, 4), seed=3)
    b = ps.random("b", shape=(50, 9), seed=3)
    np.testing.assert_array_equal(a.get(), b.get())
    assert a.get().min() >= 0.0 and a.get().max() < 1.0
