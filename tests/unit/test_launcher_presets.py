"""The launcher presets of ``conf/hydra/launcher/`` compose onto the plugins' own configs, and the single-node
clusters' configuration (``slurm.conf``, the Ray driver's variables) says what the docs promise."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from harness.config import register_configs
from systems.config import CONF_DIR
from tests.clusters.daemons import ClusterError
from tests.clusters.ray_local import RayCluster
from tests.clusters.slurm_conf import (
    NodeHardware,
    SlurmLayout,
    parse_slurmd_c,
    render_cgroup_conf,
    render_slurm_conf,
)

PRESETS = ("parallel", "slurm", "slurm_local", "ray_cluster")


def launcher_config(overrides: list[str]):
    """``hydra.launcher`` as ``python -m harness <overrides>`` composes it (Hydra's own part included)."""
    from hydra import compose, initialize_config_dir

    register_configs()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=overrides, return_hydra_config=True)
    return cfg


def test_every_preset_is_documented_and_shipped():
    shipped = {p.stem for p in (CONF_DIR / "hydra" / "launcher").glob("*.yaml")}
    assert shipped == set(PRESETS)
    doc = (CONF_DIR.parent / "docs" / "launchers.md").read_text()
    for name in PRESETS:
        assert f"hydra/launcher={name}" in doc, name


def test_parallel_is_joblib_on_two_workers():
    launcher = launcher_config(["hydra/launcher=parallel"]).hydra.launcher
    assert launcher._target_ == "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher"
    assert launcher.n_jobs == 2 and launcher.prefer == "processes"


def test_slurm_keeps_submitit_files_under_the_sweep_folder():
    cfg = launcher_config(["hydra/launcher=slurm", "results_dir=/r", "experiment_name=e",
                           "hydra.launcher.partition=gpu", "hydra.launcher.account=proj", "hydra.launcher.qos=high"])
    launcher = cfg.hydra.launcher
    assert launcher._target_ == "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"
    assert OmegaConf.select(cfg, "hydra.launcher.submitit_folder") == "/r/e/.submitit/%j"
    assert (launcher.partition, launcher.account, launcher.qos) == ("gpu", "proj", "high")
    assert launcher.max_num_timeout == 0 and launcher.timeout_min > 0


def test_slurm_local_extends_slurm_for_the_local_partition():
    launcher = launcher_config(["hydra/launcher=slurm_local"]).hydra.launcher
    assert launcher._target_.endswith("SlurmLauncher")
    assert launcher.partition == "local" and launcher.cpus_per_task == 1 and launcher.mem_gb == 1


def test_ray_cluster_takes_its_address_from_the_environment(monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:6390")
    cfg = launcher_config(["hydra/launcher=ray_cluster"])
    init = OmegaConf.to_container(cfg.hydra.launcher.ray.init, resolve=True)
    assert cfg.hydra.launcher._target_ == "hydra_plugins.hydra_ray_launcher.ray_launcher.RayLauncher"
    # object_store_memory present (None): the plugin's 75 MB default would make ray.init refuse to attach
    assert init == {"address": "127.0.0.1:6390", "object_store_memory": None}
    assert cfg.hydra.launcher.ray.remote.max_retries == 0
    monkeypatch.delenv("RAY_ADDRESS")
    cfg = launcher_config(["hydra/launcher=ray_cluster"])
    assert OmegaConf.to_container(cfg.hydra.launcher.ray.init, resolve=True)["address"] is None


SLURMD_C = ("NodeName=vm CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2 ThreadsPerCore=1 RealMemory=24105\n"
            "UpTime=0-11:33:04\n")


def test_slurmd_c_is_parsed():
    hw = parse_slurmd_c(SLURMD_C)
    assert hw == NodeHardware(name="vm", cpus=2, boards=1, sockets_per_board=1, cores_per_socket=2,
                              threads_per_core=1, real_memory_mb=24105)


def test_slurmd_c_without_the_node_line_is_refused_naming_the_field():
    with pytest.raises(ClusterError, match="RealMemory"):
        parse_slurmd_c("NodeName=vm CPUs=2 SocketsPerBoard=1 CoresPerSocket=2 ThreadsPerCore=1\n")


def conf_lines(text: str) -> dict[str, str]:
    """``Key=value`` lines of a Slurm config (the node and partition lines keyed by their first word)."""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            out[key] = value
    return out


def test_slurm_conf_is_loopback_only_cgroup_free_and_sized_to_the_host(tmp_path: Path):
    layout = SlurmLayout(root=tmp_path, ctld_port=20000, slurmd_port=20001, user="alice")
    conf = conf_lines(render_slurm_conf(layout, parse_slurmd_c(SLURMD_C)))
    assert conf["SlurmctldHost"] == "localhost(127.0.0.1)"
    assert conf["CommunicationParameters"] == "NoCtldInAddrAny,NoInAddrAny"
    assert (conf["SlurmctldPort"], conf["SlurmdPort"]) == ("20000", "20001")
    assert (conf["SlurmUser"], conf["SlurmdUser"]) == ("alice", "alice")
    assert conf["AuthInfo"] == f"socket={tmp_path / 'munge-run' / 'munge.socket'}"
    assert (conf["ProctrackType"], conf["TaskPlugin"]) == ("proctrack/linuxproc", "task/none")
    for key in ("StateSaveLocation", "SlurmdSpoolDir", "SlurmctldPidFile", "SlurmdPidFile", "SlurmctldLogFile",
                "SlurmdLogFile"):
        assert conf[key].startswith(str(tmp_path) + "/"), key
    node = conf["NodeName"]
    assert node.startswith("vm NodeAddr=127.0.0.1 CPUs=2 ") and "RealMemory=24105" in node
    assert conf["PartitionName"].startswith("local Nodes=vm Default=YES")
    assert "cgroup" not in render_slurm_conf(layout, parse_slurmd_c(SLURMD_C)).lower().replace("cgroups", "")
    assert "CgroupPlugin=" in render_cgroup_conf()


def test_ray_driver_variables_keep_loopback_and_the_clusters_token(tmp_path: Path):
    cluster = RayCluster(root=tmp_path, port=6391, num_cpus=2)
    assert cluster.driver_vars() == {"RAY_ADDRESS": "127.0.0.1:6391", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
                                     "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(tmp_path / "auth_token")}
    env = cluster.client_env({"PATH": "/bin", "RAY_AUTH_TOKEN": "stale", "RAY_ADDRESS": "10.0.0.1:6379"})
    assert "RAY_AUTH_TOKEN" not in env and env["RAY_ADDRESS"] == "127.0.0.1:6391" and env["PATH"] == "/bin"
