"""Snapshots, save and load: format, atomicity, verification, plain-zarr readability."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import dask
import dask.array as da
import numpy as np
import pytest
import zarr
from distributed import Client

import daskangel as angel
from daskangel import _snapshot_format as fmt
from daskangel.errors import SnapshotAbandonedError, SnapshotError
from daskangel.psarray._server import SERVER_OPS, PSServer
from tests.conftest import make_cluster


def _fill_arrays(ps: angel.PSContext) -> dict[str, Any]:
    w = ps.random("w", (1000,), seed=1, block_shape=(300,))
    W = ps.random("W", (50, 8), seed=2, dist="normal", dtype="float64")
    n = ps.full("n", (7, 9), 4, dtype="int32", block_shape=(3, 4))
    s = ps.random("s", (2**40,), seed=3, sparse=True)  # lazily drawn keys
    s.increment(np.ones(3, "float32"), cols=[1, 2**30, 2**39])
    h = ps.full("h", (3, 2**33), -1.0, sparse=True, partitioner=angel.HashPartitioner(3))
    h.set(np.arange(6, dtype="float32").reshape(3, 2), cols=[5, 2**32])
    return {"w": w, "W": W, "n": n, "s": s, "h": h}


def _state(arrs: dict[str, Any]) -> dict[str, np.ndarray]:
    return {
        "w": arrs["w"].get(),
        "W": arrs["W"].get(),
        "n": arrs["n"].get(),
        "s": arrs["s"].get(cols=[1, 7, 2**30, 2**39]),
        "h": arrs["h"].get(cols=[5, 6, 2**32]),
    }


def _same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def test_save_load_roundtrip(client: Client, tmp_path: Path) -> None:
    url = f"file://{tmp_path}/model"
    with angel.PSContext(client) as ps:
        arrs = _fill_arrays(ps)
        before = _state(arrs)
        info = ps.save(url)
        assert sorted(info["arrays"]) == ["W", "h", "n", "s", "w"]
    with angel.PSContext(client) as ps2:
        loaded = ps2.load(url)
        _same(before, _state(loaded))
        assert [b.shape for b in loaded["w"].blocks] == [(1, 300)] * 3 + [(1, 100)]
    local = angel.load_arrays(url)
    np.testing.assert_array_equal(local["w"], before["w"])
    np.testing.assert_array_equal(local["W"], before["W"])
    assert local["s"].fill_value == 0 and local["s"][2**30] == before["s"][2]
    assert local["h"].fill_value == -1.0 and local["h"][2, 2**32] == 5.0
    # plain zarr and dask, no daskangel
    np.testing.assert_array_equal(zarr.open_array(f"{tmp_path}/model/n", mode="r")[:], before["n"])
    np.testing.assert_array_equal(
        da.from_zarr(f"{tmp_path}/model", component="W").compute(), before["W"]
    )
    manifest = zarr.open_group(f"{tmp_path}/model", mode="r").attrs["daskangel"]
    assert (
        manifest["arrays"]["w"]["storage"] == "grid"
        and len(manifest["arrays"]["w"]["checksums"]) == 4
    )


def test_snapshot_versions_latest_and_keep(client: Client, tmp_path: Path) -> None:
    root = str(tmp_path / "ckpt")
    with angel.PSContext(client, snapshot=root, keep=2) as ps:
        w = ps.zeros("w", (100,), dtype="int64")
        for _i in range(4):
            w.increment(np.ones(100, "int64"))
            info = ps.snapshot()
            assert fmt.read_latest(root) == info["version"]
        assert len(fmt.list_versions(root)) == 2
        os.makedirs(f"{root}/v000099-deadbeef")  # an unfinished version (no manifest)
        assert fmt.read_latest(root) == info["version"]  # ignored
        w.increment(np.ones(100, "int64"))
        info = ps.snapshot()
        assert (
            "v000099-deadbeef" not in fmt.list_versions(root)[:-1]
            or len(fmt.list_versions(root)) <= 3
        )
        assert angel.load_arrays(root)["w"][0] == 5


def test_memory_filesystem() -> None:
    with make_cluster(processes=False) as cluster, Client(cluster) as c, angel.PSContext(c) as ps:
        w = ps.random("w", (10, 10), seed=4)
        ps.save("memory://daskangel-test/model")
        ref = w.get()
        w.fill(0)
        ps.load("memory://daskangel-test/model")
        np.testing.assert_array_equal(w.get(), ref)
        np.testing.assert_array_equal(angel.load_arrays("memory://daskangel-test/model")["w"], ref)


def test_load_mismatch_changes_nothing(client: Client, tmp_path: Path) -> None:
    url = str(tmp_path / "m")
    with angel.PSContext(client) as ps:
        w = ps.random("w", (1000,), seed=1, block_shape=(250,))
        ps.save(url)
        w.increment(np.ones(1000, "float32"))
        ref = w.get()
        ps.drop("w")
        other = ps.zeros("w", (999,))
        with pytest.raises(
            SnapshotError, match=r"array 'w' has shape \[1, 1000\] there but \[1, 999\] here"
        ):
            ps.load(url)
        ps.drop("w")
        ps.zeros("w", (1000,), dtype="float64", block_shape=(250,))
        with pytest.raises(SnapshotError, match="has dtype 'float32' there but 'float64' here"):
            ps.load(url)
        ps.drop("w")
        ps.zeros("w", (1000,), block_shape=(100,))
        with pytest.raises(SnapshotError, match="partitioned differently"):
            ps.load(url)
        ps.drop("w")
        w = ps.from_array("w", ref, block_shape=(250,))
        os.remove(f"{url}/w/c/2")  # a missing block reads as fill value: checksum fails
        with pytest.raises(SnapshotError, match=rf"block 2 of array 'w' \({url}/w/c/2\) has crc32"):
            ps.load(url)
        np.testing.assert_array_equal(w.get(), ref)  # nothing installed anywhere
        with pytest.raises(SnapshotError, match=r"has no arrays \['nope'\]"):
            ps.load(url, arrays=["nope"])
        with pytest.raises(FileNotFoundError, match="no daskangel snapshot or model"):
            ps.load(str(tmp_path / "nowhere"))
        del other


@pytest.mark.parametrize("damage", ["truncate", "garbage"])
def test_corrupted_chunk_names_array_block_and_file(
    client: Client, tmp_path: Path, damage: str
) -> None:
    # issue 14 section 4.8: a chunk that no longer decodes was a bare AssertionError
    url = str(tmp_path / "m")
    with angel.PSContext(client) as ps:
        w = ps.random("w", (1000,), seed=1, block_shape=(250,))
        s = ps.zeros("s", (2**20,), sparse=True)
        s.increment(np.ones(3, "float32"), cols=[1, 2**10, 2**19])
        ps.save(url)
        ref = w.get()
    files = {"w": (f"{url}/w/c/1", 1), "s": (f"{url}/s/b0/values/c/0", 0)}
    for _, (path, _) in files.items():
        raw = Path(path).read_bytes()
        Path(path).write_bytes(raw[: len(raw) // 2] if damage == "truncate" else b"\x00" * 7)
    for name, (path, block) in files.items():
        want = rf"block {block} of array '{name}' cannot be read: file {path} is damaged"
        with pytest.raises(SnapshotError, match=want):
            angel.load_arrays(url, arrays=[name])
    with angel.PSContext(client) as ps2:
        w2 = ps2.from_array("w", ref, block_shape=(250,))
        with pytest.raises(SnapshotError, match=r"block 1 of array 'w' cannot be read: file"):
            ps2.load(url, arrays=["w"])
        np.testing.assert_array_equal(w2.get(), ref)  # nothing installed anywhere


@pytest.mark.parametrize("stage", ["chunks", "manifest"])
def test_coordinator_failure_leaves_previous_snapshot(
    client: Client, tmp_path: Path, stage: str
) -> None:
    root = str(tmp_path / "ckpt")
    with angel.PSContext(client, snapshot=root) as ps:
        w = ps.zeros("w", (100,), dtype="int64")
        w.increment(np.ones(100, "int64"))
        good = ps.snapshot()
        w.increment(np.ones(100, "int64"))
        with (
            dask.config.set({"daskangel.snapshot.fail-at": stage}),
            pytest.raises(SnapshotError, match="injected"),
        ):
            ps.snapshot()
        assert fmt.read_latest(root) == good["version"]
        assert angel.load_arrays(root)["w"][0] == 1
        after = ps.snapshot()  # the unfinished version is cleaned up
        assert fmt.list_versions(root)[-1] == after["version"]
        assert angel.load_arrays(root)["w"][0] == 2


def _until(cond: Callable[[], bool], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.02)


@pytest.mark.timeout(120)
def test_drop_while_a_snapshot_writes_waits_for_it_or_abandons_it_cleanly(
    client: Client, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 20: an array dropped (a fit freeing its arrays) while a snapshot still
    writes it: the drop waits and the snapshot completes; past
    daskangel.snapshot.drop-wait the snapshot is abandoned and leaves no version.
    Never "holds no block", never an error logged."""
    root = str(tmp_path / "ckpt")
    hold = tmp_path / "hold"
    hold.mkdir()

    def arm(where: str | None) -> None:
        dask.config.set({"daskangel.snapshot.hold-dir": where})

    with angel.PSContext(client, snapshot=root) as ps:
        first = ps.zeros("first", (8,), dtype="int64")
        first.increment(np.ones(8, "int64"))
        for wait, complete in (("60s", True), ("0s", False)):
            a = ps.zeros("a", (400,), dtype="int64", block_shape=(100,))
            b = ps.zeros("b", (400,), dtype="int64", block_shape=(100,))
            a.increment(np.ones(400, "int64"))
            b.increment(np.full(400, 2, "int64"))
            before = ps.snapshot()["version"]
            client.run(arm, str(hold))
            with (
                dask.config.set({"daskangel.snapshot.drop-wait": wait}),
                caplog.at_level(logging.INFO, logger="daskangel"),
                ThreadPoolExecutor(2) as pool,
            ):
                snap = pool.submit(ps.snapshot)
                _until((hold / "held").exists)  # a server holds its first array's write
                drop = pool.submit(ps.drop, "b")  # "b" is written after that
                _until(lambda: "b" not in ps.arrays())  # the scheduler took the drop
                if not complete:
                    drop.result(timeout=60)  # not waiting: freed at once
                (hold / "release").touch()
                if complete:
                    info = snap.result(timeout=60)
                    drop.result(timeout=60)
                    assert list(info["arrays"]) == ["a", "b", "first"]
                    assert fmt.read_latest(root) == info["version"]
                    np.testing.assert_array_equal(angel.load_arrays(root)["b"], np.full(400, 2))
                else:
                    with pytest.raises(SnapshotAbandonedError, match=r"\['b'\] were dropped"):
                        snap.result(timeout=60)
                    assert fmt.read_latest(root) == before  # the abandoned version is gone
                    assert fmt.list_versions(root)[-1] == before
            client.run(arm, None)
            (hold / "held").unlink()
            (hold / "release").unlink()
            # (an abandoned explicit snapshot raises to its caller, which Dask's
            # handler also logs; a clock snapshot's abandonment is logged at INFO)
            bad = [
                r
                for r in caplog.records
                if r.levelno >= logging.WARNING and (complete or r.name.startswith("daskangel"))
            ]
            assert not bad, [r.getMessage() for r in bad]
            caplog.clear()
            ps.drop("a")
            assert "b" not in ps.arrays()


