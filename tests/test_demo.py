"""`make demo` runs end to end (it starts its own LocalCluster)."""

from __future__ import annotations

import pytest

from daskangel import demo


@pytest.mark.timeout(240)
def test_demo_runs(capsys: pytest.CaptureFixture[str]) -> None:
    figures = demo.run(n_workers=2)
    out = capsys.readouterr().out
    assert "dashboard: http://" in out
    assert all(v > 0 for v in figures.values())
    assert figures["sparse_bytes_per_key"] <= 16
