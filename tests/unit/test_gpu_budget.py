"""``system.gpu_budget`` is checked once, at config validation, for every engine, with the count the run
reports (systems/gpu_budget.py): the error names the option, the GPUs needed and how they were counted."""

from __future__ import annotations

import dataclasses

import pytest

from systems.deployments.sglang import build_specs
from systems.gpu_budget import deployment_devices
from systems.sim.simulated_deployment import SimulatedDeployment
from vocab.errors import ConfigError

RATE = "workload.arrival.rate_rps=1"
DISTSERVE = ["system=distserve", "system.prefill_instances=3", "system.decode_instances=2"]


@pytest.mark.parametrize(("overrides", "needs", "how"), [
    ([*DISTSERVE, "engine.prefill.tp=2"], "8 GPUs", "engine=sim: 3 prefill x tp2 x pp1 + 2 decode x tp1 x pp1"),
    (["engine=vllm", "engine.device=gpu", "system.colocated_instances=3", "engine.tensor_parallel_size=2"],
     "6 GPUs", "engine=vllm on gpu: 3 colocated x tp2"),
    ([*DISTSERVE, "engine=vllm", "engine.device=gpu", "engine.prefill.tensor_parallel_size=2"],
     "8 GPUs", "3 prefill x tp2 + 2 decode x tp1"),
    ([*DISTSERVE, "engine=sglang", "engine.tensor_parallel_size=2"], "10 GPUs",
     "engine=sglang: (3 prefill + 2 decode) server(s) x engine.tensor_parallel_size=2"),
    (["engine=endpoint", "engine.url=http://127.0.0.1:9", "engine.n_gpus=8"], "8 GPUs", "engine=endpoint: engine.n_gpus=8"),
    (["engine=vllm", "engine.device=cpu", "hardware=cpu_core", "system.colocated_instances=5",
      "engine.tensor_parallel_size=2"], "5 CPU devices", "one device of hardware=cpu_core per instance, no GPU used"),
])
def test_every_engine_checks_the_budget_at_validation(compose, overrides, needs, how) -> None:
    with pytest.raises(ConfigError) as info:
        compose([RATE, *overrides, "system.gpu_budget=4"])
    msg = str(info.value)
    assert msg.startswith("system.gpu_budget=4: the deployment needs ") and needs in msg and how in msg, msg
    assert "more than the budget" in msg


def test_within_the_budget_passes_and_cpu_instances_count_one_device_each(compose) -> None:
    cfg = compose([RATE, "engine=vllm", "engine.device=cpu", "hardware=cpu_core", "system.colocated_instances=3",
                   "engine.tensor_parallel_size=2", "system.gpu_budget=3"])
    assert deployment_devices(cfg.system, cfg.engine, cfg.hardware).devices == 3


def test_the_count_is_the_one_the_engines_report(compose) -> None:
    sim = compose([RATE, *DISTSERVE, "engine.prefill.tp=2", "engine.decode.pp=2"])
    assert deployment_devices(sim.system, sim.engine).devices == SimulatedDeployment(sim).n_gpus == 10
    sgl = compose([RATE, *DISTSERVE, "engine=sglang", "engine.tensor_parallel_size=2"])
    plan = build_specs(sgl, "/models/x", gpus=[str(i) for i in range(16)], port_alloc=iter(range(20000, 20100)).__next__)
    assert deployment_devices(sgl.system, sgl.engine).devices == 10 == sum(
        len(s.gpu_ids) for s in plan.servers)


def test_a_budget_below_one_is_refused(compose) -> None:
    with pytest.raises(ConfigError, match=r"system.gpu_budget: must be >= 1 or null \(no limit\), got 0"):
        compose([RATE, "system.gpu_budget=0"])


def test_simulated_configs_built_in_code_are_checked_too(compose) -> None:
    cfg = compose([RATE, *DISTSERVE, "system.gpu_budget=5"])
    over = dataclasses.replace(cfg, system=dataclasses.replace(cfg.system, prefill_instances=4))
    with pytest.raises(ConfigError, match=r"system.gpu_budget=5: the deployment needs 6 GPUs"):
        SimulatedDeployment(over)
