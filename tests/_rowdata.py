"""Row-increment data shared by the lean-wire tests (``test_lean``,
``test_leandirect``, ``psarray/test_rowpush``): random integer CSRs of one
shape, their exact dense sums, and a malformed CSR the servers must refuse."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

__all__ = ["NNZ", "SHAPE", "dense", "malformed_csr", "random_csr"]

SHAPE = (3_000, 200)  # int32, several row blocks on both servers
NNZ = 40  # a 2,500-row push carries ~100 KB a server: a packed follow frame


def random_csr(seed: int, n_rows: int = 2_500) -> sp.csr_matrix:
    """``n_rows`` random rows of ``SHAPE`` with ``NNZ`` int32 entries in 1..3 each."""
    rng = np.random.default_rng(seed)
    rows = np.sort(rng.choice(SHAPE[0], n_rows, replace=False))
    indptr = np.zeros(SHAPE[0] + 1, np.int64)
    indptr[rows + 1] = NNZ
    vals = rng.integers(1, 4, n_rows * NNZ).astype(np.int32)
    cols = rng.integers(0, SHAPE[1], n_rows * NNZ)
    return sp.csr_matrix((vals, cols, np.cumsum(indptr)), shape=SHAPE)


def dense(*mats: sp.csr_matrix) -> np.ndarray:
    """The exact int64 sum of ``mats``."""
    return sum((m.toarray().astype(np.int64) for m in mats), np.zeros(SHAPE, np.int64))


def malformed_csr(shape: tuple[int, int] = SHAPE) -> sp.csr_matrix:
    """An int32 CSR whose ``indptr`` goes down (a negative row length at row 5):
    scipy does not check it, the servers must refuse it before writing anything."""
    bad = sp.csr_matrix(shape, dtype=np.int32)
    ptr = np.zeros(shape[0] + 1, np.int64)
    ptr[5:] = 2
    ptr[5] = 3
    bad.indptr, bad.indices, bad.data = ptr, np.array([1, 2, 3]), np.ones(3, np.int32)
    return bad
