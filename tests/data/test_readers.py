"""Readers end to end on a real 2-process LocalCluster, checked against sklearn."""

from __future__ import annotations

import bz2
import gzip
import os

import dask
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from sklearn.datasets import dump_svmlight_file, load_svmlight_file

import daskangel as angel

DATA = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "shared", "data")
DATA = os.environ.get("DASKANGEL_DATA", os.path.abspath(DATA))


def _dataset_path(*parts: str) -> str:
    p = os.path.join(DATA, *parts)
    if not os.path.exists(p):
        p = os.path.join("/work/shared/data", *parts)
    return p


def _rows_sorted(m: np.ndarray, y: np.ndarray) -> np.ndarray:
    full = np.column_stack([y, m])
    return full[np.lexsort(full.T[::-1])]


@pytest.fixture(scope="module")
def svm_files(tmp_path_factory):
    rng = np.random.default_rng(42)
    X = sp.random(600, 40, density=0.2, random_state=1, format="csr", dtype=np.float64)
    X.data = rng.standard_normal(X.nnz) * 10.0 ** rng.integers(-3, 4, X.nnz)
    y = rng.integers(-1, 2, 600).astype(np.float64)
    d = tmp_path_factory.mktemp("svm")
    plain = d / "x.svm"
    dump_svmlight_file(X, y, str(plain), zero_based=False)
    raw = plain.read_bytes()
    (d / "x.svm.gz").write_bytes(gzip.compress(raw))
    (d / "x.svm.bz2").write_bytes(bz2.compress(raw))
    import zstandard

    (d / "x.svm.zst").write_bytes(zstandard.ZstdCompressor().compress(raw))
    zb = d / "z.svm"
    dump_svmlight_file(X, y, str(zb), zero_based=True)
    return d


@pytest.mark.parametrize("name", ["x.svm", "x.svm.gz", "x.svm.bz2", "x.svm.zst", "z.svm"])
def test_svmlight_round_trip_over_four_byte_ranges(client, svm_files, name):
    path = str(svm_files / name)
    ref = str(svm_files / ("z.svm" if name == "z.svm" else "x.svm"))  # sklearn has no .zst
    X, y = load_svmlight_file(ref, n_features=40, zero_based="auto")
    with dask.config.set({"daskangel.data.split-bytes": "8KiB"}):
        ds = angel.data.read_libsvm(path).persist(n_partitions=1)
    # plain files are cut into byte ranges; a compressed one is a single stream
    assert ds.n_splits >= 4 if name.endswith(".svm") else ds.n_splits == 1
    got = ds.compute()
    assert (ds.n_rows, ds.n_features, ds.nnz) == (600, 40, X.nnz)
    np.testing.assert_array_equal(got.to_scipy().toarray(), X.toarray().astype(np.float32))
    np.testing.assert_array_equal(got.labels, y.astype(np.float32))
    assert got.indices.dtype == np.int32 and got.data.dtype == np.float32
    # several partitions (byte ranges, or line shares of a compressed file): the same
    # rows, spread over both workers
    with dask.config.set({"daskangel.data.split-bytes": "8KiB"}):
        ds3 = angel.data.read_libsvm(path).persist(n_partitions=3)
    assert len(set(ds3.workers)) == 2 and ds3.n_rows == 600
    np.testing.assert_array_equal(
        _rows_sorted(ds3.compute().to_scipy().toarray(), ds3.compute().labels),
        _rows_sorted(X.toarray().astype(np.float32), y.astype(np.float32)),
    )


@pytest.mark.parametrize(
    "name, nf", [(("a9a", "a9a"), 123), (("a9a", "a9a.t"), 123), (("w8a", "w8a"), 300)]
)
def test_real_sets_equal_sklearn(client, name, nf):
    path = _dataset_path(*name)
    if not os.path.exists(path):
        pytest.skip(reason=f"{path} absent (see ../shared/data/README.md)")
    X, _y = load_svmlight_file(path, n_features=nf)
    with dask.config.set({"daskangel.data.split-bytes": "256KiB"}):
        ds = angel.data.read_libsvm(path, n_features=nf).persist(n_partitions=1)
    assert ds.n_splits >= 4
    got = ds.compute().to_scipy()
    assert (got != X.astype(np.float32)).nnz == 0 and got.shape == X.shape


