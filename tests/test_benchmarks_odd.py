"""The other half of ``tests/test_benchmarks.py``'s smoke runs: the odd-numbered
``benchmarks/bench_*.py`` scripts, each with ``--smoke`` (the checks are there).

A file of its own so that ``--dist loadfile`` runs the two halves on the two xdist
workers side by side rather than every smoke run one after the other on one.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_benchmarks import ODD, TIMEOUT, check_smoke


@pytest.mark.slow
@pytest.mark.timeout(TIMEOUT + 60)
@pytest.mark.parametrize("script", ODD)
def test_smoke(script: Path) -> None:
    check_smoke(script)
