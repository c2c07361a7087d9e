"""A PS server as a Dask actor: the ``"actors"`` transport.

Calls arrive through the worker's ``actor_execute`` handler and run one at a time in
the worker's actor thread; like the comm handler (:mod:`._endpoints`), the actor only
runs the op on a :class:`~._server.PSServer` and returns its reply.

Example
-------
>>> PSServerActor.call.__doc__.split(";")[0]
'Run ``op``'
"""

from __future__ import annotations

import time
from typing import Any

from .._wire import error_reply
from ..errors import BlockBusyError, DaskAngelError
from ._endpoints import count_payload
from ._server import ASYNC_OPS, PSServer

__all__ = ["PSServerActor", "get_worker_loop"]


def get_worker_loop() -> Any:
    from distributed import get_worker

    return get_worker().loop


class PSServerActor:
    """A PS server as a Dask actor (the ``"actors"`` transport).

    Calls arrive through the worker's ``actor_execute`` handler and run one at a
    time in the worker's actor thread, which makes each operation atomic.
    """

    def __init__(self, index: int) -> None:
        from distributed import get_worker

        self.server = PSServer(get_worker().address, index)

    def call(self, op: str, kwargs: dict[str, Any], pad: Any = None) -> Any:
        """Run ``op``; ``pad`` is the alignment frame every call carries (``_wire``)."""
        try:
            return self._call(op, kwargs)
        except DaskAngelError as e:
            return error_reply(e)

    def _call(self, op: str, kwargs: dict[str, Any]) -> Any:
        self.server.check_uid(kwargs)
        if op in ASYNC_OPS:
            from distributed.utils import sync

            reply = sync(get_worker_loop(), ASYNC_OPS[op], self.server, **kwargs)
            count_payload(self.server, op, kwargs, reply)
            return reply
        start = time.perf_counter()
        if self.server.blocked_until(op, kwargs) is not None:
            # the actor thread runs one op at a time and cannot wait for a commit
            raise BlockBusyError(
                f"op {op!r} on array {kwargs.get('array')!r}: a block is held by a psf "
                "update in progress; with transport='actors' writes cannot wait, retry"
            )
        result = self.server.dispatch(op, **kwargs)
        st = self.server.op_stats[op]
        st[0] += 1
        st[1] += time.perf_counter() - start
        count_payload(self.server, op, kwargs, result)
        return result
