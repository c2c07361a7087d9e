"""daskangel/_exit.py: a process that imported daskangel freezes its objects at exit.

A real interpreter that ends: an ``atexit`` handler registered before ``import
daskangel`` runs after daskangel's (handlers run last-in, first-out) and prints how
many objects the garbage collector holds frozen by then.  The switch is checked on
the handler itself, in this process.
"""

from __future__ import annotations

import gc
import subprocess
import sys

import dask
import pytest

from daskangel._exit import freeze_at_exit

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


def test_objects_alive_at_exit_are_frozen() -> None:
    run = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=100
    )
    assert run.returncode == 0, run.stderr
    lines = run.stdout.split()
    assert lines[:1] == ["ran"], run.stdout
    assert int(lines[lines.index("frozen") + 1]) > 1000  # the cycles and everything imported


def test_the_handler_freezes_nothing_when_configured_off() -> None:
    before = gc.get_freeze_count()
    with dask.config.set({"daskangel.exit.freeze-gc": False}):
        freeze_at_exit()
    assert gc.get_freeze_count() == before
