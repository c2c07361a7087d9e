"""dask-jobqueue job scripts (SLURM, PBS): trainer jobs and PS jobs for one scheduler.

HPC clusters run Dask workers as batch jobs.  A daskangel job needs two kinds:
**PS jobs** (one worker process each, tagged :data:`PS_RESOURCE`, long-lived:
submit them once with ``sbatch`` / ``qsub``) and **trainer jobs** (tagged
:data:`TRAIN_RESOURCE`, which ``cluster.scale()`` or ``cluster.adapt()`` may add
and remove freely).  Every script first checks that the job's Python imports
daskangel and stops with Python's own message if not.  The scheduler (the
``SLURMCluster`` / ``PBSCluster`` object on the login node, or ``dask scheduler``)
must have daskangel installed too: pass ``scheduler_options={"preload":
["daskangel"]}`` so a missing install fails at once.

Example
-------
>>> scripts = slurm_job_scripts("tcp://10.0.0.1:8786", cores=4,
...                             memory="16GB")                   # doctest: +SKIP
>>> print(scripts["ps"])                                         # doctest: +SKIP
#!/usr/bin/env bash
#SBATCH -J daskangel-ps
...
python -c 'import daskangel' || exit 1
python -m distributed.cli.dask_worker tcp://10.0.0.1:8786 ... --resources daskangel-ps=1
"""

from __future__ import annotations

from typing import Any

from ..errors import InvalidArgumentError
from ._common import CHECK_INSTALLED, worker_args

__all__ = ["pbs_job_scripts", "slurm_job_scripts"]


def _job_cls(kind: str) -> Any:
    try:
        import dask_jobqueue
    except ImportError as e:
        raise ImportError(
            f"{kind} job scripts need dask-jobqueue (pip install 'dask-jobqueue>=0.8.5')"
        ) from e
    cluster = {"slurm": dask_jobqueue.SLURMCluster, "pbs": dask_jobqueue.PBSCluster}[kind]
    return getattr(cluster, "job_cls")  # noqa: B009 (a class attribute mypy sees as instance-only)


def _scripts(
    kind: str,
    scheduler: str,
    cores: int,
    memory: str,
    ps_cores: int | None,
    ps_memory: str | None,
    trainer_processes: int | None,
    job_kwargs: dict[str, Any],
) -> dict[str, str]:
    if not isinstance(scheduler, str) or "://" not in scheduler:
        raise InvalidArgumentError(
            f"scheduler: expected the scheduler's address such as 'tcp://10.0.0.1:8786' "
            f"(cluster.scheduler_address), got {scheduler!r}"
        )
    if not isinstance(cores, int) or cores < 1:
        raise InvalidArgumentError(f"cores: expected an int >= 1, got {cores!r}")
    job = _job_cls(kind)
    prologue = [CHECK_INSTALLED, *job_kwargs.pop("job_script_prologue", [])]
    extra = list(job_kwargs.pop("worker_extra_args", []))
    trainer = job(
        scheduler=scheduler,
        name="daskangel-trainer",
        job_name="daskangel-trainer",
        cores=cores,
        memory=memory,
        processes=trainer_processes,
        job_script_prologue=prologue,
        worker_extra_args=[*extra, *worker_args("trainer")],
        **job_kwargs,
    )
    ps = job(
        scheduler=scheduler,
        name="daskangel-ps",
        job_name="daskangel-ps",
        cores=ps_cores or cores,
        memory=ps_memory or memory,
        processes=1,  # one server process per job: the whole job's memory for the model
        job_script_prologue=prologue,
        worker_extra_args=[*extra, *worker_args("ps")],
        **job_kwargs,
    )
    return {"trainer": trainer.job_script(), "ps": ps.job_script()}


def slurm_job_scripts(
    scheduler: str,
    cores: int,
    memory: str,
    *,
    ps_cores: int | None = None,
    ps_memory: str | None = None,
    trainer_processes: int | None = None,
    **job_kwargs: Any,
) -> dict[str, str]:
    """SLURM batch scripts ``{"trainer": ..., "ps": ...}`` for workers of ``scheduler``.

    Parameters
    ----------
    scheduler
        The scheduler's address (``cluster.scheduler_address``).
    cores, memory
        Per job, as ``SLURMCluster`` takes them; ``ps_cores`` / ``ps_memory``
        override them for PS jobs (the PS holds the model: give it the memory).
    trainer_processes
        Worker processes per trainer job (dask-jobqueue's ``processes``).
    job_kwargs
        Anything else ``SLURMCluster`` takes (``queue``, ``account``, ``walltime``,
        ``job_extra_directives``, ``python``, ``interface``, ``security`` ...).
    """
    return _scripts(
        "slurm", scheduler, cores, memory, ps_cores, ps_memory, trainer_processes, job_kwargs
    )


def pbs_job_scripts(
    scheduler: str,
    cores: int,
    memory: str,
    *,
    ps_cores: int | None = None,
    ps_memory: str | None = None,
    trainer_processes: int | None = None,
    **job_kwargs: Any,
) -> dict[str, str]:
    """PBS batch scripts ``{"trainer": ..., "ps": ...}``; see :func:`slurm_job_scripts`."""
    return _scripts(
        "pbs", scheduler, cores, memory, ps_cores, ps_memory, trainer_processes, job_kwargs
    )
