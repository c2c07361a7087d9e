"""``daskangel.train.resource`` keeps training off the PS workers (docs/deploy.md):
a cluster of PS workers tagged ``daskangel-ps`` and trainers tagged
``daskangel-train``; with the setting, the data partitions and every training task
are on trainers, and the PS blocks on PS workers only."""

from __future__ import annotations

from collections.abc import Iterator

import dask
import numpy as np
import pytest
from distributed import Client, LocalCluster, Nanny, get_task_stream

import daskangel as angel
from daskangel import models
from daskangel._compat import training_workers
from daskangel.errors import InvalidArgumentError

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def tagged() -> Iterator[tuple[Client, set[str], set[str]]]:
    with LocalCluster(
        n_workers=0, threads_per_worker=1, processes=True, dashboard_address=":0"
    ) as cluster:
        for name, res in [
            ("ps-0", "daskangel-ps"),
            ("train-0", "daskangel-train"),
            ("train-1", "daskangel-train"),
        ]:
            cluster.worker_spec[name] = {
                "cls": Nanny,
                "options": {"nthreads": 1, "resources": {res: 1}, "memory_limit": "1GiB"},
            }
        cluster.sync(cluster._correct_state)
        with Client(cluster) as client:
            client.wait_for_workers(3)
            info = client.scheduler_info(n_workers=-1)["workers"]
            ps = {a for a, w in info.items() if "daskangel-ps" in w["resources"]}
            trainers = {a for a, w in info.items() if "daskangel-train" in w["resources"]}
            assert len(ps) == 1 and len(trainers) == 2
            yield client, ps, trainers


def test_training_stays_off_the_ps_workers(tagged: tuple[Client, set[str], set[str]]) -> None:
    client, ps_workers, trainers = tagged
    rng = np.random.default_rng(0)
    X = rng.normal(size=(2000, 10))
    y = (X @ rng.normal(size=10) > 0).astype(int)
    with (
        dask.config.set({"daskangel.train.resource": "daskangel-train"}),
        angel.PSContext(client, resource="daskangel-ps") as ps,
        get_task_stream(client) as ts,
    ):
        assert set(training_workers(client)) == trainers
        clf = models.LogisticRegression(max_iter=2, random_state=0, ps=ps).fit(X, y)
        assert clf.score(X, y) > 0.9
        servers = set(ps.status(max_age=0).query("kind == 'server'")["worker"])
        assert {s.address for s in ps.servers} == servers
    ran_on = {t["worker"] for t in ts.data}
    assert ran_on, "the task stream recorded nothing"
    assert ran_on <= trainers, f"tasks ran on PS workers: {ran_on & ps_workers}"
    assert servers == ps_workers


def test_without_the_setting_every_worker_trains(
    tagged: tuple[Client, set[str], set[str]],
) -> None:
    client, ps_workers, trainers = tagged
    assert set(training_workers(client)) == ps_workers | trainers


def test_a_resource_no_worker_carries_is_refused(
    tagged: tuple[Client, set[str], set[str]],
) -> None:
    client, _, _ = tagged
    with (
        dask.config.set({"daskangel.train.resource": "gpu"}),
        pytest.raises(
            InvalidArgumentError, match=r"daskangel.train.resource: .*'gpu'.*--resources gpu=1"
        ),
    ):
        training_workers(client)
