"""Every bad-input message of the KMeans family names the argument, what was expected
and what it got (no cluster needed: the checks run before anything is distributed)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from daskangel.errors import InvalidArgumentError
from daskangel.models import KMeans, MiniBatchKMeans
from daskangel.models.kmeans._init import DataStats, check_init_array, initial_centres
from daskangel.models.kmeans._params import INITS, check_params

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize(
    ("est", "match"),
    [
        (KMeans(n_clusters=0), r"n_clusters: expected an int >= 1, got 0"),
        (KMeans(max_iter=1.5), r"max_iter: expected an int >= 1, got 1\.5"),
        (KMeans(n_init=True), r"n_init: expected an int >= 1, got True"),
        (KMeans(n_tasks=0), r"n_tasks: expected an int >= 1, got 0"),
        (KMeans(snapshot_every=0), r"snapshot_every: expected an int >= 1, got 0"),
        (KMeans(tol=-1.0), r"tol: expected a number >= 0, got -1\.0"),
        (KMeans(init="kmeans++"), r"init: expected one of .*'k-means\|\|'.*, got 'kmeans\+\+'"),
        (KMeans(init=3), r"init: expected one of .*'k-means\|\|'.*, got int"),
        (
            KMeans(algorithm="elkan"),
            r"algorithm: expected one of \['lloyd', 'minibatch'\], got 'elkan'",
        ),
        (MiniBatchKMeans(batch_size=0), r"batch_size: expected an int >= 1, got 0"),
    ],
)
def test_bad_parameters_name_argument_expected_and_got(est: Any, match: str) -> None:
    with pytest.raises(InvalidArgumentError, match=match):
        check_params(est)


def test_sync_other_than_bsp_is_refused_for_lloyd() -> None:
    est = KMeans()
    est.sync = "ssp:1"  # what a Lloyd fit would read if one were set
    with pytest.raises(InvalidArgumentError, match=r"sync: expected 'bsp' .*, got 'ssp:1'"):
        check_params(est)


def test_unknown_init_names_every_valid_one() -> None:
    stats = DataStats((5,), 1.0)
    with pytest.raises(InvalidArgumentError) as err:
        initial_centres("nope", None, stats, 2, 3, 0)
    msg = str(err.value)
    assert msg.startswith("init: expected one of") and msg.endswith("got 'nope'")
    assert all(repr(name) in msg for name in INITS)


def test_init_array_shape_and_values() -> None:
    with pytest.raises(InvalidArgumentError, match=r"\(2, 3\), got shape \(3, 2\)"):
        check_init_array(np.zeros((3, 2)), 2, 3)
    bad = np.zeros((2, 3))
    bad[0, 1], bad[1, 2] = np.nan, np.inf
    with pytest.raises(InvalidArgumentError, match="expected finite initial centres, got 2 NaN"):
        check_init_array(bad, 2, 3)
    np.testing.assert_array_equal(check_init_array(np.ones((2, 3), np.float32), 2, 3), 1.0)
