"""Security stated in docs/security.md, tested: daskangel runs end to end on a TLS
cluster (fit with snapshots, save, load), and the cluster — PS included — refuses a
plain-TCP peer and a certificate from another CA.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from distributed import Client, LocalCluster
from distributed.comm import connect
from distributed.security import Security

import daskangel as angel
from daskangel import models
from daskangel._compat import workers_info

pytest.importorskip("cryptography", reason="Security.temporary() needs cryptography")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def tls() -> Iterator[tuple[Client, Security]]:
    sec = Security.temporary()
    with (
        LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            protocol="tls",
            security=sec,
            dashboard_address=":0",
        ) as cluster,
        Client(cluster, security=sec) as client,
    ):
        yield client, sec


def _data(n: int = 600, d: int = 8) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(n, d))
    y = (X @ rng.normal(size=d) > 0).astype(int)
    return X, y


def test_fit_with_snapshots_save_and_load_over_tls(
    tls: tuple[Client, Security], tmp_path: Path
) -> None:
    client, _ = tls
    assert client.scheduler.address.startswith("tls://")
    assert all(w.startswith("tls://") for w in workers_info(client))
    X, y = _data()
    snap = tmp_path / "snap"
    with angel.PSContext(client, snapshot=str(snap), snapshot_every=1) as ps:
        clf = models.LogisticRegression(max_iter=3, random_state=0, ps=ps).fit(X, y)
        assert clf.score(X, y) > 0.9
        info = ps.snapshot()
        assert info, "no snapshot was written over TLS"
        stored = [p for p in snap.rglob("zarr.json")]
        assert stored, "the snapshot directory holds no zarr arrays"
        clf.save(str(tmp_path / "model"))
        expected = clf.predict_proba(X)
    loaded = models.load(str(tmp_path / "model"), client=client)
    np.testing.assert_allclose(loaded.predict_proba(X), expected, rtol=1e-6)


def _refused(address: str, **connection_args: object) -> BaseException:
    async def go() -> BaseException:
        try:
            comm = await connect(address, timeout=5, **connection_args)  # type: ignore[arg-type]
        except (OSError, EOFError) as e:  # the refusal (CommClosedError, SSL, timeouts)
            return e
        try:  # connected at the TCP level: the first exchange must fail
            await comm.write({"op": "identity", "reply": True})
            await asyncio.wait_for(comm.read(), 5)
        except (OSError, EOFError) as e:
            return e
        finally:
            comm.abort()
        raise AssertionError(f"{address} answered a peer it should refuse")

    return asyncio.run(go())


def test_a_plain_tcp_peer_is_refused_by_scheduler_and_ps_workers(
    tls: tuple[Client, Security],
) -> None:
    client, _ = tls
    workers = list(workers_info(client))
    for address in [client.scheduler.address, *workers]:
        plain = address.replace("tls://", "tcp://")
        err = _refused(plain)
        assert isinstance(err, (OSError, EOFError)), repr(err)


def test_a_certificate_from_another_ca_is_refused(tls: tuple[Client, Security]) -> None:
    client, _ = tls
    stranger = Security.temporary()  # its own CA
    args = stranger.get_connection_args("client")
    for address in [client.scheduler.address, *workers_info(client)]:
        err = _refused(address, **args)
        assert isinstance(err, (OSError, EOFError)), repr(err)
    with pytest.raises(OSError):
        Client(client.scheduler.address, security=stranger, timeout=5)


def test_the_test_extra_carries_cryptography() -> None:
    text = (Path(__file__).parents[1] / "pyproject.toml").read_text()
    assert "cryptography>=" in text
