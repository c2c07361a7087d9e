"""Predicting, scoring and recommending with a fitted
:class:`~daskangel.models.mf.MatrixFactorization`.

:class:`FactorPredictions` reads ``(user, item)`` pairs (the estimator's rating
columns, an array or a dask DataFrame), maps them to factor rows (unknown ids and
ids never rated get the global mean plus the known bias), pulls only the distinct
rows the pairs need (or uses local copies) and scores them with the numba kernel;
``recommend`` / ``similar_items`` run on the workers (``_recommend.py``).

Example
-------
>>> mf.predict(pairs); mf.rmse(test); mf.recommend([1, 2], n=10)   # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any, Self

import numpy as np

from ...errors import InvalidArgumentError
from .._core import is_dask
from ._arrays import read_rows
from ._factors import FactorArrays
from ._kernels import predict as predict_kernel
from ._ratings import Columns, raw_pairs

__all__ = ["FactorPredictions"]


class FactorPredictions(FactorArrays):
    """Predictions of :class:`~daskangel.models.mf.MatrixFactorization` (its base)."""

    def _columns(self) -> Columns:
        return Columns(self.user_col, self.item_col, self.rating_col, self.feedback == "implicit")

    def _check_fitted(self) -> None:
        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(self, "n_users_")

    def _rows(self, key: str, rows: np.ndarray) -> np.ndarray:
        """Factor rows ``rows`` (distinct, sorted) from local copies or the PS."""
        local = getattr(self, "_P" if key == "users" else "_Q", None)
        if local is not None:
            return np.asarray(local[rows])
        if rows.shape[0] == 0:
            return np.zeros((0, int(self.n_factors) + 1), np.float32)
        return read_rows(self._array(key), rows)

    def _encode_pairs(self, u_raw: np.ndarray, i_raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        umap, imap = self._id_maps()
        assert umap is not None and imap is not None
        u, i = umap.encode(u_raw), imap.encode(i_raw)
        u[u >= 0] = np.where(self.user_counts_[u[u >= 0]] > 0, u[u >= 0], -1)
        i[i >= 0] = np.where(self.item_counts_[i[i >= 0]] > 0, i[i >= 0], -1)
        return u, i

    def _predict_raw(self, u_raw: np.ndarray, i_raw: np.ndarray) -> np.ndarray:
        u, i = self._encode_pairs(u_raw, i_raw)
        uu, ui = np.unique(u[u >= 0], return_inverse=True)
        iu, ii = np.unique(i[i >= 0], return_inverse=True)
        lu = np.full(u.shape[0], -1, np.int64)
        lu[u >= 0] = ui
        li = np.full(i.shape[0], -1, np.int64)
        li[i >= 0] = ii
        P, Q = self._rows("users", uu), self._rows("items", iu)
        lo, hi = self.rating_range_
        clip = bool(self.clip) and self.feedback == "explicit"
        return predict_kernel(lu, li, P, Q, float(self.global_mean_), lo, hi, clip)

    def predict(self, X: Any) -> Any:
        """Predicted ratings of ``(user, item)`` pairs, in input order.

        ``X``: a DataFrame with the user and item columns, a 2-column array, or
        a dask DataFrame (then a dask Series).  Unknown users or items get the
        global mean plus the known bias, never NaN.
        """
        self._check_fitted()
        if is_dask(X):
            if not hasattr(X, "map_partitions"):
                raise InvalidArgumentError(
                    "X: a dask array of pairs is not supported; pass a dask DataFrame"
                )
            est = self._predictor()
            return X.map_partitions(est._predict_frame, meta=(None, "f8"))
        u, i, _ = raw_pairs(X, self._columns())
        return self._predict_raw(u, i)

    def _predict_frame(self, df: Any) -> Any:
        import pandas as pd

        u, i, _ = raw_pairs(df, self._columns())
        return pd.Series(self._predict_raw(u, i), index=df.index)

    def _predictor(self) -> Self:
        """A copy to ship to dask tasks: its arrays bind by name on the workers."""
        import copy

        est = copy.copy(self)
        est._ps = None
        return est

    def rmse(self, X: Any, y: Any = None) -> float:
        """Root mean squared error of the predictions for rated pairs ``X``."""
        self._check_fitted()
        if is_dask(X):
            X = X.compute()
        u, i, r = raw_pairs(_with_y(X, y, self.rating_col), self._columns())
        if r is None:
            raise InvalidArgumentError(
                f"X: needs the rating column {self.rating_col!r} (or y=) to be scored"
            )
        if r.shape[0] == 0:
            raise InvalidArgumentError("X: empty (no ratings to score)")
        p = self._predict_raw(u, i)
        return float(np.sqrt(np.mean((p - r.astype(np.float64)) ** 2)))

    def score(self, X: Any, y: Any = None) -> float:
        """Minus the RMSE of rated pairs ``X`` (greater is better, as scikit-learn's
        model selection expects; :meth:`rmse` gives the RMSE itself)."""
        return -self.rmse(X, y)

    def recommend(self, users: Any, n: int = 10, *, exclude_seen: bool = True) -> Any:
        """The ``n`` best items for each of ``users``, computed on the workers.

        Returns a DataFrame ``user, rank, item, score`` (``n`` rows per user, in
        the order of ``users``).  ``exclude_seen`` leaves out the items the user
        rated in this model's fits.  Unknown users get the items with the best
        biases (the most popular, for implicit feedback).
        """
        from ._recommend import recommend

        self._check_fitted()
        return recommend(self, users, n, exclude_seen)

    def similar_items(self, items: Any, n: int = 10) -> Any:
        """The ``n`` items most similar (cosine of factors) to each of ``items``.

        Returns a DataFrame ``item, rank, similar, score``; unknown items raise.
        """
        from ._recommend import similar_items

        self._check_fitted()
        return similar_items(self, items, n)


def _with_y(X: Any, y: Any, col: str) -> Any:
    if y is None:
        return X
    if is_dask(X) or is_dask(y):
        raise InvalidArgumentError("y: with dask input put the ratings in a column of X")
    if hasattr(X, "columns"):
        out = X.copy()
        out[col] = np.asarray(y)
        return out
    a = np.asarray(X)
    yy = np.asarray(y).reshape(-1, 1)
    if a.ndim != 2 or a.shape[0] != yy.shape[0]:
        raise InvalidArgumentError(
            f"y: expected one rating per pair ({a.shape[0]}), got {yy.shape[0]}"
        )
    return np.concatenate(
        [a[:, :2].astype(object) if a.dtype.kind == "O" else a[:, :2], yy], axis=1
    )
