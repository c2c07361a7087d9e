"""daskangel/_exit.py: a process that imported daskangel freezes its objects at exit.

Each case is a real interpreter that ends: an ``atexit`` handler registered before
``import daskangel`` runs after daskangel's (handlers run last-in, first-out) and
prints how many objects the garbage collector holds frozen by then.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.timeout(120)

SCRIPT = """
import atexit, gc
atexit.register(lambda: print("frozen", gc.get_freeze_count()))
import daskangel
cycles = [[None] for _ in range(1000)]
for c in cycles:
    c[0] = c  # objects only a full collection could free
print("ran")
"""


def _frozen(env: dict[str, str]) -> int:
    run = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert run.returncode == 0, run.stderr
    lines = run.stdout.split()
    assert lines[:1] == ["ran"], run.stdout
    return int(lines[lines.index("frozen") + 1])


def test_objects_alive_at_exit_are_frozen_unless_configured_off() -> None:
    assert _frozen({}) > 1000  # the cycles and everything imported
    assert _frozen({"DASK_DASKANGEL__EXIT__FREEZE_GC": "False"}) == 0
