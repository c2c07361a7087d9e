"""Control plane: the scheduler plugin and the services it owns.

Nothing here imports ``daskangel.psarray``: the two planes meet in
``daskangel.context``.  ``_clock_rule`` (who may proceed, given the clock table)
has no Dask in it at all.
"""

from __future__ import annotations

from ._clock_rule import ASP, BSP, SSP, ClockTable, Sync, as_sync, may_proceed, read_floor
from ._clocks import ClockService, Job
from ._dashboard import register_dashboard
from ._groups import GroupService
from ._placement import place_blocks
from ._plugin import PLUGIN_NAME, DaskAngelSchedulerPlugin
from ._registry import ArrayRegistry
from ._status import StatusService

__all__ = [
    "ASP",
    "BSP",
    "PLUGIN_NAME",
    "SSP",
    "ArrayRegistry",
    "ClockService",
    "ClockTable",
    "DaskAngelSchedulerPlugin",
    "GroupService",
    "Job",
    "StatusService",
    "Sync",
    "as_sync",
    "may_proceed",
    "place_blocks",
    "read_floor",
    "register_dashboard",
]
