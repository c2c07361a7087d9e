"""Saving and loading linear models: the snapshot layer for arrays, JSON for the rest.

``model.save(url)`` writes the weights (and the server optimiser's state arrays)
with ``ps.save(url)`` — a zarr v3 group readable without daskangel (see
``docs/snapshot-format.md``) — and ``url/daskangel-model.json``: the estimator's
class, its parameters, ``classes_``, ``n_features_in_``, the epoch clock ``t_``
and ``history_``.  :func:`load` rebuilds the estimator and its arrays in a new
:class:`~daskangel.PSContext`; training it again continues the learning-rate
schedule (and FTRL / AdaGrad / Adam state) from the saved clock.

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

from ..errors import ArrayNotFoundError, InvalidArgumentError, SnapshotError

__all__ = ["FORMAT", "MODEL_FILE", "load", "save_model"]

FORMAT = 1
MODEL_FILE = "daskangel-model.json"


def _plain(v: Any) -> Any:
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating,)):
        return float(v)
    if isinstance(v, np.ndarray):
        return v.tolist()
    return v


def save_model(est: Any, url: str) -> None:
    """Write ``est`` (fitted, with its weights on a PS) to ``url``."""
    from sklearn.utils.validation import check_is_fitted

    check_is_fitted(est, "n_features_in_")
    if not getattr(est, "_arrays", None) or getattr(est, "_ps", None) is None:
        raise InvalidArgumentError(
            f"{type(est).__name__}: its weights are not on a PS (unpickled or closed); "
            "fit it (warm_start=True keeps the weights) before saving"
        )
    arrays = est._arrays
    names = [arrays["weights"], *arrays["state"].values()]
    est._ps.save(url, arrays=names)
    params = {k: _plain(v) for k, v in est.get_params().items() if k not in ("client", "ps")}
    hist = getattr(est, "history_", None)
    doc = {
        "format": FORMAT,
        "class": f"{type(est).__module__}:{type(est).__qualname__}",
        "params": params,
        "classes": None if not hasattr(est, "classes_") else est.classes_.tolist(),
        "classes_dtype": None if not hasattr(est, "classes_") else est.classes_.dtype.str,
        "n_features_in": int(est.n_features_in_),
        "t": int(getattr(est, "t_", 0)),
        "n_iter": int(getattr(est, "n_iter_", 0)),
        "history": None if hist is None else json.loads(hist.to_json(orient="records")),
        "arrays": {
            "weights": arrays["weights"],
            "state": arrays["state"],
            "rule": arrays.get("rule"),
        },
    }
    from .._snapshot_format import fs_and_path

    fs, path = fs_and_path(url)
    with fs.open(f"{path}/{MODEL_FILE}", "w") as f:
        json.dump(doc, f, indent=1)


def _read(url: str) -> dict[str, Any]:
    from .._snapshot_format import fs_and_path

    fs, path = fs_and_path(url)
    try:
        with fs.open(f"{path}/{MODEL_FILE}", "r") as f:
            doc: dict[str, Any] = json.load(f)
    except FileNotFoundError:
        raise SnapshotError(f"url: {url!r} holds no saved daskangel model ({MODEL_FILE})") from None
    if doc.get("format") != FORMAT:
        raise SnapshotError(
            f"url: {url!r} has model format {doc.get('format')!r}, expected {FORMAT}"
        )
    return doc


def _exists(ps: Any, name: str) -> bool:
    try:
        ps.get_array(name)
    except ArrayNotFoundError:
        return False
    return True


def load(url: str, client: Any = None, ps: Any = None) -> Any:
    """A model saved with ``model.save(url)``, its weights on a new (or the given) PS context."""
    import pandas as pd

    from ..persist import load_arrays

    doc = _read(url)
    mod, _, qual = doc["class"].partition(":")
    cls = getattr(importlib.import_module(mod), qual)
    est = cls(**doc["params"], client=client, ps=ps)
    if doc["classes"] is not None:
        est.classes_ = np.asarray(doc["classes"], dtype=np.dtype(doc["classes_dtype"]))
    est.n_features_in_ = int(doc["n_features_in"])
    est.t_ = int(doc["t"])
    est.n_iter_ = int(doc["n_iter"])
    if doc["history"] is not None:
        est.history_ = pd.DataFrame(doc["history"])
    if client is None and ps is None:
        from distributed import default_client

        client = default_client()
    ctx = est._context(client if ps is None else ps.client)
    arrays = doc["arrays"]
    names = [arrays["weights"], *arrays["state"].values()]
    if not any(_exists(ctx, n) for n in names):
        ctx.load(url, arrays=names)
        est._arrays = {
            "weights": arrays["weights"],
            "state": dict(arrays["state"]),
            "rule": arrays["rule"],
        }
    else:  # the saved model is loaded already: same values, fresh names
        values = load_arrays(url, arrays=names)
        tag = uuid.uuid4().hex[:6]
        new = {n: f"{n}-{tag}" for n in names}
        w = ctx.from_array(new[arrays["weights"]], values[arrays["weights"]])
        for n in arrays["state"].values():  # co-partitioned with w, as the optimiser needs
            ctx.zeros_like(w, name=new[n], dtype=values[n].dtype).set(
                values[n], casting="same_kind"
            )
        state = {s: new[n] for s, n in arrays["state"].items()}
        est._arrays = {"weights": new[arrays["weights"]], "state": state, "rule": arrays["rule"]}
    est._w = None
    return est
