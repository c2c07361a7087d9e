"""What every deployment shares: resource names and worker command lines.

Example
-------
>>> worker_args("ps")
['--resources', 'daskangel-ps=1']
>>> scheduler_command()
['dask', 'scheduler', '--host', '0.0.0.0', '--preload', 'daskangel']
"""

from __future__ import annotations

from ..errors import InvalidArgumentError

__all__ = [
    "CHECK_INSTALLED",
    "PS_RESOURCE",
    "ROLES",
    "TRAIN_RESOURCE",
    "scheduler_command",
    "worker_args",
]

#: The worker resource that marks a PS server worker: ``PSContext(resource=PS_RESOURCE)``.
PS_RESOURCE = "daskangel-ps"
#: The worker resource that marks a trainer (``train_on=TRAIN_RESOURCE``).
TRAIN_RESOURCE = "daskangel-train"
ROLES = ("ps", "trainer")
#: A shell line that stops a job early, with Python's own message, if daskangel is missing.
CHECK_INSTALLED = "python -c 'import daskangel' || exit 1"


def worker_args(role: str) -> list[str]:
    """Extra ``dask worker`` arguments for a worker of ``role`` (``"ps"`` / ``"trainer"``)."""
    if role not in ROLES:
        raise InvalidArgumentError(f"role: expected one of {ROLES}, got {role!r}")
    resource = PS_RESOURCE if role == "ps" else TRAIN_RESOURCE
    return ["--resources", f"{resource}=1"]


def scheduler_command(host: str = "0.0.0.0") -> list[str]:
    """``dask scheduler`` that imports daskangel at start-up (fails fast if it is missing)."""
    return ["dask", "scheduler", "--host", host, "--preload", "daskangel"]
