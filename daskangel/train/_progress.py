"""The training progress bar: on where a person watches, counting epochs.

``progress="auto"`` (every estimator's default) shows a bar when a person is
watching — stderr is a terminal, or the code runs in a Jupyter kernel — and
nothing in batch logs, CI and captured test output.  The bar counts what the
caller names (``unit="epoch"``: the slowest task's completed epochs, so it never
runs ahead of what the model has seen), shows the latest mean metrics, and stays on
screen when training ends.  In Jupyter it is one widget bar (``ipywidgets``, the
``notebook`` extra); without ipywidgets it falls back to one text bar redrawn only
when its count changes (tqdm's widget-less fallback wrote a new output per refresh).

Example
-------
>>> resolve_progress(True), resolve_progress(False)
(True, False)
>>> resolve_progress("auto") in (True, False)
True
"""

from __future__ import annotations

import sys
from typing import Any

from ..errors import InvalidArgumentError

__all__ = ["Bar", "in_notebook", "resolve_progress"]


def in_notebook() -> bool:
    """True inside a Jupyter (IPython kernel) session."""
    ip_mod = sys.modules.get("IPython")
    if ip_mod is None:
        return False
    try:
        ip = ip_mod.get_ipython()
    except Exception:  # noqa: BLE001 - an odd IPython: treat as no notebook
        return False
    return ip is not None and "IPKernelApp" in getattr(ip, "config", {})


def resolve_progress(progress: Any) -> bool:
    """``True`` / ``False`` as given; ``"auto"`` (or ``None``): is a person watching?"""
    if isinstance(progress, bool):
        return progress
    if progress is None or progress == "auto":
        stream = sys.stderr
        tty = bool(getattr(stream, "isatty", lambda: False)())
        return tty or in_notebook()
    raise InvalidArgumentError(f"progress: expected True, False or 'auto', got {progress!r}")


def _widgets() -> bool:
    try:
        import ipywidgets  # noqa: F401
    except ImportError:
        return False
    return True


class Bar:
    """A tqdm bar over ``total`` units of ``clocks_per_unit`` clocks each."""

    def __init__(self, total_clocks: int | None, unit: str, clocks_per_unit: int, desc: str):
        self.per = max(1, int(clocks_per_unit))
        self.unit = unit
        total = None if not total_clocks else -(-int(total_clocks) // self.per)
        notebook = in_notebook()
        self.sparse_redraw = notebook and not _widgets()
        if notebook and not self.sparse_redraw:
            from tqdm.notebook import tqdm
        else:
            from tqdm.std import tqdm
        self.bar = tqdm(total=total, desc=desc, unit=unit, leave=True, dynamic_ncols=True)
        self._shown = -1

    def update(self, clocks: list[int], metrics: dict[str, Any]) -> None:
        """Show the slowest task's completed units and the latest metrics."""
        done = (min(clocks) if clocks else 0) // self.per
        if self.bar.total is not None:
            done = min(done, int(self.bar.total))
        if self.sparse_redraw and done == self._shown:
            return
        self._shown = done
        self.bar.n = done
        if metrics:
            self.bar.set_postfix(metrics, refresh=False)
        self.bar.refresh()

    def close(self) -> None:
        self.bar.close()
