"""Every ``benchmarks/bench_*.py`` runs with ``--smoke`` and leaves the repository as it was.

One test per script, found by a glob, so a benchmark added later is run by
``make test`` without anyone listing it: a benchmark that crashes, needs a data
set, or writes to ``RESULTS.md`` (or any file of the checkout) fails here
instead of rotting until the next measurement.  Each script runs once, with the
shared data sets when they are there (``../shared/data``, through
``benchmarks/_data.py``) and without them otherwise (a missing set is skipped
with a printed line, never an error): a ``--smoke`` run covers every section of
its script either way, a data set's section on its first rows, the synthetic
ones at tiny sizes.

.. warning::
   Only the side the machine offers is run: where the data sets exist, the
   path taken without them is checked by :func:`test_data_sets_are_found_through_data_py`
   (every script asks ``_data.py``, whose ``have`` prints the skip line) rather
   than by a second run of every script (which cost the suite ~5 minutes).

The rule (``benchmarks/README.md``): ``--smoke`` means tiny sizes, under 60 s
on the 2-core machine, exit status 0, nothing written to tracked files, no data
set required.  There is no timing assertion here, only a generous timeout.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"
SCRIPTS = sorted(BENCHMARKS.glob("bench_*.py"))
TIMEOUT = 240  # seconds: a smoke run takes well under 60 s on a quiet machine
WATCHED = ("benchmarks", "docs")  # folders whose every file must stay untouched

# each script once, with the data sets where the machine has them: the even-numbered
# scripts here, the odd-numbered ones in test_benchmarks_odd.py.  With ``--dist
# loadfile`` a file runs whole on one xdist worker, and the smoke runs of every script
# (over 17 min cold under load on the 2-core VM) were the suite's longest file: two
# halves, one a worker.
CASES = [pytest.param(p, id=p.stem) for p in SCRIPTS]
EVEN = CASES[0::2]
ODD = CASES[1::2]


def _data() -> Any:
    """``benchmarks/_data.py``, the module every script finds the data sets through."""
    spec = importlib.util.spec_from_file_location("_bench_data", BENCHMARKS / "_data.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
    # the two halves together run every script once
    assert sorted(p.values[0] for p in EVEN + ODD) == SCRIPTS


@pytest.mark.slow
@pytest.mark.timeout(TIMEOUT + 60)
@pytest.mark.parametrize("script", EVEN)
def test_smoke(script: Path) -> None:
    check_smoke(script)


# ``python script --smoke`` as it would run, but with the worker processes forked from a
# forkserver that has imported distributed and daskangel once (as the suite's own clusters,
# ``tests/conftest.py``): a spawned worker imports them again, ~4 s of CPU each on the 2-core
# VM, and the scripts start 2-6 workers each.  The script runs as ``__main__`` with its
# folder first on ``sys.path``, as ``python script`` does.
LAUNCH = """
import runpy, sys
import dask
from distributed.utils import get_mp_context
dask.config.set({"distributed.worker.multiprocessing-method": "forkserver"})
get_mp_context().set_forkserver_preload(["distributed", "daskangel", "daskangel.models"])
script = sys.argv[1]
sys.argv = sys.argv[1:]
sys.path.insert(0, str(__import__("pathlib").Path(script).parent))
runpy.run_path(script, run_name="__main__")
"""


def check_smoke(script: Path) -> None:
    """``script --smoke`` exits 0, prints, and leaves the checkout as it was."""
    env = dict(os.environ)
    before = _files()
    try:
        run = subprocess.run(
            [sys.executable, "-c", LAUNCH, str(script), "--smoke"],
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
    if not _data().data_root().exists() and "data_root" in script.read_text():
        assert "skipped" in run.stdout, f"{script.name}: no 'skipped' line without data{tail}"


def test_data_sets_are_found_through_data_py(tmp_path: Path, capsys: Any) -> None:
    """A script that reads a shared data set finds it through ``_data.py`` (no
    path of its own), whose ``have`` names a missing file and says False."""
    for p in SCRIPTS:
        text = p.read_text()
        assert "shared/data" not in text.replace("../shared/data", ""), p.name
    missing = tmp_path / "no-data" / "a9a"
    assert _data().have(missing) is False
    assert f"skipped: missing {missing}" in capsys.readouterr().out
