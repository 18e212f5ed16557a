"""The simulator's ``engine.kv_handoff``: ``push`` (a finished prefill's KV moves to a decode instance at once and
waits there for room) and ``pull`` (DistServe's: the KV stays on the prefill instance, holding its memory, until
a decode instance has room; distserve/decoding_stage_scheduler.py accepts a migrating request only then)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from harness.studies.variants import compose_variant
from systems.config import HardwareConfig
from systems.engine_config import KV_HANDOFFS, SimEngineConfig
from systems.policies.pd import PDScheduler
from systems.sim.deployment_setup import DeploymentSetup, PoolSetup
from systems.sim.links import LinkSpec
from systems.sim.perf.base import InstanceShape, PerfModel
from systems.sim.simulated_deployment import SimulatedDeployment
from systems.sim.simulation import Simulation
from vocab.errors import ConfigError
from vocab.records import RequestSpec, RequestStatus

HW = HardwareConfig(name="test", peak_tflops_bf16=1.0, mem_bandwidth_gbps=1.0, mem_gib=1.0)
SHAPE = InstanceShape("test")
LINK = LinkSpec("test", bandwidth_gbps=1.0, latency_s=0.0, efficiency=1.0)  # 1 GB/s: 1 ms per 1,000 tokens below
OPT13B = ["model=opt_13b", "hardware=a100_80gb", "engine=sim", "engine.perf_model=distserve", "system=distserve",
          "system.prefill_instances=1", "system.decode_instances=1"]


class LinearPerf(PerfModel):
    """prefill = 10 ms + 1 ms per 10 tokens; decode step = 5 ms + 1 ms per sequence + 1 us per context token;
    1,000 bytes of KV per token; ``capacity`` tokens of KV."""

    name = "linear"

    def __init__(self, capacity: int) -> None:
        self._cap = capacity

    @property
    def kv_bytes_per_token(self) -> int:
        return 1000

    @property
    def kv_capacity_tokens(self) -> int:
        return self._cap

    def prefill_time_s(self, sum_tokens: float, sum_sq_tokens: float, n_seqs: int = 1) -> float:
        return 0.010 + 1e-4 * sum_tokens

    def decode_step_time_s(self, batch_size, sum_context):  # type: ignore[override]
        if isinstance(sum_context, np.ndarray):
            return 0.005 + 1e-3 * batch_size + 1e-6 * np.asarray(sum_context)
        return 0.005 + 1e-3 * batch_size + 1e-6 * sum_context


def _spec(i: int, t: float, n_in: int, n_out: int) -> RequestSpec:
    return RequestSpec(request_id=i, arrival_s=t, input_length=n_in, output_length=n_out, hash_ids=(), block_size=100)


def _setup(prefill_kv: int, decode_kv: int, n_p: int = 1, n_d: int = 1, **kw) -> DeploymentSetup:
    return DeploymentSetup("distserve", (PoolSetup("prefill", n_p, SHAPE, LinearPerf(prefill_kv), HW),
                                         PoolSetup("decode", n_d, SHAPE, LinearPerf(decode_kv), HW)),
                           LINK, scheduler=PDScheduler("load_balancing"), **kw)


def _sim(mode: str | None, specs, prefill_kv: int = 3000, decode_kv: int = 1500, **kw):
    if mode is not None:
        kw["kv_handoff"] = mode
    return Simulation(_setup(prefill_kv, decode_kv, **kw)).run(specs)


# six prompts of 1,000 tokens at once; the prefill instance holds three, a decode instance one (two would need
# 2,002 tokens of its 1,500) for its whole decode (1,000 + 200 tokens)
SIX = [_spec(i, 0.0, 1000, 200) for i in range(6)]


def _ttft(r) -> float:
    return r.first_token_s - r.spec.arrival_s


def _waited_at_decode(run) -> list[int]:
    """Requests whose KV reached a decode instance that had no room for it: their decode did not start on
    arrival. A hand-off happens at the prefill's end or (pull) at a decode finish; the KV arrives
    ``kv_transfer_s`` later (the link's queue included). With one request's room per decode instance, a request
    handed off into room starts on arrival (the instance is idle then)."""
    finishes = [r.finish_s for r in run.requests if r.status == RequestStatus.OK]
    out = []
    for r in run.requests:
        if r.status != RequestStatus.OK or r.decode_start_s == r.first_token_s:  # decoded where it was prefilled
            continue
        handoffs = [r.prefill_end_s, *(f for f in finishes if f >= r.prefill_end_s)]
        if not any(math.isclose(r.decode_start_s, h + r.kv_transfer_s, abs_tol=1e-9) for h in handoffs):
            out.append(r.spec.request_id)
    return out


# --- push ----------------------------------------------------------------------------------------------------


def test_push_never_parks_and_prefill_keeps_its_pace():
    run = _sim("push", SIX)
    assert "n_parked_for_decode_room" not in run.info and run.info["n_ok"] == 6
    reqs = run.requests
    assert all(r.status == RequestStatus.OK for r in reqs)
    # the prefill instance never waits for the decode instance: each prompt starts when the one before it ends
    # (or with it, in one batch), and the last first token comes when the prefill instance's work is done
    starts = sorted({r.prefill_start_s for r in reqs})
    ends = sorted({r.prefill_end_s for r in reqs})
    assert starts[1:] == pytest.approx(ends[:-1], abs=1e-12)
    assert max(r.first_token_s for r in reqs) == pytest.approx(run.info["busy_s_prefill"], abs=1e-9)
    assert max(_ttft(r) for r in reqs) < 1.0
    # ... while the decode instance runs one at a time: the others wait there, their KV already moved
    assert _waited_at_decode(run) == [1, 2, 3, 4, 5]
    decode = sorted((r.decode_start_s, r.finish_s) for r in reqs)
    assert all(nxt[0] >= prev[1] for prev, nxt in zip(decode, decode[1:], strict=False))


def test_push_is_the_default_and_unchanged_by_the_option():
    default = _sim(None, SIX)
    push = _sim("push", SIX)
    again = _sim("push", SIX)
    assert repr(default.records()) == repr(push.records()) == repr(again.records())
    assert default.info == push.info
    assert DeploymentSetup.__dataclass_fields__["kv_handoff"].default == "push"
    assert SimEngineConfig.__dataclass_fields__["kv_handoff"].default == "push"


# --- pull ----------------------------------------------------------------------------------------------------


def test_pull_parks_prefilled_requests_and_stalls_the_prefill_instance():
    push, pull = _sim("push", SIX), _sim("pull", SIX)
    assert pull.info["n_parked_for_decode_room"] > 0
    assert pull.info["n_ok"] == 6 and all(r.status == RequestStatus.OK for r in pull.requests)
    assert [r.n_out for r in pull.records()] == [200] * 6
    # the prefill instance's KV fills with parked prompts: the fifth prompt waits for a decode to finish
    first_finish = min(r.finish_s for r in pull.requests)
    late = [r for r in pull.requests if r.prefill_start_s >= first_finish]
    assert late, "no prompt waited for decode room"
    assert max(_ttft(r) for r in pull.requests) > max(_ttft(r) for r in push.requests) + 0.5
    assert max(r.first_token_s for r in pull.requests) > pull.info["busy_s_prefill"] + 0.5  # idle while full
    # a parked request moves when a decode finishes
    parked = [r for r in pull.requests if r.decode_start_s > r.prefill_end_s + r.kv_transfer_s + 0.5]
    assert parked and all(r.decode_start_s >= first_finish for r in parked)
    # the same decode order and the same tokens, only later first tokens
    assert [r.spec.request_id for r in sorted(pull.requests, key=lambda r: r.decode_start_s)] == list(range(6))


def test_pull_is_deterministic():
    a, b = _sim("pull", SIX), _sim("pull", SIX)
    assert repr(a.records()) == repr(b.records())
    assert a.info == b.info


def test_pull_hands_a_decode_instance_only_the_kv_it_has_room_for():
    run = _sim("pull", SIX)
    assert run.info["n_ok"] == 6
    assert _waited_at_decode(run) == []


def _random_specs(n: int = 150, seed: int = 7) -> list[RequestSpec]:
    rng = np.random.default_rng(seed)
    return [_spec(i, float(t), int(p), int(o)) for i, (t, p, o) in enumerate(zip(
        np.sort(rng.uniform(0.0, 2.0, n)), rng.integers(1, 1400, n), rng.integers(1, 300, n), strict=True))]


@pytest.mark.parametrize(("n_p", "n_d"), [(1, 1), (2, 1), (1, 3), (3, 2)])
def test_pull_many_requests_several_instances_all_finish(n_p, n_d):
    specs = _random_specs()
    pull = _sim("pull", specs, prefill_kv=4000, decode_kv=3000, n_p=n_p, n_d=n_d)
    assert pull.info["n_ok"] == 150
    assert all(r.status == RequestStatus.OK for r in pull.requests)
    assert [r.n_out for r in pull.records()] == [s.output_length for s in specs]
    assert pull.info["n_parked_for_decode_room"] > 0
    again = _sim("pull", specs, prefill_kv=4000, decode_kv=3000, n_p=n_p, n_d=n_d)
    assert repr(again.records()) == repr(pull.records())


def test_push_resumes_a_prefill_waiting_for_its_own_kv():
    two = _sim("push", [_spec(0, 0.0, 1000, 5), _spec(1, 0.0, 1000, 5)], prefill_kv=1500, decode_kv=100_000)
    assert [r.status for r in two.requests] == [RequestStatus.OK, RequestStatus.OK]
    many = _sim("push", _random_specs(), prefill_kv=4000, decode_kv=3000)
    assert many.info["n_ok"] == 150


def test_pull_prompt_too_large_for_every_decode_fails_as_under_push():
    specs = [_spec(0, 0.0, 1000, 50), _spec(1, 0.0, 1000, 50), _spec(2, 0.0, 2000, 5), _spec(3, 0.0, 1000, 5)]
    push = _sim("push", specs, prefill_kv=5000, decode_kv=1500)
    pull = _sim("pull", specs, prefill_kv=5000, decode_kv=1500)
    for run in (push, pull):
        status = [r.status for r in run.requests]
        assert status == [RequestStatus.OK, RequestStatus.OK, RequestStatus.FAILED, RequestStatus.OK]
        assert "exceeds the KV capacity of D0 (1500 tokens)" in run.requests[2].error
    assert push.requests[2].error == pull.requests[2].error
    alone = _sim("pull", [_spec(0, 0.0, 2000, 5)], prefill_kv=5000, decode_kv=1500)
    assert [r.status for r in alone.requests] == [RequestStatus.FAILED]
    assert "n_parked_for_decode_room" not in alone.info


def test_pull_unparks_when_a_decode_failure_frees_room():
    # request 0 (1,400 + 2,000 tokens) outgrows the decode instance's 2,500 and fails there; request 1 arrives
    # while it runs and has no room until then
    specs = [_spec(0, 0.0, 1400, 2000), _spec(1, 0.05, 1200, 10)]
    push = _sim("push", specs, prefill_kv=5000, decode_kv=2500)
    assert [r.status for r in push.requests] == [RequestStatus.FAILED, RequestStatus.OK]
    pull = _sim("pull", specs, prefill_kv=5000, decode_kv=2500)
    assert pull.info["n_parked_for_decode_room"] == 1
    assert [r.status for r in pull.requests] == [RequestStatus.FAILED, RequestStatus.OK]


# --- the option through the configuration --------------------------------------------------------------------


@pytest.mark.parametrize("value", ["sideways", "PULL", ""])
def test_unknown_kv_handoff_is_refused_naming_the_key(value):
    with pytest.raises(ConfigError, match=r"engine\.kv_handoff: expected one of push, pull"):
        compose_variant([*OPT13B, f"engine.kv_handoff={value}"])
    assert KV_HANDOFFS == ("push", "pull")


def _opt13b_specs(n: int = 120) -> list[RequestSpec]:
    # 120 prompts of 1,500 tokens within 0.12 s: OPT-13B's decode instance on an A100-80GB holds 44 of them
    return [RequestSpec(request_id=i, arrival_s=0.001 * i, input_length=1500, output_length=500,
                        hash_ids=tuple(range(3 * i, 3 * i + 3)), block_size=512) for i in range(n)]


@pytest.fixture(scope="module")
def opt13b_runs():
    specs = _opt13b_specs()
    out = {}
    for key, extra in [("default", []), ("push", ["engine.kv_handoff=push"]), ("pull", ["engine.kv_handoff=pull"])]:
        deployment = SimulatedDeployment(compose_variant([*OPT13B, *extra]))
        out[key] = (deployment, deployment.run(specs)[1])
    return out


def test_opt13b_decode_capacity_is_exceeded_by_the_burst(opt13b_runs):
    deployment, _ = opt13b_runs["pull"]
    assert deployment.cfg.engine.kv_handoff == "pull"
    capacity = deployment.perf["decode"].kv_capacity_tokens
    assert 1501 * 44 <= capacity < 1501 * 120  # the burst's KV is more than the decode instance holds


def test_opt13b_push_against_pull(opt13b_runs):
    push, pull = opt13b_runs["push"][1], opt13b_runs["pull"][1]
    assert "n_parked_for_decode_room" not in push.info
    assert pull.info["n_parked_for_decode_room"] > 0
    assert push.info["n_ok"] == pull.info["n_ok"] == 120
    ttft = {k: [r.first_token_s - r.arrival_s for r in run.records()] for k, run in (("push", push), ("pull", pull))}
    # push: the prefill instance never idles (first tokens at prefill speed) while requests wait at the decode
    assert max(r.first_token_s for r in push.records()) == pytest.approx(push.info["busy_s_prefill"], rel=0.02)
    waited = [r for r in push.requests if r.decode_start_s > r.prefill_end_s + r.kv_transfer_s + 1.0]
    assert len(waited) > 20
    # pull: it idles while its KV is full of parked prompts
    assert max(ttft["pull"]) > max(ttft["push"]) + 1.0
    assert max(r.first_token_s for r in pull.records()) > pull.info["busy_s_prefill"] + 1.0


def test_opt13b_push_unchanged_and_both_deterministic(opt13b_runs):
    specs = _opt13b_specs()
    default, push, pull = (opt13b_runs[k][1] for k in ("default", "push", "pull"))
    assert repr(default.records()) == repr(push.records())
    assert repr(opt13b_runs["push"][0].run(specs)[1].records()) == repr(push.records())
    assert repr(opt13b_runs["pull"][0].run(specs)[1].records()) == repr(pull.records())
    assert repr(pull.records()) != repr(push.records())
