"""What the vLLM baseline would launch, checked without starting anything (CPU and GPU hosts)."""

from __future__ import annotations

import sys

import pytest

from harness.results import RunFolder
from systems.contract import DeploymentError
from systems.deployments.vllm_baseline import VllmBaselineDeployment
from systems.launch.model_path import resolve_model_path
from systems.launch.vllm_server import server_command, server_env
from systems.router.commands import colocated_router_command, disaggregated_router_command
from vocab.errors import ConfigError


@pytest.fixture
def cfg_for(compose):
    return lambda overrides: compose(["experiment=vllm_baseline_cpu", *overrides])


@pytest.fixture
def deployment(no_load):
    return lambda cfg, folder: VllmBaselineDeployment(cfg, RunFolder(folder), no_load)


@pytest.mark.integration
def test_cpu_instances_are_pinned_one_per_core_and_niced(deployment, cfg_for, tmp_path):
    specs = deployment(cfg_for([]), tmp_path)._server_specs(tmp_path)
    assert [s.cpu_omp_threads_bind for s in specs] == ["0", "1"]
    assert all(s.device == "cpu" and s.nice == 10 and s.enable_prefix_caching for s in specs)
    cmd = server_command(specs[0])
    assert cmd[0] != "nice"  # started at normal priority; the nice value is given once it is ready
    assert "--enable-prefix-caching" in cmd and cmd[cmd.index("--host") + 1] == "127.0.0.1"
    env = server_env(specs[0], tmp_path)
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == "0" and env["VLLM_TARGET_DEVICE"] == "cpu"


@pytest.mark.integration
def test_gpu_instances_get_disjoint_devices(deployment, cfg_for, tmp_path):
    cfg = cfg_for(["engine.device=gpu", "engine.tensor_parallel_size=2", "system.colocated_instances=3"])
    specs = deployment(cfg, tmp_path)._server_specs(tmp_path)
    assert [s.extra_env["CUDA_VISIBLE_DEVICES"] for s in specs] == ["0,1", "2,3", "4,5"]
    assert all(s.nice == 0 and s.cpu_omp_threads_bind is None for s in specs)
    cmd = server_command(specs[0])
    assert cmd[cmd.index("--tensor-parallel-size") + 1] == "2" and "--gpu-memory-utilization" in cmd


@pytest.mark.parametrize(("router", "policy"), [("least_loaded", "least_outstanding"),
                                                ("load_balancing", "least_outstanding"),
                                                ("local_cache_aware", "cache_aware"), ("random", "random")])
def test_the_router_runs_the_canonical_policy(deployment, cfg_for, tmp_path, router, policy):
    assert deployment(cfg_for([f"system.router={router}"]), tmp_path).policy == policy


def test_router_commands_share_one_entry_point(tmp_path):
    cmd = colocated_router_command(9000, "cache_aware", 128, 7, {"vllm0": "http://127.0.0.1:1",
                                                                 "vllm1": "http://127.0.0.1:2"})
    assert cmd[:4] == [sys.executable, "-m", "systems.router", "colocated"]
    assert cmd[cmd.index("--policy") + 1] == "cache_aware" and "--seed" not in cmd
    assert [cmd[i + 1] for i, a in enumerate(cmd) if a == "--backend"] == ["vllm0=http://127.0.0.1:1",
                                                                         "vllm1=http://127.0.0.1:2"]
    assert "--seed" in colocated_router_command(9000, "random", 128, 7, {"a": "http://127.0.0.1:1"})
    pd_cmd = disaggregated_router_command(tmp_path / "router.json", 9001, tmp_path / "stats.json")
    assert pd_cmd[:4] == [sys.executable, "-m", "systems.router", "disaggregated"]
    assert pd_cmd[pd_cmd.index("--config") + 1] == str(tmp_path / "router.json")


@pytest.mark.parametrize(("overrides", "match"), [
    (["system.prefill_instances=1"], "system.prefill_instances: must be 0 for system=vllm_baseline"),
    (["system.colocated_instances=0"], "system.colocated_instances: system=vllm_baseline needs colocated_instances >= 1"),
    (["system.router=conductor"], "system.router=conductor: not for system=vllm_baseline"),
])
def test_impossible_baselines_are_refused_while_validating(cfg_for, overrides, match):
    with pytest.raises(ConfigError, match=match):
        cfg_for(overrides)


def test_real_model_needs_a_local_checkpoint(cfg_for, tmp_path):
    cfg = cfg_for(["model=llama3_8b"])
    with pytest.raises(DeploymentError, match="model.path"):
        resolve_model_path(cfg.model)
    cfg = cfg_for(["model=llama3_8b", f"model.path={tmp_path}"])
    with pytest.raises(DeploymentError, match="config.json"):
        resolve_model_path(cfg.model)
