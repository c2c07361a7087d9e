"""``daskangel train`` / ``predict`` end to end on a libsvm file; bad arguments exit 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from sklearn.datasets import dump_svmlight_file

from daskangel import cli, models


def _libsvm(path: Path, n: int = 600, seed: int = 0) -> np.ndarray:
    w = np.random.default_rng(99).normal(size=10)  # one planted model for every file
    X = np.random.default_rng(seed).normal(size=(n, 10))
    y = np.where(X @ w > 0, 1, -1)
    dump_svmlight_file(X, y, str(path), zero_based=False)
    return y


@pytest.mark.timeout(240)
def test_train_then_predict_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    train, test = tmp_path / "train.svm", tmp_path / "test.svm"
    _libsvm(train)
    y_test = _libsvm(test, 200, seed=1)
    model = tmp_path / "model"
    rc = cli.main([
        "train", "--model", "lr", "--data", str(train), "--test", str(test), "--format", "libsvm",
        "--epochs", "4", "--lr", "0.1", "--solver", "ma-sgd", "--workers", "2", "--ps", "2",
        "--groups", "2", "--sync", "ssp:1", "--save", str(model), "--no-progress",
    ])  # fmt: skip
    out = capsys.readouterr().out
    assert rc == 0
    assert "dashboard: http://" in out
    acc = float(out.split("test_accuracy")[1].split()[0])
    assert acc > 0.9
    assert "val_auc" in out and f"saved to {model}" in out
    assert models.load.__module__  # the saved model is a daskangel model directory
    assert (model / "daskangel-model.json").exists()
    pred = tmp_path / "pred.txt"
    rc = cli.main(["predict", "--model-path", str(model), "--data", str(test), "--out", str(pred)])
    assert rc == 0
    table = np.loadtxt(pred)
    assert table.shape == (200, 3)  # label, P(-1), P(+1), in the file's row order
    assert float((table[:, 0] == y_test).mean()) == pytest.approx(acc, abs=1e-9)


@pytest.mark.parametrize(
    "args, message",
    [
        (["train", "--model", "nope", "--data", "x"], "--model: invalid choice"),
        (["train", "--model", "lr", "--data", "/no/such/file.svm"], "--data: no such file"),
        (["train", "--model", "lr", "--data", "{train}", "--sync", "ssp:x"], "--sync"),
        (["train", "--model", "lr", "--data", "{train}", "--epochs", "0"], "--epochs: expected"),
        (["train", "--model", "lr", "--data", "{train}", "--lr", "-1"], "learning_rate"),
        (["train", "--model", "lr", "--data", "{train}", "--ps", "3"], "--ps: 3 PS workers"),
        (["predict", "--model-path", "{tmp}", "--data", "{train}", "--out", "o"], "--model-path"),
        (["train", "--data", "{train}"], "--model"),
    ],
)
def test_bad_arguments_exit_2_with_a_clear_message(
    tmp_path: Path, args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    train = tmp_path / "train.svm"
    _libsvm(train, 20)
    with pytest.raises(SystemExit) as e:
        cli.main([a.format(train=train, tmp=tmp_path) for a in args])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err


def test_the_installed_script_exits_2(tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "daskangel.cli", "train", "--model", "lr", "--data", "/no/file"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 2
    assert "argument --data: no such file" in r.stderr
