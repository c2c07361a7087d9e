"""Saving and loading any model: the snapshot layer for arrays, JSON for the rest.

``model.save(url)`` writes the model's PS arrays (weights, optimiser state,
topic or factor matrices ...) with ``ps.save(url)`` — a zarr v3 group readable
without daskangel (see ``docs/snapshot-format.md``) — and
``url/daskangel-model.json``: the estimator's class, its parameters, the
family's ``_arrays`` dict (which array plays which part), its ``_saved`` fitted
attributes (``n_features_in_``, the epoch clock ``t_``, ``classes_`` ...) and
``history_``.  :func:`load` rebuilds the estimator and its arrays in a new (or
the given) :class:`~daskangel.PSContext`; training it again continues from the
saved clock (learning-rate schedules, FTRL / AdaGrad / Adam state).

Example
-------
>>> clf.save("s3://bucket/models/ctr")                            # doctest: +SKIP
>>> clf2 = angel.models.load("s3://bucket/models/ctr")            # doctest: +SKIP
>>> (clf2.predict(X) == clf.predict(X)).all()                     # doctest: +SKIP
True
"""

from __future__ import annotations

import importlib
import json
import uuid
from typing import Any

import numpy as np

from ...errors import InvalidArgumentError, SnapshotError

__all__ = ["FORMAT", "MODEL_FILE", "array_names", "load", "rename_arrays", "save_model"]

FORMAT = 2
MODEL_FILE = "daskangel-model.json"
PUBLIC = "daskangel.models"  # saved class paths name the public module when they can


def array_names(arrays: Any, skip: tuple[str, ...] = ("rule",)) -> list[str]:
    """The string values of a nested ``_arrays`` dict (keys in ``skip`` are not names)."""
    if isinstance(arrays, str):
        return [arrays]
    if isinstance(arrays, dict):
        return [n for k, v in arrays.items() if k not in skip for n in array_names(v, skip)]
    if isinstance(arrays, (list, tuple)):
        return [n for v in arrays for n in array_names(v, skip)]
    return []


def rename_arrays(arrays: Any, new: dict[str, str], skip: tuple[str, ...] = ("rule",)) -> Any:
    """``arrays`` with every name replaced by ``new[name]`` (others kept)."""
    if isinstance(arrays, str):
        return new.get(arrays, arrays)
    if isinstance(arrays, dict):
        return {k: v if k in skip else rename_arrays(v, new, skip) for k, v in arrays.items()}
    if isinstance(arrays, (list, tuple)):
        return [rename_arrays(v, new, skip) for v in arrays]
    return arrays


def _plain(v: Any) -> Any:
    """A parameter or fitted attribute as JSON (numpy arrays keep their dtype)."""
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.floating):
        return float(v)
    if isinstance(v, np.bool_):
        return bool(v)
    if isinstance(v, np.ndarray):
        return {"__ndarray__": v.tolist(), "dtype": v.dtype.str}
    if isinstance(v, tuple):
        return [_plain(x) for x in v]
    return v


def _unplain(v: Any) -> Any:
    if isinstance(v, dict) and "__ndarray__" in v:
        return np.asarray(v["__ndarray__"], dtype=np.dtype(v["dtype"]))
    return v


def _class_path(cls: type) -> str:
    public = importlib.import_module(PUBLIC)
    if getattr(public, cls.__qualname__, None) is cls:
        return f"{PUBLIC}:{cls.__qualname__}"
    return f"{cls.__module__}:{cls.__qualname__}"


def save_model(est: Any, url: str) -> None:
    """Write ``est`` (fitted, with its arrays on a PS) to ``url``."""
    from sklearn.utils.validation import check_is_fitted

    check_is_fitted(est, getattr(est, "_fitted_marker", "n_features_in_"))
    if not est._on_ps():
        raise InvalidArgumentError(
            f"{type(est).__name__}: its arrays are not on a PS (unpickled or closed); "
            "fit it (warm_start=True keeps the learned values) before saving"
        )
    est._ps.save(url, arrays=est._array_names())
    params = {k: _plain(v) for k, v in est.get_params().items() if k not in ("client", "ps")}
    hist = getattr(est, "history_", None)
    doc = {
        "format": FORMAT,
        "class": _class_path(type(est)),
        "params": params,
        "attrs": {a: _plain(getattr(est, a)) for a in est._saved if hasattr(est, a)},
        "history": None if hist is None else json.loads(hist.to_json(orient="records")),
        "arrays": est._arrays,
    }
    from ..._snapshot_format import fs_and_path

    fs, path = fs_and_path(url)
    with fs.open(f"{path}/{MODEL_FILE}", "w") as f:
        json.dump(doc, f, indent=1)


