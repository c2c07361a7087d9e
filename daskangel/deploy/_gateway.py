"""Dask Gateway on Hadoop YARN: the maintained route to YARN (dask-yarn is dead upstream).

dask-yarn no longer imports on current ``distributed``.  Dask Gateway's YARN
backend (``dask-gateway-server[yarn]``) launches each user's scheduler and
workers as YARN containers from a packed environment (``venv-pack`` /
``conda-pack`` archive with daskangel installed).  :func:`gateway_yarn_config`
builds the server's configuration (the ``c`` of ``dask_gateway_config.py``).

.. warning::
   A Gateway cluster has one worker template, so PS workers cannot be tagged
   apart from trainers: servers go on every worker (``PSContext()`` without
   ``resource=``), and the ``worker_memory`` option must leave room for the
   model's share as well as the data.

Example
-------
>>> c = gateway_yarn_config("hdfs:///envs/daskangel.tar.gz")  # doctest: +SKIP
>>> c.YarnClusterConfig.scheduler_cmd                         # doctest: +SKIP
['dask', 'scheduler', '--preload', 'daskangel']
"""

from __future__ import annotations

from typing import Any

from ..errors import InvalidArgumentError
from ._common import CHECK_INSTALLED

__all__ = ["gateway_yarn_config"]


def _options(max_cores: int, max_memory_gib: float) -> Any:
    from dask_gateway_server.options import Float, Integer, Options

    def handler(options: Any, user: Any = None) -> dict[str, Any]:
        return {
            "worker_cores": options.worker_cores,
            "worker_memory": int(options.worker_memory * 2**30),
        }

    return Options(
        Integer("worker_cores", default=2, min=1, max=max_cores, label="Worker cores"),
        Float("worker_memory", default=8, min=1, max=max_memory_gib, label="Worker memory (GiB)"),
        handler=handler,
    )


def gateway_yarn_config(
    environment: str,
    *,
    queue: str = "default",
    scheduler_memory: str = "4 G",
    max_worker_cores: int = 16,
    max_worker_memory_gib: float = 64,
    auth: str = "kerberos",
) -> Any:
    """A ``traitlets`` ``Config`` for ``dask-gateway-server`` with the YARN backend.

    Parameters
    ----------
    environment
        URL of the packed environment (``hdfs:///envs/daskangel.tar.gz``), made
        with ``venv-pack`` from a venv where ``pip install daskangel`` ran; it is
        unpacked as ``environment/`` in every container.
    queue
        The YARN queue.
    scheduler_memory
        Memory of the scheduler container (the PS registry and clocks live there).
    max_worker_cores, max_worker_memory_gib
        The largest worker a user may ask for through the cluster options.
    auth
        ``"kerberos"`` (secure Hadoop clusters) or ``"simple"``.
    """
    if "://" not in environment or not environment.endswith((".tar.gz", ".tgz", ".zip")):
        raise InvalidArgumentError(
            f"environment: expected the URL of a packed environment archive "
            f"('hdfs:///envs/daskangel.tar.gz'), got {environment!r}"
        )
    auths = {
        "kerberos": "dask_gateway_server.auth.KerberosAuthenticator",
        "simple": "dask_gateway_server.auth.SimpleAuthenticator",
    }
    if auth not in auths:
        raise InvalidArgumentError(f"auth: expected one of {sorted(auths)}, got {auth!r}")
    from traitlets.config import Config

    c = Config()
    c.DaskGateway.backend_class = "dask_gateway_server.backends.yarn.YarnBackend"
    c.DaskGateway.authenticator_class = auths[auth]
    c.YarnClusterConfig.queue = queue
    c.YarnClusterConfig.localize_files = {
        "environment": {"source": environment, "visibility": "public"}
    }
    c.YarnClusterConfig.scheduler_setup = f"source environment/bin/activate && {CHECK_INSTALLED}"
    c.YarnClusterConfig.worker_setup = f"source environment/bin/activate && {CHECK_INSTALLED}"
    # the gateway appends its own flags (TLS, its preload) to these commands
    c.YarnClusterConfig.scheduler_cmd = ["dask", "scheduler", "--preload", "daskangel"]
    c.YarnClusterConfig.worker_cmd = ["dask", "worker"]
    c.YarnClusterConfig.scheduler_memory = scheduler_memory
    c.YarnBackend.cluster_options = _options(max_worker_cores, max_worker_memory_gib)
    return c
