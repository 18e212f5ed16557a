"""Whole simulations with the indexed choices equal the same simulations with every choice a linear scan
(issue #14 item 4), and a simulation repeated gives identical records."""

from __future__ import annotations

import numpy as np
import pytest

from systems.policies import build_policy
from systems.policies.pd import PDScheduler
from systems.sim.deployment_setup import DeploymentSetup, KVPoolSetup, PoolSetup
from systems.sim.links import LinkSpec
from systems.sim.simulation import Simulation
from tests.unit.test_sim_scale_indexes import (
    HW,
    LINK,
    SHAPE,
    StepPerf,
    _candidates_scan,
    _fastest_decode_scan,
    _mixed_for_prompt_scan,
    _pick_decode_scan,
)
from vocab.records import RequestSpec


def _specs(n: int = 400, seed: int = 0) -> list[RequestSpec]:
    """Poisson arrivals; prompts open with one of 6 shared prefixes (some longer than others)."""
    rng = np.random.default_rng(seed)
    out = []
    t = 0.0
    for i in range(n):
        t += float(rng.exponential(0.004))
        group = int(rng.integers(0, 6))
        blocks = int(rng.integers(1, 9))
        ids = tuple(group * 100 + k for k in range(min(blocks, 1 + group % 4))) + tuple(range(10_000 + 10 * i,
                                                                                           10_000 + 10 * i + blocks))
        out.append(RequestSpec(request_id=i, arrival_s=t, input_length=100 * len(ids) - int(rng.integers(0, 50)),
                               output_length=int(rng.integers(1, 40)), hash_ids=ids, block_size=100))
    return out


def _setup(design: str) -> DeploymentSetup:
    # "tight": KV for about one long prompt per instance: preemptions, and prompts that never fit fail
    perf = StepPerf(capacity=(850 if design.startswith("colocated") else 1500) if design.endswith("tight") else 6000,
                    quantum=1e-4)
    pool = KVPoolSetup(2000, 10.0, LinkSpec("r", 10.0, 0.0, 1.0), 2)
    if design.startswith("colocated"):
        router = build_policy(design.split("-")[1])
        return DeploymentSetup("vllm_baseline", (PoolSetup("colocated", 24, SHAPE, perf, HW),), LINK, router=router)
    if design.startswith("mooncake"):
        policy = design.split("-")[1]
        return DeploymentSetup("mooncake", (PoolSetup("prefill", 20, SHAPE, perf, HW), PoolSetup("decode", 12, SHAPE, perf, HW)),
                            LINK, scheduler=PDScheduler(policy, kvcache_balancing_threshold=1.5), kv_pool=pool)
    mixed = design.split("-")[1]
    return DeploymentSetup("splitwise", (PoolSetup("prefill", 12, SHAPE, perf, HW), PoolSetup("decode", 10, SHAPE, perf, HW),
                                      PoolSetup("mixed", 2, SHAPE, perf, HW)),
                        LINK, scheduler=PDScheduler("load_balancing"), mixed_pool=mixed, mixed_prompt_queue_tokens=300,
                        mixed_overflow_queue_s=0.01)


def _records(setup: DeploymentSetup, specs: list[RequestSpec]) -> tuple[list[str], dict]:
    """Every record as its repr (exact floats, and NaN equal to NaN), and the run's counters."""
    run = Simulation(setup).run(specs)
    return [repr(r.to_record()) for r in run.requests], run.info


def _scan_everything(monkeypatch) -> None:
    """Every choice as the linear scan it was (the reference implementations of test_sim_scale_indexes)."""
    original_arrive = Simulation._arrive

    def arrive(self: Simulation, now: float, req) -> None:
        router = self.setup.router
        if router is not None and not hasattr(router, "_scanning"):
            choose = router.choose
            router.choose = lambda route, loads: choose(route, list(loads))  # a plain list: the scan path
            router._scanning = True
        original_arrive(self, now, req)

    def pick_decode(self: Simulation, prompt: int):
        target, lent = _pick_decode_scan(self, set(self.lent), prompt)
        self.lent = lent
        return target

    def mixed_for_prompt(self: Simulation, inst, req):
        target, lent = _mixed_for_prompt_scan(self, set(self.lent), inst, req.prompt)
        self.lent = lent
        return target

    monkeypatch.setattr(Simulation, "_arrive", arrive)
    monkeypatch.setattr(Simulation, "_candidates", lambda self, req: _candidates_scan(self, req))
    monkeypatch.setattr(Simulation, "_fastest_decode", lambda self, prompt: _fastest_decode_scan(self, prompt))
    monkeypatch.setattr(Simulation, "_pick_decode", pick_decode)
    monkeypatch.setattr(Simulation, "_mixed_for_prompt", mixed_for_prompt)


@pytest.mark.parametrize("design", ["colocated-least_outstanding", "colocated-cache_aware",
                                    "colocated-least_outstanding-tight", "mooncake-conductor",
                                    "mooncake-prefix_match", "mooncake-local_cache_aware", "mooncake-conductor-tight",
                                    "splitwise-dynamic", "splitwise-dedicated", "splitwise-dynamic-tight"])
@pytest.mark.integration
def test_indexed_simulation_equals_the_scanning_one(design: str, monkeypatch, ran_on_sources: bool) -> None:
    if ran_on_sources:  # the scans patch Simulation's methods: on the Python sources only (tests/conftest.py)
        return
    specs = _specs()
    indexed, info = _records(_setup(design), specs)
    _scan_everything(monkeypatch)
    scanned, _ = _records(_setup(design), specs)
    assert indexed == scanned
    if design.endswith("tight"):
        assert info["preemptions"] > 0 and info.get("n_failed", 0) < len(specs) / 2, info
    else:
        assert info["n_ok"] == len(specs)
    if design.startswith("mooncake"):
        assert info["prefix_reused_tokens"] > 100 * 100  # the caches decided something
    if design.startswith("splitwise"):
        assert info.get("n_mixed_prompts", 0) > 0, info


def test_same_inputs_give_identical_records() -> None:
    specs = _specs(seed=1)
    first, _ = _records(_setup("mooncake-conductor"), specs)
    second, _ = _records(_setup("mooncake-conductor"), specs)
    assert first == second
