"""Every docstring example in the package runs and prints what it shows.

Examples that need a running cluster carry ``# doctest: +SKIP`` on each line; the
rest run here, in one process, so an example can never rot unnoticed.
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import daskangel

# every family's examples compile its numba kernels on a cold cache (a fresh clone):
# minutes on a busy 2-core machine, not seconds
pytestmark = pytest.mark.timeout(900)


def _modules() -> list[str]:
    names = ["daskangel"]
    for info in pkgutil.walk_packages(daskangel.__path__, "daskangel."):
        if info.name.rsplit(".", 1)[-1] != "__main__":
            names.append(info.name)
    return sorted(names)


def test_every_docstring_example_runs_as_shown() -> None:
    failures: list[str] = []
    attempted = 0
    for name in _modules():
        module = importlib.import_module(name)
        result = doctest.testmod(module, optionflags=doctest.ELLIPSIS, verbose=False, report=False)
        attempted += result.attempted
        if result.failed:
            failures.append(f"{name}: {result.failed} of {result.attempted} failed")
    assert not failures, (
        "docstring examples failed (run pytest --doctest-modules on them):\n" + "\n".join(failures)
    )
    assert attempted > 100  # the examples really ran