def test_consistent_cut_on_server() -> None:
    """The copy-on-write cut at clock 5 keeps writes of clock <= 5 (even late ones)
    and untagged writes, and leaves out writes of clock 6."""
    s = PSServer("local", 0)
    spec = {
        "block": 0,
        "kind": "dense",
        "shape": (1, 4),
        "dtype": "int64",
        "row0": 0,
        "col0": 0,
        "n_cols": 4,
        "init": angel.psarray.InitSpec().to_dict(),
    }
    s.dispatch("create", array="w", blocks=[spec])
    s.dispatch("cut_begin", clock=5)

    def push(vals: list[int], clock: int | None) -> None:
        part = {"block": 0, "rows": None, "cols": None, "values": np.array([vals], "int64")}
        s.dispatch("update", array="w", parts=[part], add=True, clock=clock)

    push([1, 0, 0, 0], 6)  # a fast task's next clock
    push([0, 1, 0, 0], 5)  # a slow task's clock-5 update, arriving late
    push([0, 0, 1, 0], None)  # untagged write
    push([0, 0, 0, 1], 7)
    (cut,) = SERVER_OPS["cut_take"](s, array="w", parts=[{"block": 0}])
    np.testing.assert_array_equal(cut.data, [[0, 1, 1, 0]])
    np.testing.assert_array_equal(s.blocks[("w", 0)].data, [[1, 1, 1, 1]])
    s.dispatch("cut_end")
    assert not s.shadows


