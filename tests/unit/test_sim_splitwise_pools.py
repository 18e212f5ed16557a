"""Splitwise's interconnect and mixed pool in the simulator: a per-GPU KV link (one NIC per GPU, the
instance sends over all of them) and the dynamic mixed pool (machines lent across pools and returned)."""

from __future__ import annotations

import pytest

from systems.policies import build_policy
from systems.policies.pd import PDScheduler
from systems.sim.deployment_setup import DeploymentSetup, PoolSetup
from systems.sim.links import LinkSpec
from systems.sim.perf.base import InstanceShape
from systems.sim.simulation import Simulation
from tests.unit.test_sim_simulation import HW, LINK, SHAPE, LinearPerf, run, spec
from vocab.errors import ConfigError
from vocab.records import RequestStatus

SHAPE8 = InstanceShape("test", tp=8)


def splitwise(n_p: int = 1, n_d: int = 1, perf_p: LinearPerf | None = None, perf_d: LinearPerf | None = None,
              shape: InstanceShape = SHAPE, **kw) -> DeploymentSetup:
    return DeploymentSetup("splitwise", (PoolSetup("prefill", n_p, shape, perf_p or LinearPerf(), HW),
                                      PoolSetup("decode", n_d, shape, perf_d or LinearPerf(), HW)),
                        LINK, scheduler=PDScheduler("load_balancing"), **kw)


def test_link_aggregate_multiplies_the_bandwidth():
    agg = LINK.aggregate(8)
    assert agg.bandwidth_gbps == 8 * LINK.bandwidth_gbps and agg.latency_s == LINK.latency_s
    assert LINK.aggregate(1) is LINK
    assert LINK.transfer_time_s(8e9) == pytest.approx(8 * agg.transfer_time_s(8e9))


@pytest.mark.parametrize("per_gpu", [False, True])
def test_per_gpu_link_moves_kv_n_gpus_times_faster(per_gpu):
    (rec,), sim = run(splitwise(shape=SHAPE8, kv_link_per_gpu=per_gpu), [spec(0, 0.0, 1000, 3)])
    # 1000 tokens x 1000 bytes over 1 GB/s: 1 ms on one NIC, 1/8 ms over the eight NICs of a TP-8 instance
    assert rec.extra["kv_transfer_s"] == pytest.approx(1e-3 / (8 if per_gpu else 1))


def test_engine_options_are_checked(compose):
    with pytest.raises(ConfigError, match="engine.whole_prompts"):
        compose(["engine=sim", "engine.whole_prompts=true"])
    with pytest.raises(ConfigError, match="engine.mixed_pool"):
        compose(["engine=sim", "engine.mixed_pool=sometimes"])
    with pytest.raises(ConfigError, match="engine.mixed_prompt_queue_tokens"):
        compose(["engine=sim", "engine.mixed_prompt_queue_tokens=0"])


def test_dynamic_pool_lends_a_token_machine_for_long_prompt_queues():
    setup = splitwise(1, 2, mixed_pool="dynamic", mixed_prompt_queue_tokens=3000)
    recs, sim = run(setup, [spec(i, 0.0, 2000, 3) for i in range(6)])
    assert all(r.status == RequestStatus.OK for r in recs)
    assert sim.info["n_lent_token_machines"] >= 1 and sim.info["n_mixed_prompts"] >= 1
    lent = [r for r in recs if r.instance.startswith("D")]  # prefilled on a token machine
    assert lent and all("->" not in r.instance for r in lent)  # and decoded there (no transfer)


def test_dynamic_pool_never_lends_below_the_threshold():
    recs, sim = run(splitwise(1, 2, mixed_pool="dynamic"), [spec(i, 0.0, 2000, 3) for i in range(3)])
    assert all(r.instance.startswith("P") for r in recs) and "n_lent_token_machines" not in sim.info


def test_dynamic_pool_lends_a_prompt_machine_when_token_machines_are_full():
    full = LinearPerf(capacity=2500)  # one 2000-token sequence at a time on the token machine
    setup = splitwise(2, 1, perf_d=full, mixed_pool="dynamic")
    recs, sim = run(setup, [spec(i, 0.01 * i, 2000, 200) for i in range(3)])
    assert all(r.status == RequestStatus.OK and r.n_out == 200 for r in recs)
    assert sim.info["n_lent_prompt_machines"] >= 1 and sim.info["n_mixed_decodes"] >= 1
    assert any(r.instance.split("->")[-1].startswith("P") for r in recs)  # decoded on a prompt machine


@pytest.mark.parametrize("mixed_pool", ["dynamic", "dedicated"])
def test_dynamic_pool_decodes_on_the_token_machine_with_least_kv_scheduled(mixed_pool):
    # one long sequence on the first token machine, then short ones: by KV scheduled (splitwise-sim's
    # sched_memory) every short one goes to the second; by the fastest step some join the long one
    long = [spec(0, 0.0, 5000, 1000)]
    short = [spec(i, 1.0 + 0.05 * i, 100, 1000) for i in range(1, 11)]
    recs, _ = run(splitwise(1, 2, mixed_pool=mixed_pool), long + short)
    where = {r.request_id: r.instance.split("->")[-1] for r in recs}
    on_first = [i for i in range(1, 11) if where[i] == where[0]]
    assert (on_first == []) == (mixed_pool == "dynamic")


def test_lent_machines_return_once_idle():
    setup = splitwise(1, 2, mixed_pool="dynamic", mixed_prompt_queue_tokens=3000)
    cluster = Simulation(setup)
    cluster.run([spec(i, 0.0, 2000, 3) for i in range(6)] + [spec(6, 100.0, 2000, 3)])
    cluster._return_idle()
    assert cluster.lent == set()


def test_dedicated_pool_is_unchanged_by_default():
    assert DeploymentSetup("splitwise", (), LINK).mixed_pool == "dedicated"
    assert not DeploymentSetup("splitwise", (), LINK).kv_link_per_gpu
    assert isinstance(LINK, LinkSpec)


@pytest.mark.parametrize("prompt, joins", [(500, True), (2000, False)])
def test_whole_prompts_mix_with_decodes_that_fit_the_budget(prompt, joins):
    setup = DeploymentSetup("vllm_baseline", (PoolSetup("colocated", 1, SHAPE, LinearPerf(), HW),), LINK,
                         router=build_policy("round_robin"), chunked_prefill=False, whole_prompts=True,
                         max_num_batched_tokens=1000)
    (a, b), _ = run(setup, [spec(0, 0.0, 100, 200), spec(1, 0.5, prompt, 2)])
    assert b.first_token_s > 0.5
    assert (b.first_token_s in a.chunk_times_s) == joins  # a decodes in b's prefill iteration only if it fits


def test_whole_prompts_are_not_chunked_on_prefill_instances():
    chunked = splitwise(max_num_batched_tokens=1000)
    whole = splitwise(max_num_batched_tokens=1000, chunked_prefill=False, whole_prompts=True)
    (c,), _ = run(chunked, [spec(0, 0.0, 3000, 2)])
    (w,), _ = run(whole, [spec(0, 0.0, 3000, 2)])
    assert c.first_token_s == pytest.approx(3 * (0.010 + 0.1))  # three 1000-token chunks
    assert w.first_token_s == pytest.approx(0.010 + 0.3)  # one iteration