def _from_format_1(doc: dict[str, Any]) -> dict[str, Any]:
    """A linear model saved before the families shared this format."""
    attrs: dict[str, Any] = {
        "n_features_in_": doc["n_features_in"],
        "t_": doc["t"],
        "n_iter_": doc["n_iter"],
    }
    if doc.get("classes") is not None:
        attrs["classes_"] = {"__ndarray__": doc["classes"], "dtype": doc["classes_dtype"]}
    return {**doc, "format": FORMAT, "attrs": attrs}


def _read(url: str) -> dict[str, Any]:
    from ..._snapshot_format import fs_and_path

    fs, path = fs_and_path(url)
    try:
        with fs.open(f"{path}/{MODEL_FILE}", "r") as f:
            doc: dict[str, Any] = json.load(f)
    except FileNotFoundError:
        raise SnapshotError(f"url: {url!r} holds no saved daskangel model ({MODEL_FILE})") from None
    if doc.get("format") == 1:
        return _from_format_1(doc)
    if doc.get("format") != FORMAT:
        raise SnapshotError(
            f"url: {url!r} has model format {doc.get('format')!r}, expected {FORMAT}"
        )
    return doc


def _is_base(c: type) -> bool:
    """``c`` is :class:`PSEstimator` (by name: ``_estimator`` imports this module)."""
    return c.__module__ == f"{__package__}._estimator" and c.__qualname__ == "PSEstimator"


def _class(path: str, url: str) -> type:
    """The estimator class a saved model names, only if it is one of daskangel's.

    A model file is data: loading one must not import or call anything else
    (``"os:system"`` would otherwise run with the saved parameters).  Only
    modules under ``daskangel.models`` are imported, and only subclasses of
    :class:`PSEstimator` are accepted.
    """
    mod, _, qual = path.partition(":")
    if mod != PUBLIC and not mod.startswith(PUBLIC + "."):
        raise SnapshotError(
            f"url: {url!r} names the class {path!r}; only daskangel.models estimators are "
            "loaded from a model file (was it written by daskangel?)"
        )
    cls: Any = None
    if "." not in qual and qual.isidentifier():
        try:
            cls = getattr(importlib.import_module(mod), qual, None)
        except ImportError:
            cls = None
        if cls is None:  # saved by an older layout (e.g. daskangel.models._estimators)
            cls = getattr(importlib.import_module(PUBLIC), qual, None)
    if not (isinstance(cls, type) and any(map(_is_base, cls.__mro__[1:]))):
        raise SnapshotError(
            f"url: {url!r} holds a {path!r}, which is not a daskangel estimator known here"
        )
    return cls


def load(url: str, client: Any = None, ps: Any = None) -> Any:
    """A model saved with ``model.save(url)``, its arrays on a new (or the given) PS context.

    Loading the same model twice into one cluster gives the second copy fresh
    array names (the stored arrays are loaded under them; arrays that shared a
    layout stay co-placed, as optimiser state must be with its weights).
    """
    import pandas as pd

    doc = _read(url)
    cls = _class(doc["class"], url)
    est = cls(**{k: _unplain(v) for k, v in doc["params"].items()}, client=client, ps=ps)
    for a, v in doc["attrs"].items():
        setattr(est, a, _unplain(v))
    if doc["history"] is not None:
        est.history_ = pd.DataFrame(doc["history"])
    if client is None and ps is None:
        from distributed import default_client

        client = default_client()
    ctx = est._context(client if ps is None else ps.client)
    est._arrays = doc["arrays"]
    names = est._array_names()
    taken = set(ctx.arrays(every_context=True)) & set(names)
    rename = None
    if taken:  # the saved model is loaded already: same values, fresh names
        tag = uuid.uuid4().hex[:6]
        rename = {n: f"{n}-{tag}" for n in names}
        est._arrays = rename_arrays(doc["arrays"], rename, est._not_names)
    ctx.load(url, arrays=names, rename=rename)
    est._reset()
    est._after_load()
    return est