def test_more_tasks_than_lines(client, tmp_path):
    p = tmp_path / "tiny.svm"
    p.write_bytes(b"1 1:1\n-1 2:1\n1 3:1\n")
    ds = angel.data.read_libsvm(str(p)).persist(n_partitions=8)
    assert ds.n_partitions == 8 and ds.n_rows == 3 and ds.n_features == 3
    assert sorted(i.n_rows for i in ds.info) == [0] * 5 + [1] * 3
    g = p.with_suffix(".svm.gz")
    g.write_bytes(gzip.compress(p.read_bytes()))
    ds = angel.data.read_libsvm(str(g)).persist(n_partitions=5)
    assert ds.n_rows == 3 and sorted(ds.compute().labels.tolist()) == [-1, 1, 1]


def test_memory_filesystem_on_a_threaded_cluster():
    import fsspec
    from distributed import Client, LocalCluster

    with fsspec.open("memory://angel-test/m.svm", "wb") as f:
        f.write(b"1 0:1.5\n0 4:2\n")
    with LocalCluster(n_workers=2, processes=False, dashboard_address=":0") as cl, Client(cl) as c:
        ds = angel.data.read_libsvm("memory://angel-test/m.svm", label_transform="posneg").persist(
            c
        )
        b = ds.compute()
        assert b.labels.tolist() == [1.0, -1.0] and ds.n_features == 5


def test_label_transforms(client, tmp_path):
    p = tmp_path / "l.svm"
    p.write_bytes(b"1 1:1\n-1 1:1\n")
    for how, want in [("zeroone", [1, 0]), ("add1", [2, 0]), ("sub1", [0, -2]), (None, [1, -1])]:
        ds = angel.data.read_libsvm(str(p), label_transform=how).persist(n_partitions=1)
        assert ds.compute().labels.tolist() == want
    with pytest.raises(ValueError, match="label_transform"):
        angel.data.read_libsvm(str(p), label_transform="bad")


def test_dummy_and_dense(client, tmp_path):
    census = _dataset_path("angel-sample", "census", "census_148d_test.dummy")
    if os.path.exists(census):
        ds = angel.data.read_dummy(census, n_features=148).persist()
        with open(census) as f:
            lines = [ln.split() for ln in f if ln.strip()]
        assert ds.n_rows == len(lines) and ds.nnz == sum(len(t) - 1 for t in lines)
        assert ds.n_features == 148
    p = tmp_path / "d.txt"
    M = np.round(np.random.default_rng(0).standard_normal((50, 6)), 3)
    M[M < 0] = 0
    np.savetxt(p, np.column_stack([np.arange(50), M]), fmt="%g")
    ds = angel.data.read_dense(str(p)).persist(n_partitions=1)
    b = ds.compute()
    assert ds.n_features == 6
    np.testing.assert_array_equal(b.to_scipy().toarray(), M.astype(np.float32))
    np.testing.assert_array_equal(b.labels, np.arange(50))


def test_docword_kos(client):
    path = _dataset_path("kos", "docword.kos.txt.gz")
    if not os.path.exists(path):
        pytest.skip(reason="kos absent (see ../shared/data/README.md)")
    ds = angel.data.read_docword(path).persist()
    b = ds.compute()
    assert ds.n_features == 6906 and ds.nnz == 353160
    assert int(b.data.sum()) == 467714
    assert set(np.unique(b.row_ids).tolist()) == set(range(3430))


def test_ratings_movielens_and_udata(client, tmp_path):
    path = _dataset_path("ml-latest-small", "ratings.csv")
    if os.path.exists(path):
        with dask.config.set({"daskangel.data.split-bytes": "512KiB"}):
            ds = angel.data.read_ratings(path).persist()
        b = ds.compute()
        df = pd.read_csv(path)
        assert ds.nnz == len(df) == 100836
        assert len(np.unique(b.row_ids)) == 610
        assert np.isclose(b.data.sum(), df.rating.sum())
    u = tmp_path / "u.data"
    u.write_bytes(b"196\t242\t3\t881250949\n186\t302\t3\t891717742\n196\t377\t1\t878887116\n")
    b = angel.data.read_ratings(str(u)).persist(n_partitions=1).compute()
    assert b.row_ids.tolist() == [186, 196] and b.indptr.tolist() == [0, 1, 3]


