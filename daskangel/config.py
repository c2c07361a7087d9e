"""daskangel's configuration, as ``dask.config`` keys under ``daskangel.``.

The defaults live in ``daskangel/daskangel.yaml`` and are merged into dask's
configuration when daskangel is imported (on the client and on every worker that
unpickles a daskangel object), so tests and users shrink any interval with
``dask.config.set({"daskangel.client.call-timeout": "5s"})``.

Example
-------
>>> import daskangel.config as cfg
>>> cfg.get_bytes("daskangel.server.inline-bytes") > 0
True
"""

from __future__ import annotations

import copy
import os
from typing import Any

import dask.config
import yaml
from dask.utils import parse_bytes, parse_timedelta

__all__ = ["get", "get_bytes", "get_seconds"]

_fn = os.path.join(os.path.dirname(__file__), "daskangel.yaml")
with open(_fn) as _f:
    _defaults = yaml.safe_load(_f)

dask.config.update_defaults(_defaults)


# {key: its levels}: the hot paths read a dozen keys a call
_paths: dict[str, tuple[str, ...]] = {}


def _get(key: str) -> Any:
    # every level under its own name first: dask.config.set and update store a
    # key under the name it already has (canonical_name), so this finds what
    # dask.config.get would, without canonicalising each level (a random-row
    # get reads ~10 keys: 0.7 us a key here, several on a loaded machine)
    path = _paths.get(key)
    if path is None:
        path = _paths.setdefault(key, tuple(key.split(".")))
    d: Any = dask.config.config
    try:
        for k in path:
            d = d[k]
        return d
    except (KeyError, TypeError):
        pass
    try:
        return dask.config.get(key)
    except KeyError:
        # ``import daskangel`` inside ``with dask.config.set({"daskangel...": ...})``:
        # leaving the block drops every daskangel key (they did not exist when it was
        # entered); merge the defaults back under what is set now
        dask.config.update(dask.config.config, copy.deepcopy(_defaults), priority="old")
        return dask.config.get(key)


def get(key: str) -> Any:
    """Return the value of a ``daskangel.*`` key."""
    return _get(key)


# {(key, raw_value): parsed} so hot paths do not re-parse "16MiB" on every call
_parsed: dict[tuple[str, Any], float] = {}


def get_bytes(key: str) -> int:
    """Return a byte-size key (``"16MiB"`` or an int) as an int."""
    value = _get(key)
    try:
        return int(_parsed[(key, value)])
    except (KeyError, TypeError):
        try:
            out = int(parse_bytes(value)) if isinstance(value, str) else int(value)
        except (ValueError, TypeError):
            from .errors import InvalidArgumentError

            raise InvalidArgumentError(
                f"{key}: expected a byte size (an int or a string like '16MiB'), got {value!r}"
            ) from None
        if len(_parsed) < 4096:
            _parsed[(key, value)] = out
        return out


def get_seconds(key: str) -> float:
    """Return a duration key (``"30s"`` or a number of seconds) as a float."""
    value = _get(key)
    try:
        return _parsed[(key, value)]
    except (KeyError, TypeError):
        parsed = parse_timedelta(value, default="seconds")
        out = float(parsed) if parsed is not None else float("inf")
        if len(_parsed) < 4096:
            _parsed[(key, value)] = out
        return out
