"""Set the communication budget on a running cluster's workers (and here).

``dask.config.set`` in the client reaches worker processes only when they start;
:func:`configure` sets ``daskangel.comm.*`` on every worker now (each worker's
push path picks a change up at its next increment), and in this process.

Example
-------
>>> configure(client, budget="2MiB", policy="random")   # doctest: +SKIP
>>> configure(client, budget=None)                      # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

import dask

from ._policy import CommPolicy

__all__ = ["configure"]

_UNSET: Any = object()


def _apply(keys: dict[str, Any]) -> None:
    dask.config.set(keys)


def configure(
    client: Any,
    budget: Any = _UNSET,
    policy: Any = _UNSET,
    **more: Any,
) -> CommPolicy:
    """Set ``daskangel.comm.*`` keys on every worker of ``client`` and locally.

    ``budget`` (bytes per second, e.g. ``"4MiB"``, or ``None``: off), ``policy``
    (``"magnitude"`` or ``"random"``) and any other key of the section by its name
    with ``_`` for ``-`` (``min_send_bytes=...``).  The values are checked here
    first (a bad one raises and nothing changes); returns the policy they give.
    """
    keys: dict[str, Any] = {}
    if budget is not _UNSET:
        keys["daskangel.comm.budget"] = budget
    if policy is not _UNSET:
        keys["daskangel.comm.policy"] = policy
    for k, v in more.items():
        keys[f"daskangel.comm.{k.replace('_', '-')}"] = v
    with dask.config.set(keys):
        out = CommPolicy.from_config()  # validates before anything is set anywhere
    client.run(_apply, keys)
    _apply(keys)
    return out
