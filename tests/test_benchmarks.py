"""Every ``benchmarks/bench_*.py`` runs with ``--smoke`` and leaves the repository as it was.

One test per script, found by a glob, so a benchmark added later is run by
``make test`` without anyone listing it: a benchmark that crashes, needs a data
set, or writes to ``RESULTS.md`` (or any file of the checkout) fails here
instead of rotting until the next measurement.  Scripts that read the shared
data sets (``../shared/data``, through ``benchmarks/_data.py``) run a second
time with ``$DASKANGEL_DATA`` pointing at an empty folder: a missing data set
is skipped with a printed line, never an error.

The rule (``benchmarks/README.md``): ``--smoke`` means tiny sizes, under 60 s
on the 2-core machine, exit status 0, nothing written to tracked files, no data
set required.  There is no timing assertion here, only a generous timeout.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"
SCRIPTS = sorted(BENCHMARKS.glob("bench_*.py"))
TIMEOUT = 240  # seconds: a smoke run takes well under 60 s on a quiet machine
WATCHED = ("benchmarks", "docs")  # folders whose every file must stay untouched

# every (script, with data?) pair: the no-data run only for scripts that read data sets
CASES = [pytest.param(p, True, id=p.stem) for p in SCRIPTS] + [
    pytest.param(p, False, id=f"{p.stem}-no-data")
    for p in SCRIPTS
    if "data_root" in p.read_text() or "shared/data" in p.read_text()
]


def _files() -> dict[str, tuple[int, int]]:
    """``{relative path: (mtime_ns, size)}`` of the checkout's top-level files and of
    every file under the watched folders (caches aside)."""
    out: dict[str, tuple[int, int]] = {}
    paths = [p for p in ROOT.iterdir() if p.is_file()]
    for folder in WATCHED:
        paths += [p for p in (ROOT / folder).rglob("*") if p.is_file()]
    for p in paths:
        if "__pycache__" in p.parts:
            continue
        st = p.stat()
        out[str(p.relative_to(ROOT))] = (st.st_mtime_ns, st.st_size)
    return out


def test_every_benchmark_is_found() -> None:
    names = {p.stem for p in SCRIPTS}
    assert {"bench_ps", "bench_sync", "bench_psf", "bench_linear"} <= names


@pytest.mark.slow
@pytest.mark.timeout(TIMEOUT + 60)
@pytest.mark.parametrize(("script", "with_data"), CASES)
def test_smoke(script: Path, with_data: bool, tmp_path: Path) -> None:
    env = dict(os.environ)
    if not with_data:
        env["DASKANGEL_DATA"] = str(tmp_path / "no-data")
    before = _files()
    try:
        run = subprocess.run(
            [sys.executable, str(script), "--smoke"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else e.stdout
        pytest.fail(f"{script.name} --smoke ran over {TIMEOUT} s; output so far:\n{out}")
    after = _files()
    tail = f"\n--- stdout ---\n{run.stdout[-4000:]}\n--- stderr ---\n{run.stderr[-4000:]}"
    assert run.returncode == 0, f"{script.name} --smoke exited {run.returncode}{tail}"
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    assert not changed, f"{script.name} --smoke wrote to the checkout: {changed}{tail}"
    assert run.stdout.strip(), f"{script.name} --smoke printed nothing{tail}"
    if not with_data:  # each data set it could not find is named, and skipped
        assert "skipped" in run.stdout, f"{script.name}: no 'skipped' line without data{tail}"
