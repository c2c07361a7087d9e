"""A process that ran daskangel ends without collecting every object still alive.

When a Python process ends, the interpreter clears its modules and runs full
garbage collections over every object still alive.  A process that has fitted a
model holds hundreds of thousands of them (numba dispatchers and their type
caches, Dask's and daskangel's state): after a small ``LogisticRegression`` fit,
320,000 objects and 3.3 s from the end of the script to the process's exit on a
busy machine, 0.9 s with them frozen.  A Dask worker process took longer than its
nanny waits (4 s) and was killed ("Worker process still alive after 4.0 seconds,
killing"), at the close of every cluster that had trained.

On exit (an ``atexit`` handler registered when daskangel is imported), the objects
alive are moved to the permanent generation (:func:`gc.freeze`), which those
collections skip; the memory goes back to the system with the process.
``daskangel.exit.freeze-gc: false`` keeps Python's own behaviour.

.. warning::
   Objects in reference cycles still alive at exit are then not finalized (their
   ``__del__`` and weakref callbacks do not run), which Python does not guarantee
   either; objects freed by reference counting as modules are cleared still are.

Example
-------
>>> from daskangel import _exit
>>> _exit.freeze_at_exit()  # what the atexit handler does  # doctest: +SKIP
"""

from __future__ import annotations

import atexit
import gc

from . import config

__all__ = ["freeze_at_exit"]


def freeze_at_exit() -> None:
    """Freeze the objects alive (unless ``daskangel.exit.freeze-gc`` is false), so the
    interpreter's last garbage collections skip them."""
    if config.get("daskangel.exit.freeze-gc"):
        gc.freeze()


atexit.register(freeze_at_exit)
