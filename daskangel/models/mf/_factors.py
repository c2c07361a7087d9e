"""The PS side of :class:`~daskangel.models.mf.MatrixFactorization`: its factor arrays.

:class:`FactorArrays` creates the user and item factor arrays (each row ``K``
factors and a bias) and, with an adaptive server optimiser (``optimizer=`` one of
``_arrays.RULES``), the optimiser's state beside the item rows; grows them when a
``partial_fit`` brings new users or items; maps raw ids to rows; and reads them
back (``_pull`` for pickling, ``user_factors_`` / ``item_factors_`` and the biases,
a dask array past ``daskangel.models.mf.local-factors-bytes``).

Example
-------
>>> mf = MatrixFactorization(n_factors=8).fit(ratings)     # doctest: +SKIP
>>> mf.item_factors_.shape                                  # doctest: +SKIP
(1682, 8)
"""

from __future__ import annotations

import uuid
from typing import Any

import numpy as np

from ... import config
from ...errors import InvalidStateError
from .._core import PSEstimator
from ._arrays import RULES, bound_optimizer, grow, grow_state, new_factors, read_rows, rule_of
from ._ids import IdMap
from ._ingest import Ingested

__all__ = ["FactorArrays"]


class FactorArrays(PSEstimator):
    """The factor arrays of :class:`~daskangel.models.mf.MatrixFactorization` (its
    base: the parameters and ``learning_rate_`` are the estimator's)."""

    # local copies of the factor matrices (pulled, or unpickled); the id maps of the rows
    _P: np.ndarray | None
    _Q: np.ndarray | None
    _maps: tuple[IdMap, IdMap] | None

    def _rule(self) -> Any:
        if self.solver != "sgd" or self.optimizer not in RULES:
            return None
        staleness = max(0, int(_staleness(self.sync)))
        return rule_of(self.optimizer, self.learning_rate_, max(8, 4 * (staleness + 2)))

    def _id_maps(self) -> tuple[IdMap | None, IdMap | None]:
        if not hasattr(self, "n_users_"):
            return None, None
        maps = getattr(self, "_maps", None)
        if maps is None or len(maps[0]) != self.n_users_ or len(maps[1]) != self.n_items_:
            maps = (IdMap(self.user_ids_, "user"), IdMap(self.item_ids_, "item"))
            self._maps = maps
        return maps

    def _array(self, key: str) -> Any:
        if not self._on_ps():
            raise InvalidStateError(
                f"{type(self).__name__}: its arrays are not on a PS (unpickled or closed)"
            )
        return self._ps.get_array(self._arrays[key])

    def _make_arrays(self, ing: Ingested) -> None:
        ps = self._ps
        K = int(self.n_factors)
        seed = int(self.random_state or 0)
        name = f"mf-{uuid.uuid4().hex[:8]}"
        std = float(self.init_std)
        users = new_factors(ps, f"{name}.users", len(ing.umap), K, std, seed)
        items = new_factors(ps, f"{name}.items", len(ing.imap), K, std, seed + 1)
        rule = self._rule()
        state: dict[str, str] = {}
        ustate = None
        if rule is not None:
            bound = rule.attach(ps, items, name=f"{items.name}.opt")
            state = {s: a.name for s, a in bound.state.items()}
            ustate = ps.full(f"{name}.users-h", (len(ing.umap), K + 1), 1e-2).name
        self._arrays = {
            "users": users.name,
            "items": items.name,
            "user_state": ustate,
            "item_state": state,
            "rule": type(rule).__name__ if rule is not None else None,
        }

    def _grow_arrays(self, n_users: int, n_items: int) -> None:
        ps = self._ps
        K = int(self.n_factors)
        seed = int(self.random_state or 0)
        std = float(self.init_std)
        a = self._arrays
        users, items = ps.get_array(a["users"]), ps.get_array(a["items"])
        if n_users > users.meta.shape[0]:
            a["users"] = grow(ps, users, n_users, K, std, seed, None).name
            if a["user_state"]:
                us = ps.get_array(a["user_state"])
                a["user_state"] = grow(ps, us, n_users, K, std, seed, 1e-2).name
        if n_items > items.meta.shape[0]:
            old_n = items.meta.shape[0]
            new = grow(ps, items, n_items, K, std, seed + 1, None)
            a["items"] = new.name
            rule = self._rule()
            if a["item_state"] and rule is not None:
                a["item_state"] = grow_state(ps, rule, items.name, new, a["item_state"], old_n)

    def _bound(self) -> Any:
        rule = self._rule()
        if rule is None:
            return None
        return bound_optimizer(self._ps, rule, self._array("items"), self._arrays["item_state"])

    def _pull(self) -> Any:
        if getattr(self, "_P", None) is not None:
            return self._P, self._Q
        if not self._on_ps():
            return getattr(self, "_P", None), getattr(self, "_Q", None)
        self._P = read_rows(self._array("users"))
        self._Q = read_rows(self._array("items"))
        return self._P, self._Q

    def _reset(self) -> None:
        self._P = None
        self._Q = None

    def _upload_pulled(self) -> None:
        """After unpickling (local copies, no PS): put the copies back on the PS."""
        P, Q = getattr(self, "_P", None), getattr(self, "_Q", None)
        if P is None or Q is None:
            return
        self._array("users").set(P, rows=slice(0, P.shape[0]), casting="same_kind")
        self._array("items").set(Q, rows=slice(0, Q.shape[0]), casting="same_kind")

    def _factor_matrix(self, key: str, cols: slice | int) -> Any:
        self._check_fitted()
        local = getattr(self, "_P" if key == "users" else "_Q", None)
        if local is not None:
            return np.asarray(local[:, cols])
        arr = self._array(key)
        m = arr.meta
        if m.shape[0] * m.shape[1] * m.itemsize > config.get_bytes(
            "daskangel.models.mf.local-factors-bytes"
        ):
            return arr.to_dask_array()[:, cols]
        return read_rows(arr)[:, cols]

    @property
    def user_factors_(self) -> Any:
        """``(n_users, K)`` user factors (a dask array past ``local-factors-bytes``)."""
        return self._factor_matrix("users", slice(0, int(self.n_factors)))

    @property
    def item_factors_(self) -> Any:
        """``(n_items, K)`` item factors (a dask array past ``local-factors-bytes``)."""
        return self._factor_matrix("items", slice(0, int(self.n_factors)))

    @property
    def user_biases_(self) -> Any:
        return self._factor_matrix("users", int(self.n_factors))

    @property
    def item_biases_(self) -> Any:
        return self._factor_matrix("items", int(self.n_factors))


def _staleness(sync: Any) -> int:
    from ...scheduler._clock_rule import as_sync

    s = as_sync(sync).staleness
    return 0 if s is None else int(s)
