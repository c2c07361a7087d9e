"""`make demo` runs end to end (it starts its own LocalCluster)."""

from __future__ import annotations

import pytest

from daskangel import demo


@pytest.mark.timeout(300)
def test_demo_trains_and_prints_metrics_per_epoch(capsys: pytest.CaptureFixture[str]) -> None:
    figures = demo.run(n_workers=2, n_rows=60_000, n_features=2**15, epochs=2)
    out = capsys.readouterr().out
    assert "dashboard: http://" in out and "/daskangel" in out
    assert "60,000 rows x 32,768 features" in out
    # the model learns: better than chance after one epoch, no worse after the second
    assert figures["epoch1_auc"] > 0.6
    assert figures["epoch2_logloss"] <= figures["epoch1_logloss"] + 0.01
    assert figures["epoch2_auc"] <= figures["planted_auc"] + 0.02
    assert all(v > 0 for v in figures.values())
    assert figures["sparse_bytes_per_key"] <= 16
    # issue 14 section 4.6: rates are warm (as bench_ps measures them); the one-off
    # first push that creates the keys is shown apart, not passed off as the rate
    assert "PS operations, warm" in out and "the first push, creating the keys" in out
    assert figures["sparse_first_push_s"] > 0
