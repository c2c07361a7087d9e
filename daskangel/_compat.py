"""Work-arounds for upstream behaviour daskangel depends on.

* ``distributed.protocol.sparse`` serialises ``sparse.COO`` without its
  ``fill_value``, so a 0-d COO produced by a reduction (``x.sum()`` over sparse
  chunks, whose value *is* its fill value) arrives as 0 on the next worker, and any
  COO with a non-zero fill value changes meaning in transit.  Sparse PSArrays give
  COO chunks with the array's fill value, so daskangel registers a serialiser that
  carries it.  The header stays a superset of distributed's, so a process without
  daskangel still reads the frames (losing only the fill value, as before).
* ``Client.scheduler_info()`` fetches the scheduler's identity and then returns
  the client's cached copy, which the client's own periodic refresh (asking for
  *no* workers, to stay cheap on large clusters) may overwrite in between: the
  ``"workers"`` it returns were sometimes empty on a healthy cluster.
  :func:`workers_info` asks the scheduler and returns that answer itself.

Example
-------
>>> import numpy as np, sparse
>>> from distributed.protocol import deserialize, serialize
>>> x = sparse.COO(np.zeros((0, 0), int), np.zeros(0), shape=(), fill_value=5.0)
>>> float(deserialize(*serialize(x)).fill_value)
5.0
"""

from __future__ import annotations

from typing import Any

__all__ = ["register_sparse_serializer", "training_workers", "workers_info"]


def workers_info(client: Any) -> dict[str, dict[str, Any]]:
    """``{address: info}`` of every worker, fresh from the scheduler (see above).

    ``client`` is a synchronous :class:`distributed.Client`.
    """
    info = client.sync(client.scheduler.identity, n_workers=-1)
    return dict(info["workers"])


def training_workers(client: Any) -> dict[str, dict[str, Any]]:
    """:func:`workers_info` of the workers that may hold training data and run
    training tasks: those carrying the resource ``daskangel.train.resource``
    names, or every worker when it is unset (the default).

    Set it to keep training off the PS workers of a cluster whose trainers are
    started with ``--resources daskangel-train=1`` (``docs/deploy.md``).
    """
    import dask

    from .errors import InvalidArgumentError

    info = workers_info(client)
    resource = dask.config.get("daskangel.train.resource", None)
    if not resource:
        return info
    picked = {a: w for a, w in info.items() if (w.get("resources") or {}).get(resource, 0) > 0}
    if info and not picked:
        raise InvalidArgumentError(
            f"daskangel.train.resource: no worker of the cluster carries the resource "
            f"{resource!r} (resources seen: {sorted({r for w in info.values() for r in (w.get('resources') or {})})}); "
            f"start trainers with `dask worker ... --resources {resource}=1`, or unset it"
        )
    return picked


def register_sparse_serializer() -> None:
    """Register the ``sparse.COO`` serialiser (done on first use, see below)."""
    try:
        import sparse
        from distributed.protocol.serialize import (
            dask_deserialize,
            dask_serialize,
            deserialize,
            serialize,
        )
    except ImportError:  # pragma: no cover - sparse is a core dependency
        return

    @dask_serialize.register(sparse.COO)  # type: ignore[untyped-decorator]
    def _serialize(x: Any) -> tuple[dict[str, Any], list[Any]]:
        ch, cf = serialize(x.coords)
        dh, df = serialize(x.data)
        header = {
            "coords-header": ch,
            "data-header": dh,
            "shape": x.shape,
            "nframes": [len(cf), len(df)],
            "fill-value": x.fill_value.item() if hasattr(x.fill_value, "item") else x.fill_value,
        }
        return header, cf + df

    @dask_deserialize.register(sparse.COO)  # type: ignore[untyped-decorator]
    def _deserialize(header: dict[str, Any], frames: list[Any]) -> Any:
        n = header["nframes"][0]
        coords = deserialize(header["coords-header"], frames[:n])
        data = deserialize(header["data-header"], frames[n:])
        fill = header.get("fill-value")
        if fill is not None:
            fill = data.dtype.type(fill)
        return sparse.COO(coords, data, shape=header["shape"], fill_value=fill)


def _register_lazily() -> None:
    """Register when Dask first (de)serialises a type of ``sparse``, so importing
    daskangel does not import sparse (and scipy, numba) in every process."""
    from distributed.protocol.serialize import dask_deserialize, dask_serialize

    for dispatch in (dask_serialize, dask_deserialize):
        # distributed's own lazy registration (for the other sparse types), chained;
        # ``_lazy`` is dask's Dispatch internals: without it ours simply goes first
        before = getattr(dispatch, "_lazy", {}).get("sparse")

        def register(before: Any = before) -> None:
            if before is not None:
                before()
            register_sparse_serializer()

        dispatch.register_lazy("sparse", register)


_register_lazily()
