"""Pending results of the ``*_async`` calls: :class:`PSFuture` and its finishers.

A ``PSFuture`` wraps the ``concurrent.futures.Future`` of the servers' replies and
the work left to the caller (assembling a get, putting rows planned sorted back in
request order), done once, in the thread that asks for the result.

Example
-------
>>> f = done_future()
>>> f.done(), f.result()
(True, None)
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["PSFuture", "done_future", "in_order"]


class PSFuture:
    """The pending result of an ``*_async`` call.

    ``result()`` waits for the servers and finishes the work (assembling a get)
    in the calling thread.
    """

    def __init__(self, fut: concurrent.futures.Future[Any], finish: Callable[[Any], Any]) -> None:
        self._fut = fut
        self._finish = finish
        self._done = False
        self._value: Any = None

    def done(self) -> bool:
        return self._fut.done()

    def result(self, timeout: float | None = None) -> Any:
        if not self._done:
            self._value = self._finish(self._fut.result(timeout))
            self._done = True
        return self._value

    def exception(self, timeout: float | None = None) -> BaseException | None:
        return self._fut.exception(timeout)


def in_order(
    finish: Callable[[Any], np.ndarray], order: np.ndarray | None
) -> Callable[[Any], np.ndarray]:
    """``finish``, then the rows of a get planned sorted (:func:`sort_rows`) back in
    request order (one scatter)."""
    if order is None:
        return finish

    def scatter(results: Any) -> np.ndarray:
        srt = finish(results)
        out = np.empty_like(srt)
        out[order] = srt
        return out

    return scatter


def done_future() -> PSFuture:
    """A future already done, whose result is None (a write with nothing to send)."""
    f: concurrent.futures.Future[Any] = concurrent.futures.Future()
    f.set_result(None)
    return PSFuture(f, lambda _: None)
