"""Managed communication (Bösen): a per-worker byte budget and prioritised pushes.

Off by default; ``daskangel.comm.budget`` (bytes per second) turns it on.  The
push path (:mod:`daskangel.psarray._budgeted`) uses these pieces: the policy read
from ``daskangel.comm.*`` (:class:`CommPolicy`), the token bucket and traffic
counters (:class:`TokenBucket`, :class:`CommStats`) and the selection rules
(:func:`priorities`, :func:`select`); :func:`configure` sets the keys on a
running cluster's workers.
"""

from __future__ import annotations

from ._bucket import CommStats, TokenBucket
from ._configure import configure
from ._policy import POLICIES, CommPolicy
from ._select import priorities, select

__all__ = [
    "POLICIES",
    "CommPolicy",
    "CommStats",
    "TokenBucket",
    "configure",
    "priorities",
    "select",
]