def _one_clock(ctx: Any, part: Any) -> None:
    w = ctx.array("w")
    for _ in ctx.epochs():
        w.increment(np.ones(4, "int64"))
        ctx.clock()


def test_keep_counts_snapshots_apart_from_the_rollback_point(
    client: Client, tmp_path: Path
) -> None:
    """keep=2 keeps 2 snapshots besides a job's starting snapshot (its rollback point),
    which goes once a newer snapshot is complete."""
    root = f"file://{tmp_path}/ckpt"  # a zarr store on a local fsspec path

    def flags() -> list[bool]:
        return [
            bool(fmt.read_manifest(fmt.join(root, v)).get("rollback_point"))
            for v in fmt.list_versions(root)
        ]

    with angel.PSContext(client, snapshot=root, snapshot_every=10, keep=2) as ps:
        ps.zeros("w", (4,), dtype="int64")
        first = [ps.snapshot()["version"] for _ in range(2)]
        # a job shorter than snapshot_every: only its rollback point is written
        angel.train(ps, _one_clock, [None], epochs=1, progress=False)
        assert fmt.list_versions(root)[:2] == first and flags() == [False, False, True]
        angel.train(ps, _one_clock, [None], epochs=1, progress=False)  # supersedes it
        assert fmt.list_versions(root)[:2] == first and flags() == [False, False, True]
        last = ps.snapshot()["version"]
        assert fmt.list_versions(root) == [first[1], last] and flags() == [False, False]
        np.testing.assert_array_equal(angel.load_arrays(root)["w"], [2, 2, 2, 2])
