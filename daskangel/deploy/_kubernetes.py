"""dask-kubernetes (operator) specs: a DaskCluster of trainers and a PS worker group.

The operator's ``DaskCluster`` resource holds the scheduler and the default
worker group; the PS servers get a ``DaskWorkerGroup`` of their own, named
``<name>-ps``, whose workers carry the :data:`PS_RESOURCE` resource (and may ask
Kubernetes for more memory: the PS holds the model).  Apply both with
``kubectl apply -f`` (see :func:`kubernetes_yaml`) or from Python::

    from dask_kubernetes.operator import KubeCluster
    cluster_spec, ps_group = kubernetes_specs("ctr", image="ghcr.io/me/daskangel:0.1")
    cluster = KubeCluster(custom_cluster_spec=cluster_spec)
    cluster.add_worker_group("ps", custom_spec=ps_group["spec"]["worker"])
    ps = daskangel.PSContext(Client(cluster), resource="daskangel-ps")

Example
-------
>>> cluster, group = kubernetes_specs("ctr", image="me/daskangel:1")   # doctest: +SKIP
>>> group["kind"], group["spec"]["cluster"]                             # doctest: +SKIP
('DaskWorkerGroup', 'ctr')
"""

from __future__ import annotations

from typing import Any

from ..errors import InvalidArgumentError
from ._common import scheduler_command, worker_args

__all__ = ["DEFAULT_IMAGE", "kubernetes_specs", "kubernetes_yaml"]

#: The image ``deploy/Dockerfile`` builds (push it to your registry and pass its name).
DEFAULT_IMAGE = "daskangel:latest"


def _operator() -> Any:
    try:
        from dask_kubernetes import operator
    except ImportError as e:
        raise ImportError(
            "kubernetes_specs needs dask-kubernetes (pip install 'dask-kubernetes>=2024.9.0')"
        ) from e
    return operator


def kubernetes_specs(
    name: str = "daskangel",
    image: str = DEFAULT_IMAGE,
    n_trainers: int = 2,
    n_ps: int = 2,
    trainer_resources: dict[str, Any] | None = None,
    ps_resources: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ``DaskCluster`` (scheduler + trainers) and ``DaskWorkerGroup`` (PS) resources.

    Parameters
    ----------
    name
        The cluster's name; the PS group is ``f"{name}-ps"``.
    image
        An image with daskangel installed (``deploy/Dockerfile``); scheduler and
        workers use the same one.
    n_trainers, n_ps
        Worker counts of each group.
    trainer_resources, ps_resources
        Kubernetes container resources (``{"limits": {"memory": "8Gi"}}``).
    env
        Environment variables for every container (``DASK_DISTRIBUTED__...`` /
        ``DASK_DASKANGEL__...`` settings).
    """
    if not name or not name.replace("-", "").isalnum() or name != name.lower():
        raise InvalidArgumentError(
            f"name: expected a lower-case DNS label (letters, digits, '-'), got {name!r}"
        )
    for arg, n in (("n_trainers", n_trainers), ("n_ps", n_ps)):
        if not isinstance(n, int) or n < 1:
            raise InvalidArgumentError(f"{arg}: expected an int >= 1, got {n!r}")
    op = _operator()
    cluster: dict[str, Any] = op.make_cluster_spec(
        name=name, image=image, n_workers=n_trainers, resources=trainer_resources, env=env
    )
    scheduler = cluster["spec"]["scheduler"]["spec"]["containers"][0]
    scheduler["args"] = scheduler_command()
    trainer = cluster["spec"]["worker"]["spec"]["containers"][0]
    trainer["args"] = [*trainer["args"], *worker_args("trainer")]
    worker: dict[str, Any] = op.make_worker_spec(
        image=image, n_workers=n_ps, resources=ps_resources, env=env
    )
    container = worker["spec"]["containers"][0]
    container["args"] = [*container["args"], *worker_args("ps")]
    group = {
        "apiVersion": "kubernetes.dask.org/v1",
        "kind": "DaskWorkerGroup",
        "metadata": {"name": f"{name}-ps"},
        "spec": {"cluster": name, "worker": worker},
    }
    return cluster, group


def kubernetes_yaml(**kwargs: Any) -> str:
    """:func:`kubernetes_specs` as one YAML document stream for ``kubectl apply -f -``."""
    import yaml

    return str(yaml.safe_dump_all(list(kubernetes_specs(**kwargs)), sort_keys=False))
