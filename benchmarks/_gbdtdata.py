"""Data of ``bench_gbdt.py``: the shared sets, and seeded synthetic sets made chunk by chunk.

Real sets (``../shared/data``; a missing one is skipped):

* **a9a**: LIBSVM ``a9a`` / ``a9a.t`` (123 features, 1-based);
* **census**: Angel's ``census_148d_train.libsvm`` (1-based) and
  ``census_148d_test.dummy`` (Angel's ``dummy`` format, ``label idx idx ...``,
  0-based: shifted by one to line up with the training file);
* **agaricus**: Angel's ``agaricus_127d_{train,test}.libsvm``;
* **dna**: Angel's ``dna.scale`` / ``dna.scale.t`` (3 classes, 180 features).

Synthetic sets are generated chunk by chunk from ``(seed, chunk)`` alone, so
the driver (for the single-process peers) and the Dask workers (for daskangel
and the Dask peers: ``dask.array`` blocks built on the workers) see the same
rows without ever holding more than their own copy, and nothing is written:

* **higgs**: HIGGS-shaped, 28 dense float32 features (21 "low-level"
  momenta / angles / b-tags, 7 "high-level" invariant-mass-like combinations),
  a label drawn from a non-linear logit (interactions and thresholds a tree
  captures and a linear model does not), ~50 % positives;
* **sparse**: high-dimensional binary rows (``n_features`` columns, ~``nnz``
  stored entries per row drawn from a power law over the columns), a label
  from a sparse planted logit with pairwise interactions.

Example
-------
>>> X, y = higgs_chunk(0, 0, 5)
>>> X.shape, X.dtype.name, y.shape
((5, 28), 'float32', (5,))
>>> Xs, ys = sparse_chunk(0, 0, 4, 1000, 10)
>>> Xs.shape, bool((Xs.data == 1).all())
((4, 1000), True)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

__all__ = [
    "Problem",
    "dask_synthetic",
    "higgs_chunk",
    "load_real",
    "numpy_synthetic",
    "sparse_chunk",
]


@dataclass
class Problem:
    """A train / test split; ``Xtr_dask`` (optional) is the same rows as Dask blocks."""

    name: str
    Xtr: Any
    ytr: np.ndarray
    Xte: Any
    yte: np.ndarray
    n_classes: int = 2
    Xtr_dask: Any = None
    ytr_dask: Any = None

    @property
    def shape(self) -> tuple[int, int]:
        return (int(self.Xtr.shape[0]), int(self.Xtr.shape[1]))


def _svm(path: Path, n_features: int, dummy: bool = False) -> tuple[sp.csr_matrix, np.ndarray]:
    from sklearn.datasets import load_svmlight_file

    if not dummy:
        X, y = load_svmlight_file(str(path), n_features=n_features, zero_based=False)
        return _csr32(X), np.asarray(y)
    rows, cols, labels = [], [], []
    with open(path) as fh:
        for line in fh:
            tok = line.split()
            if not tok:
                continue
            labels.append(float(tok[0]))
            idx = [int(t) for t in tok[1:]]
            rows.extend([len(labels) - 1] * len(idx))
            cols.extend(idx)
    X = sp.csr_matrix(
        (np.ones(len(cols)), (np.asarray(rows), np.asarray(cols))), shape=(len(labels), n_features)
    )
    return _csr32(X), np.asarray(labels)


def _csr32(X: Any) -> sp.csr_matrix:
    """CSR float64 with 32-bit indices (scikit-learn's liblinear refuses 64-bit ones)."""
    X = sp.csr_matrix(X, dtype=np.float64)
    return sp.csr_matrix(
        (X.data, X.indices.astype(np.int32), X.indptr.astype(np.int32)), shape=X.shape
    )


def load_real(name: str, root: Path, have: Any) -> Problem | None:
    """One of the shared sets, or None (after a printed line) when its files are absent."""
    a = root / "angel-sample"
    if name == "a9a":
        tr, te = root / "a9a" / "a9a", root / "a9a" / "a9a.t"
        if not have(tr, te):
            return None
        (Xtr, ytr), (Xte, yte) = _svm(tr, 123), _svm(te, 123)
    elif name == "census":
        tr = a / "census" / "census_148d_train.libsvm"
        te = a / "census" / "census_148d_test.dummy"
        if not have(tr, te):
            return None
        Xtr, ytr = _svm(tr, 148)
        # the dummy file is 0-based: its index j is the training file's j + 1, which the
        # 1-based libsvm load puts in column j, so the indices are the columns as they are
        Xte, yte = _svm(te, 148, dummy=True)
    elif name == "agaricus":
        tr = a / "agaricus" / "agaricus_127d_train.libsvm"
        te = a / "agaricus" / "agaricus_127d_test.libsvm"
        if not have(tr, te):
            return None
        (Xtr, ytr), (Xte, yte) = _svm(tr, 127), _svm(te, 127)
    elif name == "dna":
        tr, te = a / "dna" / "dna.scale", a / "dna" / "dna.scale.t"
        if not have(tr, te):
            return None
        (Xtr, ytr), (Xte, yte) = _svm(tr, 180), _svm(te, 180)
        return Problem(name, Xtr, ytr - 1, Xte, yte - 1, n_classes=3)
    else:
        raise ValueError(f"unknown data set {name!r}")
    return Problem(name, Xtr, (ytr > 0).astype(np.float64), Xte, (yte > 0).astype(np.float64))


# -- synthetic ------------------------------------------------------------------------------


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-z))


