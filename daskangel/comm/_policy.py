"""The communication policy of a worker's push path, read from ``daskangel.comm.*``.

Bösen (SoCC'15) spends a fixed network budget between clock boundaries: it sends
the buffered updates that matter most while tokens last, keeps the rest merged,
and flushes everything at the clock boundary (so the staleness bound is that of
plain SSP).  :class:`CommPolicy` is that policy as a value: the budget in bytes
per second (``None``: management off, the default), how updates are chosen
(``"magnitude"``: largest relative change ``|Δ| / (|w| + ε)`` first; ``"random"``:
uniformly at random, the paper's baseline), and the bucket's tick and depth.

Example
-------
>>> import dask
>>> with dask.config.set({"daskangel.comm.budget": "1MiB", "daskangel.comm.policy": "random"}):
...     p = CommPolicy.from_config()
>>> p.on, p.budget, p.policy
(True, 1048576.0, 'random')
>>> CommPolicy.from_config().on
False
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import config
from ..errors import InvalidArgumentError

__all__ = ["POLICIES", "CommPolicy"]

POLICIES = ("magnitude", "random")


def _budget() -> float | None:
    raw = config.get("daskangel.comm.budget")
    if raw is None or raw is False:
        return None
    try:
        b = float(config.get_bytes("daskangel.comm.budget"))
    except InvalidArgumentError:
        raise InvalidArgumentError(
            f"daskangel.comm.budget: expected bytes per second (an int or a string like "
            f"'2MiB') or null for no management, got {raw!r}"
        ) from None
    if not b > 0:
        raise InvalidArgumentError(
            f"daskangel.comm.budget: expected bytes per second > 0 (or null), got {raw!r}"
        )
    return b


@dataclass(frozen=True, slots=True)
class CommPolicy:
    """One worker's communication budget and how it is spent (see module doc)."""

    budget: float | None  # bytes per second; None: off
    policy: str  # "magnitude" or "random"
    interval: float  # seconds between two rounds of budgeted sends
    burst: float  # bucket depth, in seconds of budget
    epsilon: float  # the ε of |Δ| / (|w| + ε)
    min_send: int  # a round sends only once this many bytes of tokens are there
    seed: int | None  # random selection's seed (None: fresh entropy)

    @property
    def on(self) -> bool:
        return self.budget is not None

    @classmethod
    def from_config(cls) -> CommPolicy:
        """The policy the ``daskangel.comm.*`` keys give now (a clear error on a bad one)."""
        policy = config.get("daskangel.comm.policy")
        if policy not in POLICIES:
            raise InvalidArgumentError(
                f"daskangel.comm.policy: expected one of {POLICIES}, got {policy!r}"
            )
        interval = config.get_seconds("daskangel.comm.interval")
        if not 0 < interval < float("inf"):
            raise InvalidArgumentError(
                f"daskangel.comm.interval: expected a duration > 0, got {interval!r}"
            )
        burst = config.get_seconds("daskangel.comm.burst")
        if not burst >= interval:
            raise InvalidArgumentError(
                f"daskangel.comm.burst: expected a duration >= daskangel.comm.interval "
                f"({interval} s), got {burst!r}"
            )
        eps = float(config.get("daskangel.comm.epsilon"))
        if not eps > 0:
            raise InvalidArgumentError(f"daskangel.comm.epsilon: expected > 0, got {eps!r}")
        seed = config.get("daskangel.comm.seed")
        return cls(
            budget=_budget(),
            policy=str(policy),
            interval=float(interval),
            burst=float(burst),
            epsilon=eps,
            min_send=int(config.get_bytes("daskangel.comm.min-send-bytes")),
            seed=None if seed is None else int(seed),
        )
