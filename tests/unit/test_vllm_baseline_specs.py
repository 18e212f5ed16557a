"""What the vLLM baseline would launch, checked without starting anything (CPU and GPU hosts)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from harness.config import register_configs, validate
from harness.engines import DeploymentError
from harness.results import RunFolder
from systems.launch.vllm_server import server_command, server_env
from systems.vllm_baseline import VllmBaselineDeployment, resolve_model_path, router_command

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"


def cfg_for(overrides: list[str]):
    register_configs()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return validate(compose(config_name="config", overrides=["experiment=vllm_baseline_cpu", *overrides]))


def test_cpu_instances_are_pinned_one_per_core_and_niced(tmp_path):
    deployment = VllmBaselineDeployment(cfg_for([]), RunFolder(tmp_path))
    specs = deployment._server_specs(tmp_path)
    assert [s.cpu_omp_threads_bind for s in specs] == ["0", "1"]
    assert all(s.device == "cpu" and s.nice == 10 and s.enable_prefix_caching for s in specs)
    cmd = server_command(specs[0])
    assert cmd[:3] == ["nice", "-n", "10"]
    assert "--enable-prefix-caching" in cmd and cmd[cmd.index("--host") + 1] == "127.0.0.1"
    env = server_env(specs[0], tmp_path)
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == "0" and env["VLLM_TARGET_DEVICE"] == "cpu"


def test_gpu_instances_get_disjoint_devices(tmp_path):
    cfg = cfg_for(["engine.device=gpu", "engine.tensor_parallel_size=2", "system.colocated_instances=3"])
    specs = VllmBaselineDeployment(cfg, RunFolder(tmp_path))._server_specs(tmp_path)
    assert [s.extra_env["CUDA_VISIBLE_DEVICES"] for s in specs] == ["0,1", "2,3", "4,5"]
    assert all(s.nice == 0 and s.cpu_omp_threads_bind is None for s in specs)
    cmd = server_command(specs[0])
    assert cmd[cmd.index("--tensor-parallel-size") + 1] == "2" and "--gpu-memory-utilization" in cmd


def test_router_command_names_every_backend():
    cmd = router_command(9000, "cache_aware", 128, 7, {"vllm0": "http://127.0.0.1:1", "vllm1": "http://127.0.0.1:2"})
    assert cmd[cmd.index("--policy") + 1] == "cache_aware" and "--seed" not in cmd
    assert [cmd[i + 1] for i, a in enumerate(cmd) if a == "--backend"] == ["vllm0=http://127.0.0.1:1",
                                                                         "vllm1=http://127.0.0.1:2"]
    assert "--seed" in router_command(9000, "random", 128, 7, {"a": "http://127.0.0.1:1"})


def test_disaggregated_instances_are_rejected(tmp_path):
    cfg = cfg_for(["system.prefill_instances=1"])
    with pytest.raises(DeploymentError, match="colocated_instances"):
        VllmBaselineDeployment(cfg, RunFolder(tmp_path))


def test_real_model_needs_a_local_checkpoint(tmp_path):
    cfg = cfg_for(["model=llama3_8b"])
    with pytest.raises(DeploymentError, match="model.path"):
        resolve_model_path(cfg.model)
    cfg = cfg_for(["model=llama3_8b", f"model.path={tmp_path}"])
    with pytest.raises(DeploymentError, match="config.json"):
        resolve_model_path(cfg.model)
