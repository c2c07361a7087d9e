"""docs/psf.md: every built-in psf is listed, and the worked example runs as shown."""

from __future__ import annotations

import pathlib
import re

import numpy as np
import pytest

import daskangel as angel
from daskangel import ops

from .docs_example import RangeStats, ScaleRows

DOC = pathlib.Path(__file__).parents[2] / "docs" / "psf.md"


def test_every_builtin_is_listed_with_its_angel_name():
    text = DOC.read_text()
    table = {m.group(1) for m in re.finditer(r"^\| `ops\.(\w+)", text, re.M)}
    builtins = {
        n
        for n in ops.__all__
        if isinstance(getattr(ops, n), type)
        and issubclass(getattr(ops, n), (ops.PSFunc, ops.Optimizer))
        and n
        not in {
            "PSFunc",
            "GetFunc",
            "UpdateFunc",
            "ElementMap",
            "ElementMapWithIndex",
            "ZipMap",
            "RowMap",
            "Reduce",
            "Optimizer",
            "OptimizerStep",
            "PullWithVersions",
        }
    }
    assert builtins - table == set()
    assert table - builtins == set()


def test_worked_example_is_the_tested_module():
    text = DOC.read_text()
    block = text.split("```python\n# mypsfs.py\n", 1)[1].split("```", 1)[0]
    module = (pathlib.Path(__file__).parent / "docs_example.py").read_text()
    body = module.split('"""\n', 2)[2].lstrip("\n")  # without the module docstring
    assert block.strip() == body.strip()


@pytest.mark.parametrize("sparse", [False, True])
def test_worked_example_psfs(ps, sparse):
    a = np.arange(24.0).reshape(6, 4) / 10
    if sparse:
        x = ps.zeros("x", (6, 4), dtype="float64", block_shape=(4, 3), sparse=True)
        x.set(a)
    else:
        x = ps.from_array("x", a, block_shape=(4, 3))
        n, mean = x.psf(RangeStats(0.5, 1.5))
        inside = a[(a >= 0.5) & (a <= 1.5)]
        assert n == inside.size and mean == pytest.approx(inside.mean())
    x.psf(ScaleRows(rows=(1, 4, 4), factor=-2.0))
    a[[1, 4]] *= -2.0
    np.testing.assert_allclose(x.get(), a)
    assert isinstance(x, angel.PSArray)
