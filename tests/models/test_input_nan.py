"""``_core.as_dataset(allow_nan=True)``: NaN in X is a missing value kept in the Dataset."""

from __future__ import annotations

import numpy as np
import pytest
from distributed import Client

from daskangel.models._core import as_dataset

pytestmark = pytest.mark.timeout(120)


class _Est:
    pass


def test_nan_is_kept_only_when_allowed(client: Client) -> None:
    X = np.array([[1.0, np.nan], [np.nan, 2.0], [3.0, 4.0], [0.0, 5.0]])
    y = np.array([0.0, 1.0, 0.0, 1.0])
    with pytest.raises(ValueError, match="NaN"):
        as_dataset(_Est(), X, y, client, 2, classifier=False, classes=None)
    data = as_dataset(_Est(), X, y, client, 2, classifier=False, classes=None, allow_nan=True)
    try:
        got = data.ds.compute().to_scipy().toarray()
        np.testing.assert_array_equal(np.isnan(got), np.isnan(X))
    finally:
        data.release()
