"""The Examples in the data layer's docstrings run and stay true."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import daskangel.data

MODULES = (
    ["daskangel.data"]
    + [f"daskangel.data.{m.name}" for m in pkgutil.iter_modules(daskangel.data.__path__)]
    + ["daskangel.psarray._rank"]
)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