def test_text_and_csv(client, tmp_path):
    t = tmp_path / "t.txt"
    t.write_bytes(b"the cat sat\nThe dog\n\nsat sat\n")
    ds = angel.data.read_text(str(t)).persist()
    assert ds.n_rows == 3 and not ds.indexed
    c = tmp_path / "c.csv"
    c.write_bytes(b'y,a,b,city\n1,0.5,2,x\n0,1,,y\n1,2,3\n0,1,1,"q,r"\n')
    ds = angel.data.read_csv(str(c), label="y", numeric=["a", "b"], errors="collect").persist()
    assert ds.n_rows == 2 and ds.skipped == {"field_count": 1, "non_numeric": 1}
    assert [(e.line, e.reason) for e in ds.errors] == [(3, "non_numeric"), (4, "field_count")]
    b = ds.compute()
    assert ds.n_features == 2 and sorted(b.labels.tolist()) == [0, 1]


def test_from_memory_and_dask_objects(client):
    import dask.array as da
    import dask.dataframe as dd

    rng = np.random.default_rng(3)
    X = rng.standard_normal((200, 5)).astype(np.float32)
    y = np.arange(200)
    for obj in (X, sp.csr_matrix(X)):
        b = angel.data.from_array(obj, y).persist(n_partitions=3).compute()
        order = np.argsort(b.labels)
        np.testing.assert_array_equal(b.to_scipy().toarray()[order], X)
    import sparse

    for fmt in ("coo", "gcxs"):  # dask arrays of pydata sparse blocks
        xs = da.from_array(X, chunks=(25, 5)).map_blocks(sparse.asarray, format=fmt)
        b = angel.data.from_array(xs, da.from_array(y, chunks=25)).persist().compute()
        np.testing.assert_array_equal(b.to_scipy().toarray()[np.argsort(b.labels)], X)
    xa = client.persist(da.from_array(X, chunks=(25, 5)))
    ds = angel.data.from_array(xa, da.from_array(y, chunks=25)).persist()
    # chunks were assigned to the workers already holding them
    b = ds.compute()
    np.testing.assert_array_equal(b.to_scipy().toarray()[np.argsort(b.labels)], X)
    df = pd.DataFrame({"y": y % 2, "u": X[:, 0], "cat": [f"c{i % 7}" for i in range(200)]})
    ds = angel.data.from_array(
        dd.from_pandas(df, npartitions=4), label="y", categorical=["cat"]
    ).persist()
    assert ds.n_rows == 200 and not ds.indexed and ds.nnz == 400
    with pytest.raises(KeyError, match="nope"):
        angel.data.from_array(df, label="nope")


def test_auto_base_conflict_with_declared_n_features(client, tmp_path):
    p = tmp_path / "c.svm"
    p.write_bytes(b"1 0:1\n1 3:1\n")
    with pytest.raises(angel.errors.MalformedInputError, match="zero_based"):
        angel.data.read_libsvm(str(p), n_features=3).persist()
    ds = angel.data.read_libsvm(str(p), n_features=3, zero_based=True, errors="skip").persist()
    assert ds.n_rows == 1 and ds.skipped == {"index_out_of_range": 1}
    ds = angel.data.read_libsvm(str(p), n_features=3, zero_based=False, errors="skip").persist()
    assert ds.n_rows == 1 and ds.skipped == {"negative_index": 1}


