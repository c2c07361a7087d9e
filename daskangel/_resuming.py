"""The snapshot a fit resumes from, known before the fit makes its arrays.

``model.fit(..., resume=url)`` runs its fit inside :func:`resuming`.  Every array
the fit's context creates there (until its training job takes the URL,
:func:`take_pending`) asks :func:`stored_layout` for the layout of the snapshot
array it will be loaded from: the array of its name, else the next array of the
snapshot, in creation order, that nothing here holds yet (as
:func:`daskangel.train._resume.match_arrays` pairs them when the job loads the
snapshot).  So a fit resumed on a cluster of another size creates each array
once, cut into blocks as the snapshot's, and the handles the family holds are
the arrays the job loads into; an array whose shape, dtype or kind differs gets
no layout (the job then refuses the snapshot as another model's).

Example
-------
>>> from daskangel._resuming import resuming, take_pending
>>> with resuming("/tmp/ckpt"):
...     take_pending()
'/tmp/ckpt'
>>> take_pending() is None
True
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from . import _snapshot_format as fmt
from .errors import InvalidArgumentError

__all__ = ["check_url", "kind_of", "pending", "resuming", "stored_layout", "take_pending"]


@dataclass
class _Pending:
    """One :func:`resuming` block: its URL and the snapshot arrays already given out."""

    url: str
    taken: set[str] = field(default_factory=set)
    manifest: dict[str, Any] | None = None
    unreadable: bool = False


# the snapshot the next train() in this context resumes from (model.fit(resume=))
_PENDING: ContextVar[_Pending | None] = ContextVar("daskangel_resume", default=None)


def check_url(url: Any) -> None:
    """Refuse anything but a non-empty str as a snapshot URL."""
    if not isinstance(url, str) or not url:
        raise InvalidArgumentError(f"resume: expected a snapshot URL (a str), got {url!r}")


@contextlib.contextmanager
def resuming(url: str | None) -> Iterator[None]:
    """Within the block, the first ``train()`` given no ``resume=`` resumes from
    ``url`` (what ``model.fit(..., resume=url)`` wraps its fit in), and arrays
    created before it take their layouts from the snapshot; ``None``: no-op."""
    if url is None:
        yield
        return
    check_url(url)
    token = _PENDING.set(_Pending(url))
    try:
        yield
    finally:
        _PENDING.reset(token)


def pending() -> bool:
    """Is a :func:`resuming` block waiting for its training job (without taking it)?"""
    return _PENDING.get() is not None


def take_pending() -> str | None:
    """The URL of an enclosing :func:`resuming`, once (a second job starts afresh)."""
    p = _PENDING.get()
    if p is not None:
        _PENDING.set(None)
        return p.url
    return None


def kind_of(info: dict[str, Any]) -> tuple[tuple[int, ...], str, bool]:
    """``(shape as created, dtype, sparse)`` of a manifest's or a meta's array entry."""
    shape = info["shape"]
    return (
        (int(shape[1]),) if int(info.get("ndim", 2)) == 1 else tuple(int(x) for x in shape),
        str(info["dtype"]),
        bool(info["sparse"]),
    )


def _manifest(p: _Pending) -> dict[str, Any] | None:
    if p.manifest is None and not p.unreadable:
        try:
            p.manifest = fmt.resolve(p.url)[1]
        except (FileNotFoundError, KeyError, ValueError, OSError):
            p.unreadable = True  # the job's resume says what is wrong with the URL
    return p.manifest


def stored_layout(
    ps: Any, name: str, kind: tuple[tuple[int, ...], str, bool]
) -> dict[str, Any] | None:
    """The stored layout (a ``Layout.to_dict()``) for the array ``name`` of kind
    ``kind`` (:func:`kind_of`) that ``ps`` is about to create, when a
    :func:`resuming` block is pending and its snapshot holds a matching array;
    else ``None`` (the context's own partitioning)."""
    p = _PENDING.get()
    if p is None:
        return None
    manifest = _manifest(p)
    if manifest is None:
        return None
    infos = manifest["arrays"]
    if name in infos:
        match = name
    else:
        state = manifest.get("job_state") or {}
        have = set(ps.arrays())
        free = [n for n in (state.get("arrays") or infos) if n not in have and n not in p.taken]
        if not free or kind_of(infos[free[0]]) != kind:
            return None  # not the next array of the snapshot (a temporary one): its own layout
        match = free[0]
    p.taken.add(match)
    info = infos[match]
    return dict(info["layout"]) if kind_of(info) == kind else None
