"""Model and hybrid parallel SGD (DSGD strata inside groups of tasks) on a real LocalCluster."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from distributed import Client

import daskangel as angel
from daskangel.models import MatrixFactorization
from daskangel.models.mf._dsgd import groups_of, rotation

from .conftest import FAST, bias_only_rmse

pytestmark = pytest.mark.timeout(240)


def test_rotation_gives_every_member_every_block_once_and_no_two_alike() -> None:
    for size in (1, 2, 3, 5):
        table = np.array([[rotation(k, s, size) for s in range(size)] for k in range(size)])
        for k in range(size):
            assert sorted(table[k]) == list(range(size))  # each block once per epoch
        for s in range(size):
            assert sorted(table[:, s]) == list(range(size))  # disjoint in a sub-epoch


def test_groups_of_checks_the_split() -> None:
    assert groups_of("model", None, 4) == (1, 4)
    assert groups_of("hybrid", None, 4) == (2, 2)
    assert groups_of("hybrid", 4, 4) == (4, 1)
    with pytest.raises(angel.errors.InvalidArgumentError, match=r"groups: .* equal size"):
        groups_of("hybrid", 3, 4)


def test_hybrid_strata_learn_the_planted_factors(client: Client, data: Any) -> None:
    """Two groups of two: strata rotate inside a group, the groups are data parallel
    (``parallelism='model'`` is one group: test_model_parallel_on_dask_input)."""
    train, test = data
    mf = MatrixFactorization(
        n_factors=8, max_iter=20, learning_rate=0.05, parallelism="hybrid", groups=2,
        n_tasks=4, validation_fraction=0.1, **FAST,
    ).fit(train, eval_set=test)  # fmt: skip
    rmse = mf.rmse(test)
    assert rmse < 0.8 * bias_only_rmse(train, test)  # (10 % held out for validation)
    h = mf.history_
    assert list(h.epoch) == list(range(1, 21))
    assert h.eval_rmse.iloc[-1] == pytest.approx(rmse, rel=1e-4)
    assert h.val_rmse.iloc[-1] < h.val_rmse.iloc[0]
    res = mf.train_result_  # an epoch is one sub-epoch per block of the group
    assert len(res.results) == 4 and all(c == 20 * 2 for c in res.clocks)
    mf.close()


def test_model_parallel_on_dask_input(client: Client, data: Any) -> None:
    import dask.dataframe as dd

    train, test = data
    mf = MatrixFactorization(
        n_factors=8, max_iter=20, learning_rate=0.05, parallelism="model", **FAST
    ).fit(dd.from_pandas(train, npartitions=3, sort=False))
    assert mf.rmse(test) < 0.8 * bias_only_rmse(train, test)
    mf.close()


def test_hybrid_refuses_uneven_groups_and_server_optimisers(client: Client, data: Any) -> None:
    train, _ = data
    with pytest.raises(angel.errors.InvalidArgumentError, match="groups:"):
        MatrixFactorization(parallelism="hybrid", groups=3, n_tasks=4, **FAST).fit(train)
    with pytest.raises(angel.errors.InvalidArgumentError, match="optimizer:"):
        MatrixFactorization(parallelism="model", optimizer="adagrad", **FAST).fit(train)
