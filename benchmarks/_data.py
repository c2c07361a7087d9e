"""Where the benchmarks find the shared data sets, and how they say one is absent.

``data_root()`` is ``$DASKANGEL_DATA`` when set, else ``../shared/data`` from the
project root (``/work/shared/data`` as a last resort, for a worktree nested
deeper).  A benchmark never fails for a missing data set: it prints a line
naming the missing file (``have``) and skips that section.  ``--smoke`` runs
(``tests/test_benchmarks.py``) take the data sets where the machine has them.

Example
-------
>>> have(Path("/nonexistent/a9a"))
  skipped: missing /nonexistent/a9a (see ../shared/data/README.md)
False
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["data_root", "have"]

_HERE = Path(__file__).resolve().parent


def data_root() -> Path:
    """The folder holding the shared data sets (which may not exist)."""
    env = os.environ.get("DASKANGEL_DATA")
    if env:
        return Path(env)
    root = _HERE.parent.parent / "shared" / "data"
    if not root.exists() and Path("/work/shared/data").exists():
        return Path("/work/shared/data")
    return root


def have(*paths: Path) -> bool:
    """True when every path exists; otherwise print which are missing and say False."""
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        print(f"  skipped: missing {', '.join(missing)} (see ../shared/data/README.md)")
    return not missing
