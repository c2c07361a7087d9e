"""What MatrixFactorization.fit accepts (pandas, numpy, scipy.sparse, dask DataFrames,
read_ratings Datasets, y=), the duplicate rule, and the errors bad input gets."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from distributed import Client

import daskangel as angel
from daskangel.errors import InvalidArgumentError, InvalidTypeError, MalformedInputError
from daskangel.models import MatrixFactorization

from .conftest import planted_ratings

pytestmark = pytest.mark.timeout(240)

FAST = {"progress": False, "random_state": 0, "n_factors": 4, "max_iter": 2}


@pytest.fixture(scope="module")
def ratings() -> pd.DataFrame:
    df = planted_ratings(n_users=60, n_items=30, seed=3)
    df["item"] = df["item"].str[2:].astype(np.int64)  # integer ids for the file formats
    return df


def test_dask_dataframe_stays_on_the_workers(client: Client, ratings: pd.DataFrame) -> None:
    import dask.dataframe as dd

    local = MatrixFactorization(**FAST).fit(ratings)
    ddf = dd.from_pandas(ratings, npartitions=4, sort=False)
    dist = MatrixFactorization(**FAST).fit(ddf)
    assert dist.user_ids_.tolist() == local.user_ids_.tolist()
    assert dist.item_ids_.tolist() == local.item_ids_.tolist()
    assert dist.global_mean_ == pytest.approx(local.global_mean_)
    assert dist.rating_range_ == pytest.approx(local.rating_range_)
    np.testing.assert_array_equal(dist.user_counts_, local.user_counts_)
    parts = dist._seen[0].parts.partitions
    assert sum(client.gather([client.submit(lambda p: p.n_ratings, f) for f in parts])) == len(
        ratings
    )
    assert np.isfinite(dist.predict(ratings)).all()
    assert len(dist.recommend([ratings.user.iloc[0]], n=3)) == 3


def test_read_ratings_dataset(client: Client, ratings: pd.DataFrame, tmp_path: Any) -> None:
    path = tmp_path / "r.csv"
    ratings.sort_values("user").to_csv(path, index=False)
    ds = angel.data.read_ratings(str(path))
    mf = MatrixFactorization(**FAST).fit(ds)
    assert mf.n_users_ == ratings.user.nunique() and mf.n_items_ == ratings.item.nunique()
    assert sorted(mf.user_ids_.tolist()) == sorted(ratings.user.unique().tolist())
    assert np.isfinite(mf.predict(ratings)).all()
    bad = tmp_path / "bad.csv"
    bad.write_text("user,item,rating\n1,2,3\n-4,2,1\n")
    with pytest.raises(MalformedInputError, match="negative index"):
        MatrixFactorization(**FAST).fit(angel.data.read_ratings(str(bad)))


def test_sparse_numpy_and_y(client: Client, ratings: pd.DataFrame) -> None:
    u, i = ratings.user.to_numpy(), ratings.item.to_numpy()
    m = sp.csr_matrix((ratings.rating.to_numpy(), (u, i)), shape=(u.max() + 3, i.max() + 1))
    mf = MatrixFactorization(**FAST).fit(m)
    assert (mf.n_users_, mf.n_items_) == m.shape  # rows and columns are the ids
    assert mf.user_counts_[-1] == 0
    p = mf.predict(pd.DataFrame({"user": [u.max() + 2], "item": [i[0]]}))  # empty row: unknown
    assert p[0] == pytest.approx(mf.global_mean_ + mf.item_biases_[i[0]], rel=1e-5)
    arr = MatrixFactorization(**FAST).fit(ratings.to_numpy(dtype=np.float64))
    assert arr.n_users_ == ratings.user.nunique()
    xy = MatrixFactorization(**FAST).fit(ratings[["user", "item"]], ratings.rating)
    assert xy.global_mean_ == pytest.approx(ratings.rating.mean())
    assert xy.rmse(ratings[["user", "item"]], ratings.rating) > 0


def test_duplicate_pairs_the_last_one_wins(client: Client) -> None:
    df = pd.DataFrame({"u": [1, 1, 2, 1], "i": [7, 7, 7, 8], "r": [1.0, 5.0, 3.0, 4.0]})
    mf = MatrixFactorization(user_col="u", item_col="i", rating_col="r", **FAST).fit(df)
    got = []
    for ing in mf._seen:
        for p in ing.parts:
            got += [
                (int(p.user0 + a), int(b), float(c)) for a, b, c in zip(p.u, p.i, p.r, strict=True)
            ]
    assert sorted(got) == [(0, 0, 5.0), (0, 1, 4.0), (1, 0, 3.0)]
    assert sum(mf.user_counts_) == 3


@pytest.mark.parametrize(
    ("frame", "error", "match"),
    [
        (pd.DataFrame({"user": [1], "item": [2], "rating": [np.nan]}), InvalidArgumentError,
         "column 'rating' has 1 NaN or infinite"),
        (pd.DataFrame({"user": [1, 2], "item": [2, 3], "rating": [1.0, -np.inf]}),
         InvalidArgumentError, "NaN or infinite"),
        (pd.DataFrame({"user": [1], "rating": [1.0]}), InvalidArgumentError,
         "item_col: column 'item' is not in the ratings"),
        (pd.DataFrame({"user": [], "item": [], "rating": []}), InvalidArgumentError, "empty"),
        (pd.DataFrame({"user": [None], "item": [2], "rating": [1.0]}), InvalidArgumentError,
         "user_col .* missing ids"),
        (pd.DataFrame({"user": [1], "item": [2], "rating": ["x"]}), InvalidTypeError,
         "numeric"),
    ],
)  # fmt: skip
def test_bad_ratings_are_named(
    client: Client, frame: pd.DataFrame, error: type, match: str
) -> None:
    with pytest.raises(error, match=match):
        MatrixFactorization(**FAST).fit(frame)


def test_bad_dask_ratings_are_named(client: Client) -> None:
    import dask.dataframe as dd

    df = pd.DataFrame({"user": [1, 2, 3, 4], "item": [2, 3, 4, 5], "rating": [1, 2, np.nan, 3]})
    with pytest.raises(InvalidArgumentError, match="NaN or infinite"):
        MatrixFactorization(**FAST).fit(dd.from_pandas(df, npartitions=2))
    with pytest.raises(InvalidArgumentError, match="rating_col: column 'stars'"):
        MatrixFactorization(rating_col="stars", **FAST).fit(dd.from_pandas(df, npartitions=2))


def test_bad_parameters_are_named(ratings: pd.DataFrame) -> None:
    for kw, match in [
        ({"solver": "newton"}, "solver: expected one of"),
        ({"n_factors": 0}, "n_factors: expected an int >= 1"),
        ({"learning_rate": -1.0}, "learning_rate"),
        ({"validation_fraction": 1.0}, "validation_fraction"),
        ({"feedback": "implicit"}, "feedback: implicit feedback is solved with solver='als'"),
        ({"sync": "sometimes"}, "sync"),
    ]:
        with pytest.raises(InvalidArgumentError, match=match):
            MatrixFactorization(**{**FAST, **kw}).fit(ratings)
    with pytest.raises(InvalidTypeError, match="ratings: expected"):
        MatrixFactorization(**FAST).fit({"user": [1]})