def higgs_chunk(seed: int, chunk: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows of chunk ``chunk`` of the HIGGS-shaped set: ``(X float32 (n, 28), y float64)``."""
    rng = np.random.default_rng([int(seed), 0x4816, int(chunk)])
    X = np.empty((n, 28), np.float32)
    # 7 objects x (pt, eta, phi) = 21 low-level columns; b-tags replace 3 phis
    pt = rng.lognormal(0.0, 0.5, size=(n, 7))
    eta = rng.normal(0.0, 1.1, size=(n, 7))
    phi = rng.uniform(-np.pi, np.pi, size=(n, 7))
    btag = rng.choice(np.array([0.0, 1.1, 2.2]), size=(n, 3), p=[0.55, 0.25, 0.2])
    X[:, 0:21:3] = pt
    X[:, 1:21:3] = eta
    X[:, 2:21:3] = phi
    X[:, [8, 14, 20]] = btag

    def mass(i: int, j: int) -> np.ndarray:
        m2 = (
            2
            * pt[:, i]
            * pt[:, j]
            * (np.cosh(eta[:, i] - eta[:, j]) - np.cos(phi[:, i] - phi[:, j]))
        )
        return np.sqrt(np.maximum(m2, 0.0))

    m = [mass(0, 1), mass(2, 3), mass(4, 5), mass(1, 6), mass(0, 2), mass(3, 5), mass(4, 6)]
    for k, v in enumerate(m):
        X[:, 21 + k] = v
    z = (
        1.4 * np.tanh(2.0 * (m[0] - 1.2)) * (btag[:, 0] > 0.5)
        - 1.0 * np.abs(eta[:, 1] - eta[:, 2]) * (m[1] > 1.5)
        + 0.9 * ((m[2] > 0.9) & (m[2] < 2.2))
        + 0.6 * np.log(pt[:, 3] + 0.1) * np.sign(eta[:, 4])
        + 0.5 * btag[:, 1] * (pt[:, 5] > 1.0)
        - 0.7 * (m[6] < 0.8)
        + 0.3 * np.cos(phi[:, 0] - phi[:, 3])
        - 0.25
    )
    y = (rng.random(n) < _sigmoid(z)).astype(np.float64)
    return X, y


def _sparse_weights(seed: int, n_features: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng([int(seed), 0x5BA5])
    w = np.zeros(n_features)
    k = min(n_features, 4000)
    w[:k] = rng.normal(0.0, 0.6, size=k)  # the common columns carry the signal
    pairs = rng.integers(0, min(n_features, 200), size=(40, 2))
    return w, pairs


def sparse_chunk(
    seed: int, chunk: int, n: int, n_features: int, nnz: int
) -> tuple[sp.csr_matrix, np.ndarray]:
    """Rows of chunk ``chunk`` of the sparse set: ``(X csr float32 (n, n_features), y)``."""
    rng = np.random.default_rng([int(seed), 0x5BA6, int(chunk)])
    per = rng.poisson(nnz, size=n).clip(1, n_features)
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(per, out=indptr[1:])
    u = rng.random(int(indptr[-1]))
    cols = np.minimum((n_features * u**3.0).astype(np.int64), n_features - 1)
    X = sp.csr_matrix(
        (np.ones(cols.shape[0], np.float32), cols.astype(np.int32), indptr), shape=(n, n_features)
    )
    X.sum_duplicates()
    X.data[:] = 1.0
    X.indptr = X.indptr.astype(np.int32)  # scikit-learn's liblinear takes 32-bit indices
    X.indices = X.indices.astype(np.int32)
    w, pairs = _sparse_weights(0, n_features)  # one planted model for every seed of rows
    z = np.asarray(X @ w).ravel()
    Xc = X[:, : min(n_features, 200)].tocsc()
    for a, b in pairs:
        both = np.asarray(Xc[:, int(a)].multiply(Xc[:, int(b)]).sum(axis=1)).ravel()
        z += 1.5 * both * (1 if (a + b) % 2 else -1)
    z -= np.median(z) if n > 1 else 0.0
    y = (rng.random(n) < _sigmoid(z)).astype(np.float64)
    return X, y


def _chunks(n: int, chunk: int) -> list[int]:
    return [min(chunk, n - a) for a in range(0, n, chunk)]


def numpy_synthetic(kind: str, seed: int, n: int, chunk: int, **kw: Any) -> tuple[Any, np.ndarray]:
    """The whole set on the driver, chunk by chunk (numpy for higgs, CSR for sparse)."""
    sizes = _chunks(n, chunk)
    if kind == "higgs":
        X = np.empty((n, 28), np.float32)
        y = np.empty(n)
        a = 0
        for i, c in enumerate(sizes):
            X[a : a + c], y[a : a + c] = higgs_chunk(seed, i, c)
            a += c
        return X, y
    parts = [sparse_chunk(seed, i, c, kw["n_features"], kw["nnz"]) for i, c in enumerate(sizes)]
    return sp.vstack([p[0] for p in parts], format="csr"), np.concatenate([p[1] for p in parts])


def dask_synthetic(kind: str, seed: int, n: int, chunk: int, **kw: Any) -> tuple[Any, Any]:
    """The same rows as :func:`numpy_synthetic`, as Dask arrays made on the workers."""
    import dask
    import dask.array as da

    sizes = _chunks(n, chunk)
    xs, ys = [], []
    for i, c in enumerate(sizes):
        if kind == "higgs":
            d = dask.delayed(higgs_chunk, nout=2, pure=True)(seed, i, c)
            xs.append(da.from_delayed(d[0], (c, 28), np.float32))
        else:
            d = dask.delayed(sparse_chunk, nout=2, pure=True)(
                seed, i, c, kw["n_features"], kw["nnz"]
            )
            meta = sp.csr_matrix((0, kw["n_features"]), dtype=np.float32)
            xs.append(da.from_delayed(d[0], (c, kw["n_features"]), np.float32, meta=meta))
        ys.append(da.from_delayed(d[1], (c,), np.float64))
    return da.concatenate(xs), da.concatenate(ys)
