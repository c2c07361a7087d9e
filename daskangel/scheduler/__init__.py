"""Control plane: the scheduler plugin and the services it owns.

Nothing here imports ``daskangel.psarray``: the two planes meet in
``daskangel.context``.
"""

from __future__ import annotations

from ._placement import place_blocks
from ._plugin import PLUGIN_NAME, DaskAngelSchedulerPlugin
from ._registry import ArrayRegistry

__all__ = ["PLUGIN_NAME", "ArrayRegistry", "DaskAngelSchedulerPlugin", "place_blocks"]
