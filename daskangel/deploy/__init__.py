"""Deployment specs: daskangel on Kubernetes, HPC batch systems and YARN.

Every function here *builds* a specification offline — a Kubernetes resource
dict, a batch job script, a Dask Gateway configuration — that carries the two
things a daskangel cluster needs beyond plain Dask (``docs/deploy.md``):

* **daskangel installed on the scheduler** as well as on the workers (the PS
  registry, clocks and snapshot coordination run as scheduler plugins); the
  scheduler is started with ``--preload daskangel`` so a missing install fails at
  start-up, not at the first ``PSContext``;
* **PS workers tagged with a resource** (:data:`PS_RESOURCE`), so
  ``PSContext(resource="daskangel-ps")`` puts servers on them, and trainers
  tagged with :data:`TRAIN_RESOURCE` so training stays off the PS workers when
  asked (``train_on=``).

Example
-------
>>> from daskangel.deploy import slurm_job_scripts
>>> scripts = slurm_job_scripts(cores=4, memory="16GB")      # doctest: +SKIP
>>> "--resources daskangel-ps=1" in scripts["ps"]            # doctest: +SKIP
True
"""

from __future__ import annotations

from ._common import PS_RESOURCE, TRAIN_RESOURCE, worker_args
from ._gateway import gateway_yarn_config
from ._jobqueue import pbs_job_scripts, slurm_job_scripts
from ._kubernetes import kubernetes_specs, kubernetes_yaml

__all__ = [
    "PS_RESOURCE",
    "TRAIN_RESOURCE",
    "gateway_yarn_config",
    "kubernetes_specs",
    "kubernetes_yaml",
    "pbs_job_scripts",
    "slurm_job_scripts",
    "worker_args",
]
