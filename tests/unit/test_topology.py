"""The system topology (systems/topology.py): a router a system accepts works on every engine that runs
that system, or the refusal says why; every rule is checked while the config is validated, with one
error type."""

from __future__ import annotations

import pytest

from systems.config import SystemConfig
from systems.policies import POLICY_NAMES, build_policy
from systems.policies.pd import PD_POLICY_NAMES, PDScheduler
from systems.router.cli import build_parser
from systems.sim.simulated_deployment import SimulatedDeployment
from systems.topology import (
    ENGINES,
    ROUTER_ALIASES,
    SYSTEMS,
    canonical_router,
    check_deployment,
    engine_router,
    topology_of,
)
from vocab.errors import ConfigError

SGLANG_ROUTER_POLICIES = ("random", "round_robin", "cache_aware", "power_of_two")  # what sglang_router runs
COUNTS = {"vllm_baseline": {"colocated_instances": 2}, "mooncake": {"prefill_instances": 1, "decode_instances": 1},
          "distserve": {"prefill_instances": 1, "decode_instances": 1},
          "splitwise": {"prefill_instances": 1, "decode_instances": 1, "mixed_instances": 1}}


def every_router_name(system: str) -> list[str]:
    """The canonical routers of ``system`` plus every alias that leads to one of them."""
    topo = topology_of(system)
    return [*topo.routers, *(a for a, c in ROUTER_ALIASES[topo.router_kind].items() if c in topo.routers)]


CASES = [(s, e, r) for s in SYSTEMS for e in ENGINES for r in every_router_name(s)]


@pytest.mark.parametrize(("system", "engine", "router"), CASES)
def test_an_accepted_router_runs_on_every_engine_or_the_engine_says_why(system, engine, router):
    cfg = SystemConfig(name=system, router=router, **COUNTS[system])
    try:
        check_deployment(cfg, engine)
    except ConfigError as exc:
        assert f"engine={engine}" in str(exc) and "cannot run" in str(exc)  # the engine refuses the system, saying why
        return
    policy = engine_router(system, engine, router)
    if engine == "sglang":
        assert policy in SGLANG_ROUTER_POLICIES
    elif topology_of(system).disaggregated:
        PDScheduler(policy)  # the simulator's and the real router's scheduler both run it
    else:
        build_policy(policy)  # the simulator's policy object
        assert build_parser().parse_args(["--port", "1", "--backend", "a=http://x", "--policy", policy]).policy == policy


@pytest.mark.parametrize("system", list(SYSTEMS))
def test_routers_of_the_other_kind_or_unknown_names_are_refused_naming_the_accepted_ones(system):
    with pytest.raises(ConfigError, match=r"system.router=fastest: system=\w+ \(\w+\) takes"):
        canonical_router(system, "fastest")


def test_the_conductor_needs_a_kv_pool_on_every_engine():
    for system in ("distserve", "splitwise"):
        for name in ("conductor", "global_cache_aware"):
            with pytest.raises(ConfigError, match="only system=mooncake has"):
                canonical_router(system, name)
    assert canonical_router("mooncake", "global_cache_aware") == "conductor"


def test_one_name_works_across_a_sweep_of_systems():
    assert {canonical_router(s, "least_loaded") for s in SYSTEMS} == {"least_outstanding", "load_balancing"}
    assert canonical_router("vllm_baseline", "load_balancing") == "least_outstanding"
    assert canonical_router("distserve", "cache_aware") == "local_cache_aware"


def test_capabilities():
    assert [s for s, t in SYSTEMS.items() if t.has_kv_pool] == ["mooncake"]
    assert [s for s, t in SYSTEMS.items() if t.has_mixed_pool] == ["splitwise"]
    assert [s for s, t in SYSTEMS.items() if not t.disaggregated] == ["vllm_baseline"]
    assert topology_of("splitwise").roles == ("prefill", "decode", "mixed")
    assert set(topology_of("vllm_baseline").routers) == set(POLICY_NAMES)
    assert set(topology_of("mooncake").routers) == set(PD_POLICY_NAMES)


@pytest.mark.parametrize(("system", "counts", "match"), [
    ("vllm_baseline", {"colocated_instances": 0}, "system.colocated_instances: system=vllm_baseline needs"),
    ("vllm_baseline", {"colocated_instances": 1, "decode_instances": 1}, "system.decode_instances: must be 0"),
    ("distserve", {"prefill_instances": 1}, "system.decode_instances: system=distserve needs"),
    ("mooncake", {"prefill_instances": 1, "decode_instances": 1, "mixed_instances": 1}, "only a system with a mixed pool"),
    ("splitwise", {"prefill_instances": 1, "decode_instances": 1, "colocated_instances": 1},
     "system.colocated_instances: must be 0"),
])
def test_instance_counts_follow_the_roles(system, counts, match):
    with pytest.raises(ConfigError, match=match):
        check_deployment(SystemConfig(name=system, **counts), "sim")


def test_an_unknown_system_or_engine_names_the_key():
    with pytest.raises(ConfigError, match="system.name: expected one of"):
        topology_of("orca")
    with pytest.raises(ConfigError, match="engine.name: expected one of"):
        check_deployment(SystemConfig(name="vllm_baseline", colocated_instances=1), "tgi")


@pytest.mark.parametrize(("system", "router", "built"), [
    ("vllm_baseline", "load_balancing", "LeastOutstandingPolicy"),  # refused by the simulator before
    ("vllm_baseline", "least_loaded", "LeastOutstandingPolicy"),
    ("mooncake", "global_cache_aware", "conductor"),
    ("distserve", "least_outstanding", "load_balancing"),
])
def test_the_simulator_builds_what_the_topology_accepts(compose, system, router, built):
    setup = SimulatedDeployment(compose([f"system={system}", f"system.router={router}"])).setup()
    if setup.router is not None:
        assert type(setup.router).__name__ == built
    else:
        assert setup.scheduler.policy == built


def test_engine_vllm_accepts_what_the_simulator_accepts(compose):
    # system.router=global_cache_aware used to work on the simulator and be refused by engine=vllm
    cfg = compose(["system=mooncake", "system.router=global_cache_aware", "engine=vllm", "model=tiny_llama"])
    assert engine_router(cfg.system.name, cfg.engine.name, cfg.system.router) == "conductor"
