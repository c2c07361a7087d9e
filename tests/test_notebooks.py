"""Every notebook runs top to bottom in a real Jupyter kernel (nbclient).

The ``parameters`` cell is replaced by smaller sizes so the run stays short; every
other cell runs as shipped, and its outputs are checked.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
# the shared data sets (02 and 03 fall back to planted stand-ins without them)
DATA = os.environ.get("DASKANGEL_DATA") or str(NOTEBOOKS.parents[1] / "shared" / "data")


def _text(cell: nbformat.NotebookNode) -> str:
    parts = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            parts.append(out["text"])
        elif "data" in out:
            parts.append(out["data"].get("text/plain", ""))
            parts.append(out["data"].get("text/html", ""))
    return "".join(parts)


def _run(name: str, params: str, timeout: int, tmp_path: Path) -> tuple[Any, str]:
    """Run notebook ``name`` with its ``parameters`` cell replaced by ``params``, in a
    real kernel; the executed notebook and the text of every code cell's outputs."""
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    [cell] = [c for c in nb.cells if "parameters" in c.get("metadata", {}).get("tags", [])]
    cell.source = params
    NotebookClient(
        nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    return nb, "\n".join(_text(c) for c in nb.cells if c.cell_type == "code")


def _pngs(nb: Any) -> int:
    """How many images (plots) the executed notebook shows."""
    return sum("image/png" in o.get("data", {}) for c in nb.cells for o in c.get("outputs", []))


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_quickstart_notebook_runs_and_learns(tmp_path: Path) -> None:
    params = "N_ROWS = 60_000\nN_FEATURES = 2**15\nEPOCHS = 3\nSEED = 0"
    _, out = _run("01-quickstart.ipynb", params, 300, tmp_path)
    assert "parameter-server page:  http://" in out
    assert "/daskangel" in out and "<iframe" in out  # the dashboard page is shown
    assert re.search(r"60,000 rows x 32,768 features", out)
    m = re.search(r"planted model AUC (0\.\d+); trained model validation AUC (0\.\d+)", out)
    assert m is not None, out
    planted, trained = float(m.group(1)), float(m.group(2))
    assert 0.6 < trained <= planted + 0.02  # it learned, and not beyond what the data allows
    assert "reloaded model predicts the same: True" in out
    assert "Array" in out  # predict_proba on a dask array gave a dask array


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_topics_notebook_runs(tmp_path: Path) -> None:
    """02-topics on KOS when the shared data is there (else its planted stand-in), 10 sweeps."""
    params = f"DATA = {DATA!r}\nN_TOPICS = 10\nSWEEPS = 10\nEVERY = 5\nSEED = 0"
    nb, out = _run("02-topics.ipynb", params, 240, tmp_path)
    m = re.search(r"held-out log-likelihood per token after 10 sweeps: (-\d+\.\d+)", out)
    assert m is not None, out
    assert -12.0 < float(m.group(1)) < -1.0
    assert "topic 9" in out and "rows sum to 1: True" in out
    assert _pngs(nb) == 1  # the held-out log-likelihood per sweep


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_recommend_notebook_runs(tmp_path: Path) -> None:
    """03-recommend on ml-latest-small when the shared data is there (else its planted
    stand-in), rank 20, 5 epochs."""
    params = f"DATA = {DATA!r}\nN_FACTORS = 20\nEPOCHS = 5\nSEED = 0"
    nb, out = _run("03-recommend.ipynb", params, 180, tmp_path)
    m = re.search(r"test RMSE after 5 epochs: (\d\.\d+) \(after the first: (\d\.\d+)\)", out)
    assert m is not None, out
    last, first = float(m.group(1)), float(m.group(2))
    assert last < first and last < 1.0  # it learned (biases alone: 0.87 on MovieLens)
    recs = re.findall(r"  recommended (\d)\. (.+) \(predicted (\d\.\d\d)\)", out)
    assert len(recs) == 15 and all(r[1].strip() for r in recs)  # 3 users x 5, with titles
    assert out.count("rated highest: ") == 3 and "most rated: " in out
    assert _pngs(nb) == 1  # RMSE per epoch
