"""make_ctr: deterministic, power-law shaped, labels drawn from the planted model."""

from __future__ import annotations

import numpy as np
import pytest
from distributed import Client

import daskangel as angel
from daskangel.data import CTRSpec, ctr_chunk, ctr_coef


def test_chunks_are_a_pure_function_of_the_seed() -> None:
    spec = CTRSpec(20_000, 50_000, nnz_per_row=10, seed=3, chunk_rows=10_000)
    a, ya = ctr_chunk(spec, 1)
    b, yb = ctr_chunk(spec, 1)
    assert (a != b).nnz == 0 and np.array_equal(ya, yb)
    c, _ = ctr_chunk(CTRSpec(20_000, 50_000, nnz_per_row=10, seed=4, chunk_rows=10_000), 1)
    assert (a != c).nnz > 0
    assert a.shape == (10_000, 50_000) and set(np.unique(a.data)) == {1.0}
    assert set(np.unique(ya)) <= {0.0, 1.0}
    assert 5 < a.nnz / a.shape[0] <= 11  # Poisson(10) minus duplicate ids


def test_feature_frequencies_follow_a_power_law_spread_over_the_id_space() -> None:
    spec = CTRSpec(50_000, 2**16, nnz_per_row=20, power=1.1, seed=0, chunk_rows=50_000)
    X, _ = ctr_chunk(spec, 0)
    counts = np.sort(np.bincount(X.indices, minlength=spec.n_features))[::-1]
    # log-log slope of frequency against rank is about -power over the head
    ranks = np.arange(1, 201)
    slope = np.polyfit(np.log(ranks), np.log(counts[:200]), 1)[0]
    assert -1.5 < slope < -0.7
    top = np.argsort(np.bincount(X.indices, minlength=spec.n_features))[-20:]
    assert top.max() > spec.n_features // 4  # hot ids are scattered, not the first block


def test_labels_follow_the_planted_model() -> None:
    spec = CTRSpec(40_000, 4_096, nnz_per_row=15, seed=1, chunk_rows=40_000)
    X, y = ctr_chunk(spec, 0)
    coef, b = ctr_coef(spec.n_features, seed=1)
    assert 0.1 < np.mean(coef != 0) < 0.3
    p = 1 / (1 + np.exp(-(X @ coef + b)))
    assert abs(p.mean() - y.mean()) < 0.01  # calibrated: labels drawn from p
    from sklearn.metrics import roc_auc_score

    assert roc_auc_score(y, p) > 0.75


def test_make_ctr_builds_on_the_workers(client: Client) -> None:
    X, y = angel.data.make_ctr(25_000, 8_192, nnz_per_row=6, seed=2, chunk_rows=10_000)
    assert X.shape == (25_000, 8_192) and X.npartitions == 3 and y.shape == (25_000,)
    ds = angel.data.from_array(X, y).persist(client, n_partitions=2)
    try:
        assert ds.n_rows == 25_000 and ds.n_features <= 8_192
        local = CTRSpec(25_000, 8_192, nnz_per_row=6, seed=2, chunk_rows=10_000)
        nnz = sum(ctr_chunk(local, i)[0].nnz for i in range(3))
        assert ds.nnz == nnz
    finally:
        ds.release()


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"n_rows": 0}, "n_rows: expected an int >= 1, got 0"),
        ({"n_features": 2.5}, "n_features: expected an int >= 1, got 2.5"),
        ({"power": 0}, "power: expected a number > 0, got 0"),
        ({"informative": 1.5}, "informative: expected a fraction in [0, 1], got 1.5"),
        ({"chunk_rows": -1}, "chunk_rows: expected an int >= 1, got -1"),
    ],
)
def test_bad_arguments_name_the_argument(kwargs: dict, needle: str) -> None:
    args = {"n_rows": 10, "n_features": 10, **kwargs}
    with pytest.raises(ValueError, match=None) as e:
        angel.data.make_ctr(**args)
    assert needle in str(e.value)
