"""The transport seam: how a caller reaches one PS server.

Two transports exist, chosen per context with ``PSContext(transport=...)``:

* ``"handlers"`` (default): the worker runs a ``daskangel_ps`` comm handler installed
  by a WorkerPlugin; a call is one request/response on a pooled Dask comm, numpy
  arrays travel as zero-copy frames.
* ``"actors"``: each server is a Dask actor; a call goes through the worker's
  ``actor_execute`` handler and runs in the worker's single actor thread.

``benchmarks/bench_ps.py`` measures both; see ``benchmarks/RESULTS.md``.  Both the
data plane and the scheduler plugin use this module, which imports neither.

Example
-------
>>> actor_key("tcp://127.0.0.1:4000", 1)
'daskangel-ps-actor-tcp://127.0.0.1:4000-1'
"""

from __future__ import annotations

from typing import Any

import numpy as np
from distributed.protocol import to_serialize

from .errors import InvalidArgumentError

__all__ = ["TRANSPORTS", "actor_key", "call_server", "error_reply", "wrap_arrays"]

_ERROR_KEY = "__daskangel_error__"


def error_reply(e: BaseException) -> dict[str, str]:
    """A daskangel error as plain values, so any receiver (even the scheduler,
    which does not unpickle) re-raises it with its class and message."""
    return {_ERROR_KEY: type(e).__name__, "message": str(e)}


def _raise_if_error(reply: Any) -> Any:
    if isinstance(reply, dict) and _ERROR_KEY in reply:
        from . import errors

        cls = getattr(errors, str(reply[_ERROR_KEY]), errors.DaskAngelError)
        raise cls(reply["message"])
    return reply


TRANSPORTS = ("handlers", "actors")


def actor_key(address: str, index: int) -> str:
    """The Dask key of the actor serving ``(address, index)``."""
    return f"daskangel-ps-actor-{address}-{index}"


def wrap_arrays(obj: Any) -> Any:
    """Mark every numpy array in a message for zero-copy framing by Dask's comms."""
    if isinstance(obj, np.ndarray):
        return to_serialize(obj)
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, dict):
        return {k: wrap_arrays(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [wrap_arrays(v) for v in obj]
    return obj


async def call_server(
    rpc: Any, address: str, index: int, op: str, transport: str, cost: int, kwargs: dict[str, Any]
) -> Any:
    """Run ``op`` on server ``(address, index)`` over ``rpc`` (a ConnectionPool)."""
    if transport == "handlers":
        return _raise_if_error(
            await rpc(address).daskangel_ps(
                ps_op=op, server=index, cost=cost, **wrap_arrays(kwargs)
            )
        )
    if transport == "actors":
        resp = await rpc(address).actor_execute(
            actor=actor_key(address, index),
            function="call",
            args=[to_serialize(op), to_serialize(kwargs)],
            kwargs={},
        )
        if resp["status"] == "error":
            exc = resp["exception"]
            raise exc if isinstance(exc, BaseException) else RuntimeError(str(exc))
        return _raise_if_error(resp["result"])
    raise InvalidArgumentError(f"transport: expected one of {TRANSPORTS}, got {transport!r}")
