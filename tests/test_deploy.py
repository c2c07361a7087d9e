"""The deployment specs of docs/deploy.md, built offline: each installs daskangel on
the scheduler (preloaded, so a missing install fails at start-up), checks the
install before a worker starts, and tags PS workers apart from trainers."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from daskangel.deploy import (
    PS_RESOURCE,
    TRAIN_RESOURCE,
    gateway_yarn_config,
    kubernetes_specs,
    kubernetes_yaml,
    pbs_job_scripts,
    slurm_job_scripts,
    worker_args,
)
from daskangel.errors import InvalidArgumentError

pytestmark = pytest.mark.timeout(120)
ROOT = Path(__file__).parents[1]


def test_kubernetes_cluster_and_ps_worker_group() -> None:
    pytest.importorskip("dask_kubernetes")
    cluster, group = kubernetes_specs(
        "ctr",
        image="registry.example.com/daskangel:0.1.0",
        n_trainers=3,
        n_ps=2,
        ps_resources={"limits": {"memory": "32Gi"}},
    )
    assert cluster["kind"] == "DaskCluster" and cluster["metadata"]["name"] == "ctr"
    sched = cluster["spec"]["scheduler"]["spec"]["containers"][0]
    assert sched["image"] == "registry.example.com/daskangel:0.1.0"
    assert sched["args"][:2] == ["dask", "scheduler"]
    assert sched["args"][sched["args"].index("--preload") + 1] == "daskangel"
    trainer = cluster["spec"]["worker"]
    assert trainer["replicas"] == 3
    t_args = trainer["spec"]["containers"][0]["args"]
    assert t_args[t_args.index("--resources") + 1] == f"{TRAIN_RESOURCE}=1"
    assert group["kind"] == "DaskWorkerGroup"
    assert group["metadata"]["name"] == "ctr-ps" and group["spec"]["cluster"] == "ctr"
    ps = group["spec"]["worker"]
    assert ps["replicas"] == 2
    c = ps["spec"]["containers"][0]
    assert c["args"][c["args"].index("--resources") + 1] == f"{PS_RESOURCE}=1"
    assert c["resources"] == {"limits": {"memory": "32Gi"}}
    assert c["image"] == sched["image"]


def test_kubernetes_yaml_is_two_documents_for_kubectl() -> None:
    pytest.importorskip("dask_kubernetes")
    import yaml

    docs = list(yaml.safe_load_all(kubernetes_yaml(name="ctr", image="me/daskangel:1")))
    assert [d["kind"] for d in docs] == ["DaskCluster", "DaskWorkerGroup"]


def test_kubernetes_refuses_bad_arguments() -> None:
    pytest.importorskip("dask_kubernetes")
    with pytest.raises(InvalidArgumentError, match="name: expected a lower-case DNS label"):
        kubernetes_specs("My_Cluster")
    with pytest.raises(InvalidArgumentError, match="n_ps: expected an int >= 1, got 0"):
        kubernetes_specs("ctr", n_ps=0)


@pytest.mark.parametrize(
    ("build", "directive"), [(slurm_job_scripts, "#SBATCH"), (pbs_job_scripts, "#PBS")]
)
def test_jobqueue_scripts_check_the_install_and_tag_the_roles(
    build: object, directive: str
) -> None:
    pytest.importorskip("dask_jobqueue")
    scripts = build(  # type: ignore[operator]
        "tcp://10.1.2.3:8786", cores=8, memory="32GB", ps_memory="128GB", walltime="04:00:00"
    )
    assert set(scripts) == {"trainer", "ps"}
    for role, script in scripts.items():
        assert directive in script
        lines = script.splitlines()
        check = lines.index("python -c 'import daskangel' || exit 1")
        start = next(i for i, ln in enumerate(lines) if "distributed.cli.dask_worker" in ln)
        assert check < start, "the install is checked before the worker starts"
        worker = lines[start]
        assert "tcp://10.1.2.3:8786" in worker
        assert " ".join(worker_args(role)) in worker
        assert " ".join(worker_args("trainer" if role == "ps" else "ps")) not in worker
        assert "daskangel-" + role in script  # the job's name
    assert "--nworkers" not in scripts["ps"]  # one worker process per PS job

    def limit(script: str) -> float:
        return float(re.search(r"--memory-limit ([\d.]+)GiB", script).group(1))  # type: ignore[union-attr]

    assert limit(scripts["ps"]) == pytest.approx(128e9 / 2**30, rel=0.01)  # ps_memory
    assert limit(scripts["trainer"]) * scripts["trainer"].count("--nworkers") <= 32e9 / 2**30


def test_jobqueue_refuses_a_missing_scheduler_address() -> None:
    pytest.importorskip("dask_jobqueue")
    with pytest.raises(InvalidArgumentError, match="scheduler: expected the scheduler's address"):
        slurm_job_scripts("10.1.2.3", cores=2, memory="4GB")


def test_gateway_yarn_config_installs_and_preloads_daskangel() -> None:
    pytest.importorskip("dask_gateway_server")
    from dask_gateway_server.backends.yarn import YarnBackend, YarnClusterConfig

    c = gateway_yarn_config("hdfs:///envs/daskangel.tar.gz", queue="ml")
    assert c.DaskGateway.backend_class.endswith("YarnBackend")
    cfg = YarnClusterConfig(config=c)  # the server validates the traits
    assert cfg.queue == "ml"
    assert cfg.localize_files["environment"]["source"] == "hdfs:///envs/daskangel.tar.gz"
    assert cfg.scheduler_cmd[:2] == ["dask", "scheduler"]
    assert cfg.scheduler_cmd[cfg.scheduler_cmd.index("--preload") + 1] == "daskangel"
    for setup in (cfg.scheduler_setup, cfg.worker_setup):
        assert "import daskangel" in setup and setup.startswith("source environment/bin/activate")
    options = YarnBackend(config=c).cluster_options
    assert options.get_specification().__class__ is not None
    assert {f.field for f in options.fields} == {"worker_cores", "worker_memory"}
    chosen = options.parse_options({"worker_memory": 16, "worker_cores": 4})
    resolved = options.get_configuration(chosen, None)  # as the gateway calls it
    assert resolved == {"worker_cores": 4, "worker_memory": 16 * 2**30}
    with pytest.raises(InvalidArgumentError, match="environment: expected the URL"):
        gateway_yarn_config("/local/env")


def test_the_dockerfile_installs_daskangel_for_scheduler_and_workers() -> None:
    text = (ROOT / "deploy" / "Dockerfile").read_text()
    assert "COPY daskangel" in text and 'pip install ".[dashboard' in text
    assert 'python -c "import daskangel' in text


def test_worker_args_refuse_an_unknown_role() -> None:
    with pytest.raises(InvalidArgumentError, match="role: expected one of"):
        worker_args("server")
