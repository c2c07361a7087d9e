"""Validation metrics per epoch are the same figures under BSP, SSP and ASP (issue 14 §4).

Under SSP(2) a task's pull of the model may be served from the clock cache up to
two clocks old.  ``ma-sgd`` pushed its local model's change against that stale
base, so changes other tasks had pushed since were added again: the servers'
model oscillated with a growing amplitude (a9a, README's ``--sync ssp:2``:
``val_auc 0.50`` / 0.15 per epoch, early stopping at epoch 7, while the model
after the last epoch scored 0.926).  The epochs' figures were those of a broken
model, and early stopping acted on them.
"""

from __future__ import annotations

from typing import Any
from unittest import mock

import numpy as np
import pytest
from distributed import Client

import daskangel as angel
from daskangel import models

pytestmark = pytest.mark.timeout(240)


def _noisy(n: int = 6000, d: int = 30, seed: int = 3) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    w = rng.normal(size=d) / np.sqrt(d) * 3
    p = 1.0 / (1.0 + np.exp(-(X @ w - 0.5)))
    return X, (rng.random(n) < p).astype(np.int64)


def _history(X: np.ndarray, y: np.ndarray, sync: str) -> dict[str, np.ndarray]:
    clf = models.LogisticRegression(
        solver="ma-sgd", sync=sync, max_iter=8, early_stopping=False, random_state=0
    ).fit(X, y)
    h = clf.history_
    assert list(h.epoch) == list(range(1, 9))
    return {k: h[k].to_numpy() for k in ("val_auc", "val_loss", "val_accuracy")}


def test_ma_sgd_epochs_under_ssp_and_asp_score_like_bsp(client: Client) -> None:
    X, y = _noisy()
    bsp = _history(X, y, "bsp")
    assert bsp["val_auc"].min() > 0.8
    for sync in ("ssp:2", "asp"):
        h = _history(X, y, sync)
        # every epoch's model is as good as BSP's (within noise), not a broken one
        assert h["val_auc"].min() > bsp["val_auc"].min() - 0.02, (sync, h["val_auc"])
        # epoch 1 is scored on the newest model, which under SSP / ASP may not yet hold
        # every task's first epoch (the other task's change still in flight): up to
        # ~0.07 worse than BSP's was seen under load (0.393 vs 0.328), on old code too;
        # a broken model is far above either bound (the base rate's log-loss is ~0.69)
        assert h["val_loss"][0] < bsp["val_loss"][0] + 0.15, (sync, h["val_loss"])
        assert h["val_loss"][1:].max() < bsp["val_loss"][1:].max() + 0.05, (sync, h["val_loss"])
        assert h["val_accuracy"][0] > bsp["val_accuracy"][0] - 0.08, (sync, h)
        assert h["val_accuracy"][1:].min() > bsp["val_accuracy"][1:].min() - 0.03, (sync, h)


# on worker processes (test_estimators runs in-process): in-process, the snapshot the
# resumed fit reads was at times not there yet (the resumed fit started at clock 0)
def test_fit_resumes_from_a_snapshot_to_the_same_model(
    cluster: Any, client: Client, tmp_path: Any
) -> None:
    """fit(..., resume=url) in a fresh context continues a fit from the snapshot
    its context took at clock 4 (of 6) and ends with exactly the model and the
    history of the fit that ran through; on 3 workers too (the arrays cut into
    3 blocks, not the snapshot's 2), making each array once with the snapshot's
    layout."""
    from daskangel.errors import InvalidArgumentError

    from ..conftest import planted

    X, y, _ = planted(n=400)
    url = str(tmp_path / "ckpt")
    kw: dict[str, Any] = {"max_iter": 3, "n_tasks": 1, "sync": "bsp", "random_state": 0}
    with angel.PSContext(client, snapshot=url, snapshot_every=4) as ps:
        ref = models.LogisticRegression(ps=ps, **kw).fit(X, y)
    with angel.PSContext(client) as fresh:
        got = models.LogisticRegression(ps=fresh, **kw).fit(X, y, resume=url)
        assert int(got.train_result_.history.clock.min()) == 4
    np.testing.assert_array_equal(got.coef_, ref.coef_)
    np.testing.assert_array_equal(got.intercept_, ref.intercept_)
    np.testing.assert_allclose(got.history_.to_numpy(float), ref.history_.to_numpy(float))
    other = models.LogisticRegression(solver="sgd", optimizer="adam", **kw)
    with pytest.raises(InvalidArgumentError, match="do not match"):  # another model's arrays
        other.fit(X, y, resume=url)
    # the last test of the module: one more worker (the PS servers of a new context)
    cluster.scale(3)
    client.wait_for_workers(3, timeout=120)
    created: list[str] = []
    make = angel.PSContext._create

    def counted(ps: Any, name: str, *args: Any, **kwargs: Any) -> Any:
        created.append(name)
        return make(ps, name, *args, **kwargs)

    with angel.PSContext(client) as three, mock.patch.object(angel.PSContext, "_create", counted):
        assert len(three.servers) == 3
        got3 = models.LogisticRegression(ps=three, **kw).fit(X, y, resume=url)
        assert int(got3.train_result_.history.clock.min()) == 4
        w = three.get_array(next(n for n in created if n.endswith(".w")))
        assert w.meta.layout.n_blocks == 2, w.meta.layout  # the snapshot's, not 3
    assert len(created) == len(set(created)), created  # none dropped and made again
    np.testing.assert_array_equal(got3.coef_, ref.coef_)
    np.testing.assert_array_equal(got3.intercept_, ref.intercept_)
    np.testing.assert_allclose(got3.history_.to_numpy(float), ref.history_.to_numpy(float))
