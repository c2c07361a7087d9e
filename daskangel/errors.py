"""Every error daskangel raises.

Each class derives from :class:`DaskAngelError` *and* from the builtin exception a
Python user would expect (``IndexError`` for a bad index, ``ValueError`` for a bad
value, ...), so both ``except daskangel.errors.PSIndexError`` and ``except
IndexError`` work.

Errors raised on a PS server travel back to the caller through Dask's comms, which
pickle them; every class therefore keeps its message as its only ``args`` entry.

Example
-------
>>> from daskangel.errors import PSIndexError
>>> try:
...     raise PSIndexError("rows: index 7 is out of range [0, 4)")
... except IndexError as e:
...     print(e)
rows: index 7 is out of range [0, 4)
"""

from __future__ import annotations

__all__ = [
    "ArrayExistsError",
    "ArrayNotFoundError",
    "BlockBusyError",
    "BlockMovingError",
    "CastingError",
    "CommBudgetWarning",
    "ContextClosedError",
    "DaskAngelError",
    "DivergedError",
    "HandoffError",
    "InvalidArgumentError",
    "InvalidStateError",
    "InvalidTypeError",
    "JobAbortedError",
    "KeyListMissingError",
    "MalformedInputError",
    "MissingDependencyError",
    "NonFiniteError",
    "NotCoPartitionedError",
    "PSFError",
    "PSFNotAllowedError",
    "PSIndexError",
    "RequestTooLargeError",
    "RolledBackError",
    "ServerLostError",
    "ShapeMismatchError",
    "ServerMemoryError",
    "SnapshotAbandonedError",
    "SnapshotError",
    "StaleLayoutError",
    "SyncError",
    "TaskFailedError",
    "TaskMovedError",
    "UnknownNameError",
]


class DaskAngelError(Exception):
    """Base class of every daskangel error."""

    def __str__(self) -> str:  # KeyError would otherwise print the repr
        return str(self.args[0]) if self.args else self.__class__.__name__


class InvalidArgumentError(DaskAngelError, ValueError):
    """An argument has a value outside what the function accepts (the message names it)."""


class InvalidTypeError(DaskAngelError, TypeError):
    """An argument has the wrong type (the message names it and the type that came)."""


class InvalidStateError(DaskAngelError, RuntimeError):
    """The object is not in a state that allows the call (e.g. a lazy Dataset read)."""


class UnknownNameError(DaskAngelError, KeyError):
    """A name (optimiser, psf, rule) is not registered."""


class PSIndexError(DaskAngelError, IndexError):
    """An index is out of range, negative or not an integer."""


class ShapeMismatchError(DaskAngelError, ValueError):
    """Values do not have the shape the request implies."""


class CastingError(DaskAngelError, TypeError):
    """Values would have to be cast to the array's dtype against the casting rule."""


class DivergedError(DaskAngelError, FloatingPointError):
    """Training diverged: the loss or the weights became infinite or NaN (the message
    names the parameter to lower); the model is left unfitted."""


class NonFiniteError(DaskAngelError, ValueError):
    """Values contain NaN or infinity and ``on_nonfinite='raise'``."""


class ArrayNotFoundError(DaskAngelError, KeyError):
    """No array of that name is registered."""


class ArrayExistsError(DaskAngelError, ValueError):
    """An array of that name already exists."""


class RequestTooLargeError(DaskAngelError, ValueError):
    """A request is larger than ``daskangel.client.max-request-bytes``."""


class ContextClosedError(DaskAngelError, RuntimeError):
    """The PSContext that owned the array has been closed."""


class ServerLostError(DaskAngelError, ConnectionError):
    """A PS server holding blocks is gone and cannot be rebuilt."""


class StaleLayoutError(DaskAngelError, LookupError):
    """A server does not hold the block the caller asked for (layout moved)."""


class BlockMovingError(StaleLayoutError):
    """A server is handing the block to another server (a worker is leaving or the
    blocks are rebalanced); the caller waits for the new routing and resends."""


class NotCoPartitionedError(DaskAngelError, ValueError):
    """A binary psf was given arrays whose block layouts differ."""


class PSFError(DaskAngelError, RuntimeError):
    """A PS function failed on a server; the message carries the remote traceback."""


class PSFNotAllowedError(PSFError):
    """A psf would have to travel as a pickled callable and that is not allowed.

    Servers only run psfs addressed by importable name unless the config key
    ``daskangel.ops.allow-pickled-psf`` is true (on the caller and on the workers).
    (Not a ``PermissionError``: that is an ``OSError``, which callers read as a
    lost server.)
    """


class BlockBusyError(DaskAngelError, RuntimeError):
    """A block is held by a two-phase psf update that has prepared but not committed."""


class SyncError(DaskAngelError, RuntimeError):
    """A clock or synchronisation request was invalid (unknown job, task, ...)."""


class JobAbortedError(SyncError):
    """The training job was stopped (another task failed, or it was cancelled)."""


class RolledBackError(JobAbortedError):
    """A write made by a run of a training job that has since rolled back to a
    snapshot: the servers refuse it, so nothing of the abandoned run lands on the
    restored state (the task that made it ends, as any task of a stopped run)."""


class TaskMovedError(SyncError):
    """A slow training task was stopped at a clock boundary to be restarted on
    another worker (``daskangel.train.reschedule-slow``); the driver resubmits it."""


class KeyListMissingError(DaskAngelError, LookupError):
    """A PS server no longer holds the key list a pruned pull refers to by tag."""


class TaskFailedError(DaskAngelError, RuntimeError):
    """A training task raised; the message names the task and has its traceback."""


class HandoffError(InvalidStateError):
    """A leaving worker's blocks cannot be moved (no other server can take them, or
    the move failed); the worker is not retired and nothing is lost."""


class SnapshotError(DaskAngelError, OSError):
    """A snapshot is missing, incomplete or does not match what is loaded into."""


class SnapshotAbandonedError(SnapshotError):
    """A snapshot was given up because an array it wrote was dropped meanwhile;
    no version of it is left behind."""


class MalformedInputError(DaskAngelError, ValueError):
    """An input line could not be parsed (file, line number and reason given)."""


class MissingDependencyError(DaskAngelError, ImportError):
    """An optional package needed for this input (e.g. ``zstandard``) is not installed."""


class ServerMemoryError(DaskAngelError, MemoryError):
    """An array's blocks would not fit the memory limits of the workers holding them."""

    def __reduce__(self) -> tuple[type, tuple]:  # type: ignore[type-arg]
        # MemoryError's default reduction cannot rebuild a subclass (tblib, Dask)
        return (type(self), self.args)


class CommBudgetWarning(UserWarning):
    """``daskangel.comm.budget`` is below what a clock boundary needs (the message has
    the figures); the boundary flush still sends everything."""
