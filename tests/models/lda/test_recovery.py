"""A worker process killed in the middle of a CGS fit: the fit goes back to the newest
snapshot (counts and topic assignments) and ends with exact counts; a fresh fit resumed
from one of that run's snapshots (``fit(X, resume=version)``) too."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dask
import numpy as np
import pytest
from distributed import Client

from daskangel import _snapshot_format as fmt
from daskangel.models import LDA
from daskangel.models.lda import heldout_mask
from tests.conftest import make_cluster
from tests.scheduler.test_recovery import FAST

from .corpora import planted_corpus


def _clock(version: str) -> int | None:
    """The snapshot's clock; ``None`` for a version left unfinished by the kill."""
    try:
        return fmt.read_manifest(version).get("clock")
    except FileNotFoundError:
        return None


def _arm(sweep: int, marker: str) -> None:
    dask.config.set({"daskangel.lda.exit-at-sweep": sweep, "daskangel.lda.exit-marker": marker})


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("sampler", ["auto", "warp"])
def test_worker_killed_mid_fit_keeps_counts_exact(tmp_path: Path, sampler: str) -> None:
    X, _ = planted_corpus(n_docs=120, doc_len=40, seed=3)
    with (
        dask.config.set(FAST),
        make_cluster(n_workers=2, threads=2) as cluster,
        Client(cluster) as c,
    ):
        m = LDA(n_topics=4, doc_topic_prior=0.1, topic_word_prior=0.01, max_iter=6,
                snapshot=str(tmp_path / "snap"), snapshot_every=2, n_tasks=2, random_state=0,
                evaluate_every=0, sampler=sampler, progress=False)  # fmt: skip
        # the first task to reach sweep 5 pushes part of it and kills its worker: the
        # counts then hold half a sweep of its changes and its assignments are gone
        marker = tmp_path / "killed"
        c.run(_arm, 5, str(marker))
        m.fit(X)
        assert marker.exists()
        res: Any = m.train_result_
        assert res.rollbacks == 1, res
        nwk = np.asarray(m._ps.get_array(m._arrays["nwk"]).get())
        nk = np.asarray(m._ps.get_array(m._arrays["nk"]).get())[0]
        assert (nwk >= 0).all() and (nk >= 0).all()
        assert np.array_equal(nwk.sum(axis=0), nk)
        held = heldout_mask(X, 0.1, 0)
        assert int(nk.sum()) == int(X[~held].sum()) == m.n_train_tokens_
        assert list(m.history_.sweep) == list(range(1, 7))
        m.close()
        # a new model continues the stopped run from its newest snapshot before the
        # kill: clock 4, or clock 2 when the clock-2 snapshot was still being written
        # as clock 4 came (a snapshot is skipped while one is in flight; seen under load)
        snap = tmp_path / "snap"
        versions = [str(v) for v in sorted(snap.iterdir()) if v.name.startswith("v")]
        clocks = {v: _clock(v) for v in versions}  # an unfinished version: None
        start, at4 = max((c, v) for v, c in clocks.items() if c in (2, 4))
        got = LDA(n_topics=4, doc_topic_prior=0.1, topic_word_prior=0.01, max_iter=6,
                  n_tasks=2, random_state=0, evaluate_every=0, sampler=sampler,
                  progress=False)  # fmt: skip
        got.fit(X, resume=at4)
        assert int(got.train_result_.history.clock.min()) == start
        nwk = np.asarray(got._ps.get_array(got._arrays["nwk"]).get())
        nk = np.asarray(got._ps.get_array(got._arrays["nk"]).get())[0]
        assert (nwk >= 0).all() and np.array_equal(nwk.sum(axis=0), nk)
        assert int(nk.sum()) == int(X[~held].sum()) == got.n_train_tokens_
        assert list(got.history_.sweep) == list(range(start, 7))
        got.close()
