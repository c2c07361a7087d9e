"""The distributed counter / feature indexer (Angel's WRITE -> READ -> CLEAN) on the PS."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import daskangel as angel
from daskangel._compat import workers_info

N = 1_000_000


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    """1 M raw categorical rows: power-law site ids (strings) and app names."""
    rng = np.random.default_rng(0)
    site = np.char.add("s", (rng.zipf(1.3, N) % 200_000).astype(str))
    app = np.char.add("app-", rng.integers(0, 3000, N).astype(str))
    df = pd.DataFrame({"row": np.arange(N), "site": site, "app": app})
    path = tmp_path_factory.mktemp("logs") / "logs.csv"
    df.to_csv(path, index=False)
    return str(path), df


def _traffic(client):
    """Bytes each worker sent to / fetched from *other workers* (Dask's transfer logs)."""
    workers = set(workers_info(client))

    def logs(dask_worker):
        out = [(e["who"], e["total"]) for e in dask_worker.transfer_outgoing_log]
        inc = [(e["who"], e["total"]) for e in dask_worker.transfer_incoming_log]
        return out, inc

    res = client.run(logs)
    return {
        w: (
            sum(b for who, b in out if who in workers),
            sum(b for who, b in inc if who in workers),
        )
        for w, (out, inc) in res.items()
    }


def _ps_bytes(client, names):
    def stats(dask_worker):
        plugin = dask_worker.plugins.get("daskangel-ps")
        return {op: st[2] for s in plugin.servers.values() for op, st in s.op_stats.items()}

    out: dict[str, int] = {}
    for d in client.run(stats).values():
        for op, b in d.items():
            out[op] = out.get(op, 0) + int(b)
    return out


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_indexing_1m_rows_matches_np_unique_without_moving_rows(client, logs):
    path, df = logs
    before = _traffic(client)
    ds = angel.data.read_csv(path, label="row", numeric=[], categorical=["site", "app"])
    ds = ds.persist(n_partitions=2)
    assert len(set(ds.workers)) == 2 and ds.n_rows == N and not ds.indexed
    with angel.PSContext(client) as ps:
        ps_before = _ps_bytes(client, None)
        idx = angel.data.FeatureIndexer(ps, "cats")
        idx.count(ds)
        n = idx.aggregate()
        indexed = idx.transform(ds)
        ps_after = _ps_bytes(client, None)
        after = _traffic(client)
        # the rows never crossed between workers: no worker-to-worker transfer at all
        for w in before:
            assert after[w] == before[w], (w, before[w], after[w])
        for f, w in zip(indexed.partitions, indexed.workers, strict=True):
            assert client.who_has([f])[f.key] == (w,), (f.key, w, client.who_has([f]))
        # the PS saw counts and indices of distinct keys, not the 2 M raw tokens
        moved = sum(ps_after.values()) - sum(ps_before.values())
        u_site, inv_site = np.unique(df.site.to_numpy(), return_inverse=True)
        u_app, inv_app = np.unique(df.app.to_numpy(), return_inverse=True)
        n_keys = len(u_site) + len(u_app)
        assert moved < 2 * 3 * 16 * n_keys < N * 2 * 8, (moved, n_keys, ps_before, ps_after)
        print(f"\ncounter: {n_keys} keys, PS bytes {moved:,} (rows: {N * 2 * 8:,} B of keys)")

        assert n == n_keys and indexed.n_features == n_keys and indexed.indexed
        counts, where = idx.get_with_index(["s1", "app-7", "never-seen"], field=None)
        assert where[2] == -1 and counts[2] == 0
        b = indexed.compute()
        order = np.argsort(b.labels)
        cols = b.indices.reshape(N, 2)[order]
        assert set(np.unique(cols).tolist()) == set(range(n_keys))
        for inv, c, u in ((inv_site, cols[:, 0], u_site), (inv_app, cols[:, 1], u_app)):
            # a bijection between np.unique's values and the dense indices
            pairs = np.unique(inv.astype(np.int64) * n_keys + c)
            assert pairs.shape[0] == len(u) == len(np.unique(c))
        site_counts, site_idx = idx.get_with_index(u_site[:5], field="site")
        np.testing.assert_array_equal(site_counts, np.bincount(inv_site)[:5])
        np.testing.assert_array_equal(np.sort(site_idx), np.sort(np.unique(cols[inv_site < 5, 0])))
        idx.clean()
        assert idx.state == "CLEAN" and "cats.count" not in ps.arrays()


def test_state_machine_min_count_and_increment_from_tasks(client, tmp_path):
    t = tmp_path / "docs.txt"
    t.write_text("a b c\na b\na\nd\n")
    ds = angel.data.read_text(str(t)).persist()
    with angel.PSContext(client) as ps:
        idx = angel.data.FeatureIndexer(ps)
        with pytest.raises(RuntimeError, match="state WRITE"):
            idx.transform(ds)
        idx.count(ds)
        assert idx.aggregate(min_count=2) == 2  # a (3 docs) and b (2 docs)
        with pytest.raises(RuntimeError, match="state READ"):
            idx.increment(["x"])
        out = idx.transform(ds)
        b = out.compute()
        assert out.n_features == 2 and b.n_rows == 4 and b.nnz == 5  # c and d dropped
        idx.clean()

        # increments from inside tasks (WRITE through the handle's name)
        idx2 = angel.data.FeatureIndexer(ps, "fromtasks")
        name = idx2.counts.name

        def push(part, name):
            from daskangel.psarray import PSArray

            keys = np.array([5, 7, 7], np.int64)
            PSArray(name).increment(np.ones(3, np.int64), cols=keys)
            return True

        assert all(client.gather(ds.map_partitions(push, name)))
        idx2.aggregate()
        c, i = idx2.get_with_index([5, 7, 9])
        k = ds.n_partitions
        assert c.tolist() == [k, 2 * k, 0] and sorted(i[:2].tolist()) == [0, 1] and i[2] == -1
        idx2.clean()


def test_cross_features_index_every_pair(client, tmp_path):
    rng = np.random.default_rng(1)
    df = pd.DataFrame(
        {
            "y": rng.integers(0, 2, 5000),
            "a": rng.integers(0, 30, 5000),
            "b": np.char.add("b", rng.integers(0, 20, 5000).astype(str)),
        }
    )
    path = tmp_path / "x.csv"
    df.to_csv(path, index=False)
    ds = angel.data.read_csv(
        str(path), label="y", numeric=[], categorical=["a", "b"], cross=[("a", "b")]
    ).persist()
    with angel.PSContext(client) as ps:
        idx = angel.data.FeatureIndexer(ps)
        idx.count(ds)
        pairs = len(df.groupby(["a", "b"]).size())
        assert idx.aggregate() == df.a.nunique() + df.b.nunique() + pairs
        b = idx.transform(ds).compute()
        assert b.nnz == 3 * 5000 and b.indices.max() < idx.n_indexed
        idx.clean()