def test_garbage_never_crashes_a_worker(client, tmp_path):
    rng = np.random.default_rng(9)
    raw = rng.integers(0, 256, 200_000, dtype=np.uint8)
    raw[rng.integers(0, raw.shape[0], 4000)] = 10
    p = tmp_path / "garbage.bin"
    p.write_bytes(raw.tobytes())
    readers = [
        lambda **kw: angel.data.read_libsvm(str(p), **kw),
        lambda **kw: angel.data.read_dummy(str(p), **kw),
        lambda **kw: angel.data.read_dense(str(p), n_features=3, **kw),
        lambda **kw: angel.data.read_ratings(str(p), header=False, **kw),
        lambda **kw: angel.data.read_text(str(p), **kw),
        lambda **kw: angel.data.read_csv(str(p), names=["a", "b"], header=False, **kw),
    ]
    for read in readers:
        ds = read(errors="collect").persist(n_partitions=3)
        assert sum(ds.skipped.values()) > 0
        assert all(e.line >= 1 for e in ds.errors)
    q = tmp_path / "quotes.csv"
    q.write_bytes(b'y,a,b\n1,2,x\n0,"3,z\n1,4,"q"\n0,5,"a""b\n')
    ds = angel.data.read_csv(str(q), label="y", numeric=["a"], categorical=["b"], errors="collect")
    ds = ds.persist()
    assert ds.n_rows == 2 and [(e.line, e.reason) for e in ds.errors] == [
        (3, "field_count"),
        (5, "field_count"),
    ]


def test_docword_documents_are_never_cut(client, tmp_path):
    rng = np.random.default_rng(2)
    body = [
        b"%d %d %d" % (d, w, rng.integers(1, 9))
        for d in range(1, 301)
        for w in sorted(rng.choice(np.arange(1, 801), rng.integers(1, 40), replace=False))
    ]
    p = tmp_path / "docword.test.txt"
    p.write_bytes(b"300\n800\n%d\n" % len(body) + b"\n".join(body) + b"\n")
    with dask.config.set({"daskangel.data.split-bytes": "2KiB"}):
        ds = angel.data.read_docword(str(p)).persist(n_partitions=5)
    assert ds.n_splits > 10 and ds.nnz == len(body) and ds.n_features == 800
    b = ds.compute()
    assert ds.n_rows == 300 and sorted(b.row_ids.tolist()) == list(range(300))


def test_headers_are_skipped_even_when_splits_are_tiny(client, tmp_path):
    p = tmp_path / "docword.tiny.txt"
    p.write_bytes(b"2\n3\n4\n1 1 2\n1 3 1\n2 2 5\n2 3 1\n")
    with dask.config.set({"daskangel.data.split-bytes": 3}):
        ds = angel.data.read_docword(str(p)).persist(n_partitions=2)
    assert ds.n_splits >= 10 and ds.skipped == {} and ds.nnz == 4 and ds.n_rows == 2
    r = tmp_path / "ratings.csv"
    r.write_bytes(b"userId,movieId,rating,timestamp\n1,10,4.0,5\n1,11,3.5,6\n2,10,1.0,7\n")
    with dask.config.set({"daskangel.data.split-bytes": 4}):
        ds = angel.data.read_ratings(str(r)).persist(n_partitions=3)
    assert ds.skipped == {} and ds.nnz == 3 and ds.n_rows == 2


def test_line_numbers_count_the_header_with_tiny_splits(client, tmp_path):
    p = tmp_path / "docword.bad.txt"
    p.write_bytes(b"2\n3\n4\n1 1 2\n1 3 1\n2 x 5\n2 3 1\n")
    with dask.config.set({"daskangel.data.split-bytes": 2}):
        ds = angel.data.read_docword(str(p), errors="collect").persist(n_partitions=3)
    assert [(e.line, e.reason) for e in ds.errors] == [(6, "bad_index")]


@pytest.mark.timeout(120)
def test_libsvm_counts_name_the_true_reason(client, tmp_path):
    # issue 14 section 4.9: a line without a label was counted as non_numeric and a
    # token without a colon as bad_index
    p = tmp_path / "reasons.svm"
    p.write_bytes(b"1 1:1\n2:1 4:2\n-1 2:1 abc\n1 x7:1\nabc 3:1\n0 3:1\n")
    ds = angel.data.read_libsvm(str(p), n_features=10, errors="collect").persist(n_partitions=1)
    assert ds.skipped == {"missing_label": 1, "missing_colon": 1, "bad_index": 1, "non_numeric": 1}
    assert [(e.line, e.reason) for e in ds.errors] == [
        (2, "missing_label"),
        (3, "missing_colon"),
        (4, "bad_index"),
        (5, "non_numeric"),
    ]
    assert "missing label" in ds.errors[0].message and ds.n_rows == 2
