"""Solver 'sgd' with step-pulls: several minibatches' steps a message (models/linear/_minibatch)."""

from __future__ import annotations

from typing import Any

import dask
import numpy as np
import pytest
from distributed import Client

import daskangel as angel
from daskangel import models
from daskangel.models.linear._minibatch import sgd_fuse

from ..conftest import planted

pytestmark = pytest.mark.timeout(240)

KW: dict[str, Any] = {"solver": "sgd", "batch_size": 64, "learning_rate": 0.5, "max_iter": 4}


def _calls(ps: angel.PSContext) -> int:
    return int(ps.status(max_age=0).query("kind == 'server'")["calls"].sum())


@pytest.mark.parametrize(("fuse", "prefetch"), [(1, 0), (2, 2), (3, 0), (5, 1)])
def test_sgd_converges_with_any_number_of_steps_a_message(
    client: Client, fuse: int, prefetch: int
) -> None:
    X, y, w = planted(n=1600, seed=4)
    cfg = {
        "daskangel.models.sgd-fuse": fuse,
        "daskangel.models.sgd-prefetch": prefetch,
        "daskangel.models.sgd-group": 7,  # rounds that do not divide by fuse
    }
    with dask.config.set(cfg):
        clf = models.LogisticRegression(early_stopping=False, **KW).fit(X, y)
    assert clf.score(X, y) > 0.94, clf.history_
    assert np.corrcoef(clf.coef_.ravel(), w.ravel())[0, 1] > 0.97
    loss = clf.history_.train_loss
    assert loss.iloc[-1] < loss.iloc[0]
    clf.close()


def test_steps_of_several_minibatches_share_a_message(client: Client) -> None:
    """The servers serve fewer requests with 4 minibatches' steps a message; the
    model trains as well (the same updates, fewer messages)."""
    X, y, _ = planted(n=2400, seed=6)
    calls, scores = {}, {}
    for fuse in (1, 4):
        with angel.PSContext(client) as ps, dask.config.set({"daskangel.models.sgd-fuse": fuse}):
            before = _calls(ps)
            clf = models.LogisticRegression(ps=ps, early_stopping=False, **KW).fit(X, y)
            calls[fuse] = _calls(ps) - before
            scores[fuse] = clf.score(X, y)
            clf.close()
    assert calls[4] < 0.75 * calls[1], calls
    assert min(scores.values()) > 0.94, scores


def test_softmax_sgd_steps_rows_with_step_pulls(client: Client) -> None:
    X, y, _ = planted(n=1800, seed=8, kind="multiclass")
    with dask.config.set({"daskangel.models.sgd-fuse": 2}):
        clf = models.SoftmaxRegression(early_stopping=False, **KW).fit(X, y)
    assert clf.score(X, y) > 0.85, clf.history_
    clf.close()


def test_a_bad_fuse_setting_is_refused_by_name() -> None:
    for bad in (0, -1, 1.5, True, "2"):
        with (
            dask.config.set({"daskangel.models.sgd-fuse": bad}),
            pytest.raises(angel.errors.InvalidArgumentError, match="sgd-fuse"),
        ):
            sgd_fuse()
    with dask.config.set({"daskangel.models.sgd-fuse": 3}):
        assert sgd_fuse() == 3


def test_sgd_weights_take_one_block_per_server(client: Client) -> None:
    X, y, _ = planted(n=400, seed=9)
    with angel.PSContext(client) as ps:
        clf = models.LogisticRegression(ps=ps, **{**KW, "max_iter": 1}).fit(X, y)
        w = ps.get_array(clf._arrays["weights"])
        servers = [b.server for b in w.blocks]
        assert len(servers) == len(set(servers)) == len(ps.servers) == 2
        assert w.meta.layout.n_blocks == 2
        clf.close()
