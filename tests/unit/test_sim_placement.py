"""DistServe's placement search (harness/studies/placement_algorithm.py) and its study job, on cases with a
known answer (its rate search is tested in test_capacity.py)."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from harness.capacity import RateSearch
from harness.metrics import summarize
from harness.results import RunFolder
from harness.slo import SLOConfig
from harness.studies.placement_algorithm import (
    Parallelism,
    PhaseResult,
    PlacementSimulator,
    SearchSettings,
    attainment,
    balance_replicas,
    enumerate_parallelism,
    replicate_to_rate,
    search_placement,
)
from systems.config import HardwareConfig
from systems.policies.pd import PDScheduler
from systems.sim.deployment_setup import DeploymentSetup, PoolSetup
from systems.sim.links import LinkSpec
from systems.sim.perf.base import InstanceShape, PerfModel
from vocab.errors import ConfigError
from vocab.records import RequestSpec

HW = HardwareConfig(name="test", peak_tflops_bf16=1.0, mem_bandwidth_gbps=1.0, mem_gib=1.0, devices_per_node=4)
LINK = LinkSpec("test", bandwidth_gbps=100.0, latency_s=0.0, efficiency=1.0)
TTFT_S, TPOT_S = 0.2, 0.05


def test_enumeration_respects_the_gpu_budget_and_the_unsupported_layouts() -> None:
    usable, skipped = enumerate_parallelism(4, 1, lambda p: "tp=3 unsupported" if p.tp == 3 else None)
    assert {(p.tp, p.pp) for p in usable} == {(1, 1), (1, 2), (1, 3), (1, 4), (2, 1), (2, 2), (4, 1)}
    assert [(p.tp, p.pp, why) for p, why in skipped] == [(3, 1, "tp=3 unsupported")]
    two_nodes, _ = enumerate_parallelism(4, 2)
    assert all(p.tp <= 4 and p.n_gpus <= 8 for p in two_nodes)  # tp stays within a node; pp spans nodes
    assert Parallelism(2, 4) in two_nodes and Parallelism(8, 1) not in two_nodes


def test_enumeration_with_the_distserve_profiles_skips_what_opt_13b_lacks() -> None:
    from harness.studies.variants import compose_variant
    from systems.sim.perf.registry import build_perf_model

    cfg = compose_variant(["model=opt_13b", "hardware=a100_80gb", "engine.perf_model=distserve"])

    def unsupported(p: Parallelism) -> str | None:
        try:
            build_perf_model("distserve", cfg.model, cfg.hardware, InstanceShape("a100_80gb", p.tp, p.pp))
        except ValueError as exc:
            return str(exc)
        return None

    usable, skipped = enumerate_parallelism(8, 1, unsupported)
    assert {p.tp for p in usable} == {1, 2, 4, 8} - {8}  # the profile has OPT-13B at TP 1, 2, 4 only
    assert {p.tp for p, _ in skipped} == {3, 5, 6, 7, 8}
    assert all(p.n_gpus <= 8 for p in usable)


# -- a known answer with a fake performance model ---------------------------------------------------
class ScaledPerf(PerfModel):
    """Prefill 50 ms per request and decode step 10 ms + 2 ms per sequence, divided by ``speedup``."""

    name = "scaled"

    def __init__(self, speedup: float) -> None:
        self.speedup = speedup

    @property
    def kv_bytes_per_token(self) -> int:
        return 1000

    @property
    def kv_capacity_tokens(self) -> int:
        return 10_000_000

    def prefill_time_s(self, sum_tokens: float, sum_sq_tokens: float, n_seqs: int = 1) -> float:
        return 0.05 * n_seqs / self.speedup if sum_tokens > 0 else 0.0

    def decode_step_time_s(self, batch_size, sum_context):  # type: ignore[override]
        if isinstance(batch_size, np.ndarray) or isinstance(sum_context, np.ndarray):
            bs, _ = np.broadcast_arrays(np.asarray(batch_size, dtype=float), np.asarray(sum_context, dtype=float))
            return (0.010 + 0.002 * bs) / self.speedup
        return (0.010 + 0.002 * batch_size) / self.speedup


# prefill: tp2 is 3x faster (1.5x per GPU), tp4 3.2x (0.8x per GPU); decode: tp1 is best per GPU
PREFILL_SPEEDUP = {1: 1.0, 2: 3.0, 4: 3.2}
DECODE_SPEEDUP = {1: 1.0, 2: 1.2, 4: 1.3}


def unit_specs(n: int = 80, seed: int = 1) -> list[RequestSpec]:
    times = np.concatenate([[0.0], np.cumsum(np.random.default_rng(seed).exponential(1.0, n - 1))])
    return [RequestSpec(request_id=i, arrival_s=float(t), input_length=500, output_length=100, block_size=100)
            for i, t in enumerate(times)]


def make_sim(speedups: dict[int, float], specs: list[RequestSpec] | None = None) -> PlacementSimulator:
    def perf_for(shape: InstanceShape) -> PerfModel:
        if shape.tp not in speedups:
            raise ValueError(f"no profile for tp={shape.tp}")
        return ScaledPerf(speedups[shape.tp])

    def make_setup(pools: tuple[PoolSetup, ...]) -> DeploymentSetup:
        return DeploymentSetup("distserve", pools, LINK, scheduler=PDScheduler("load_balancing"), prefix_caching=False)

    return PlacementSimulator(specs or unit_specs(), HW, perf_for, make_setup, TTFT_S, TPOT_S)


class PhasePerf(PerfModel):
    """Prefill timings from one speed-up table and decode timings from another (same shape)."""

    name = "phase"

    def __init__(self, tp: int) -> None:
        self.p, self.d = ScaledPerf(PREFILL_SPEEDUP[tp]), ScaledPerf(DECODE_SPEEDUP[tp])

    kv_bytes_per_token = ScaledPerf.kv_bytes_per_token
    kv_capacity_tokens = ScaledPerf.kv_capacity_tokens

    def prefill_time_s(self, sum_tokens: float, sum_sq_tokens: float, n_seqs: int = 1) -> float:
        return self.p.prefill_time_s(sum_tokens, sum_sq_tokens, n_seqs)

    def decode_step_time_s(self, batch_size, sum_context):  # type: ignore[override]
        return self.d.decode_step_time_s(batch_size, sum_context)


def test_search_picks_the_layouts_with_the_highest_goodput_per_gpu() -> None:
    sim = make_sim(PREFILL_SPEEDUP)
    sim._perf_for = lambda shape: PhasePerf(shape.tp) if shape.tp in PREFILL_SPEEDUP else (_ for _ in ()).throw(
        ValueError(f"no profile for tp={shape.tp}"))
    settings = SearchSettings(target=0.9, throughput_bound=False, max_steps=10)
    result = search_placement(sim, 4, 1, settings, unsupported=lambda p: "no pp" if p.pp > 1 else None,
                              target_rate_rps=30.0, verify="point")
    by = {(c.phase, c.parallelism.tp): c for c in result.candidates}
    assert set(by) == {(ph, tp) for ph in ("prefill", "decode") for tp in (1, 2, 4)}
    assert {(ph, p.tp, p.pp) for ph, p, _ in result.skipped} >= {("prefill", 3, 1), ("decode", 1, 2)}
    # faster layouts sustain more; the constructed per-GPU winners are prefill tp2 and decode tp1
    assert by["prefill", 2].max_rate_rps > 2 * by["prefill", 1].max_rate_rps
    assert result.best_prefill is not None and result.best_prefill.parallelism == Parallelism(2, 1)
    assert result.best_decode is not None and result.best_decode.parallelism == Parallelism(1, 1)
    for phase, best in (("prefill", result.best_prefill), ("decode", result.best_decode)):
        assert best.per_gpu_rate == max(c.per_gpu_rate for c in result.candidates if c.phase == phase)
    # every candidate's rate met the target and the next rate up did not
    for c in result.candidates:
        assert c.attainment >= 0.9 and c.search.upper_rps / c.max_rate_rps <= 1.011
    # the chosen plan is the best balanced pair within 4 GPUs (brute force over every pair and count)
    plan = result.plan
    assert plan is not None and plan.n_gpus <= 4
    brute = max(min(n_p * p.max_rate_rps, n_d * d.max_rate_rps) / (n_p * p.parallelism.n_gpus + n_d * d.parallelism.n_gpus)
                for p in result.candidates if p.phase == "prefill" for d in result.candidates if d.phase == "decode"
                for n_p in range(1, 5) for n_d in range(1, 5)
                if n_p * p.parallelism.n_gpus + n_d * d.parallelism.n_gpus <= 4)
    assert plan.per_gpu_rate == pytest.approx(brute)
    # Algorithm 1's own pair (the per-GPU winners) fits too, but a balanced pair may beat it in 4 GPUs
    alg1 = result.alg1_plan
    assert alg1 is not None and (alg1.prefill, alg1.decode) == (Parallelism(2, 1), Parallelism(1, 1))
    assert plan.per_gpu_rate >= alg1.per_gpu_rate
    # replication to 30 req/s with the best layouts, and the end-to-end check at the plan's rate
    rep = result.replication
    assert rep is not None
    assert rep.n_prefill == math.ceil(30.0 / result.best_prefill.max_rate_rps)
    assert rep.n_decode == math.ceil(30.0 / result.best_decode.max_rate_rps)
    assert rep.capacity_rps >= 30.0 and rep.n_nodes == math.ceil(rep.n_gpus / 4)
    assert result.verification is not None and 0 <= result.verification.attainment_at_plan_rate <= 1


def test_a_phase_that_misses_its_slo_unloaded_is_not_simulated() -> None:
    sim = make_sim({1: 0.2})  # prefill 250 ms > the 200 ms TTFT bound
    result = search_placement(sim, 1, 1, SearchSettings(), verify="none")
    prefill = next(c for c in result.candidates if c.phase == "prefill")
    assert prefill.max_rate_rps == 0.0 and prefill.n_sims == 0 and "unloaded" in prefill.note
    assert result.plan is None


def test_throughput_bound_caps_a_decode_instance_the_simulation_cannot_saturate() -> None:
    sim = make_sim({1: 1.0})
    bound = sim.throughput_bound("decode", Parallelism(1, 1), max_seqs=4)
    # Little's law at the largest batch (4): 4 / (100 tokens * (10 + 8) ms)
    assert bound == pytest.approx(4 / (100 * 0.018))
    res = search_placement(sim, 1, 1, SearchSettings(max_seqs=4, throughput_bound=True), verify="none")
    decode = next(c for c in res.candidates if c.phase == "decode")
    assert decode.max_rate_rps <= bound * (1 + 1e-12) and decode.bound_rps == pytest.approx(bound)


# -- attainment agrees with the suite's metrics ------------------------------------------------------
@pytest.mark.parametrize("rate", [2.0, 8.0, 30.0])
def test_attainment_matches_harness_metrics(rate: float) -> None:
    sim = make_sim({1: 1.0, 2: 3.0})
    # 1-4 output tokens after a slow prefill: TPOT must leave the TTFT out (and 1-token requests meet it)
    short = make_sim({1: 1.0}, [RequestSpec(request_id=s.request_id, arrival_s=s.arrival_s, input_length=500,
                                            output_length=1 + s.request_id % 4, block_size=100) for s in unit_specs()])
    p, d = Parallelism(1, 1), Parallelism(2, 1)
    cases = [
        (sim, (sim.pool("prefill", p),), TTFT_S, None),
        (sim, (sim.pool("decode", p),), None, TPOT_S),
        (sim, (sim.pool("prefill", d), sim.pool("decode", p)), TTFT_S, TPOT_S),
        (short, (short.pool("prefill", p), short.pool("decode", p)), None, 0.02),
    ]
    for simulator, pools, ttft, tpot in cases:
        requests = simulator.run(pools, rate)
        slo = SLOConfig(ttft_ms=None if ttft is None else ttft * 1e3, tpot_ms=None if tpot is None else tpot * 1e3)
        expected = summarize([r.to_record() for r in requests], slo)["slo_attainment"]
        assert attainment(requests, ttft, tpot) == pytest.approx(expected)


def test_specs_at_rate_scales_the_unit_rate_arrivals() -> None:
    sim = make_sim({1: 1.0})
    base = [s.arrival_s for s in sim.unit_specs]
    assert [s.arrival_s for s in sim.specs_at(4.0)] == pytest.approx([t / 4.0 for t in base])


# -- replica planning -------------------------------------------------------------------------------
def phase(name: str, tp: int, rate: float) -> PhaseResult:
    return PhaseResult(name, Parallelism(tp, 1), RateSearch(rate, rate * 1.01, 0.95, [(rate, True, 0.95)]))


def test_balance_replicas_within_the_budget() -> None:
    p, d = phase("prefill", 1, 2.0), phase("decode", 1, 5.0)
    per_gpu = balance_replicas(p, d, 4, "per_gpu")
    assert per_gpu is not None and (per_gpu.n_prefill, per_gpu.n_decode) == (2, 1)  # 4 req/s on 3 GPUs
    assert per_gpu.per_gpu_rate == pytest.approx(4 / 3)
    most = balance_replicas(p, d, 4, "rate")
    assert most is not None and (most.n_prefill, most.n_decode, most.rate_rps) == (3, 1, 5.0)
    assert balance_replicas(phase("prefill", 4, 9.0), d, 4) is None  # 4 + 1 GPUs do not fit
    rep = replicate_to_rate(p, d, 10.0, gpus_per_node=4)
    assert (rep.n_prefill, rep.n_decode, rep.n_gpus, rep.n_nodes) == (5, 2, 7, 2)


# -- the job ----------------------------------------------------------------------------------------
def test_the_job_writes_study_and_placement(tmp_path, shared_traces) -> None:
    from harness.studies.placement_search import PLACEMENT_FILE, STUDY_FILE, run_placement_search
    from harness.studies.variants import compose_variant

    cfg = compose_variant(["experiment=distserve_placement", "study.max_requests=60", "study.params.verify=point",
                           "study.params.target_rate_rps=12", "study.params.method=alg1", "~study.params.sensitivity",
                           f"data_dir={shared_traces}"])
    result = run_placement_search(cfg, RunFolder(tmp_path))
    table = pd.read_csv(tmp_path / STUDY_FILE)
    # 4 GPUs: tp in 1..4, tp*pp <= 4 -> 8 layouts per phase; pp > 1 and tp=3 are skipped with a reason
    assert len(table) == 16 and set(table["phase"]) == {"prefill", "decode"}
    assert (table["tp"] * table["pp"] <= 4).all()
    searched = table[table["status"] != "skipped"]
    assert set(zip(searched["tp"], searched["pp"], strict=True)) == {(1, 1), (2, 1), (4, 1)}
    assert table.loc[table["status"] == "skipped", "note"].str.len().gt(0).all()
    assert {"max_rate_rps", "per_gpu_rate", "attainment", "sims", "gpus"} <= set(table.columns)
    assert table["chosen"].sum() == 2
    report = json.loads((tmp_path / PLACEMENT_FILE).read_text())
    chosen = report["chosen"]
    assert chosen["n_gpus"] <= 4
    assert report["per_gpu_goodput_rps"] == pytest.approx(chosen["rate_rps"] / chosen["n_gpus"])
    assert report["replication"]["target_rate_rps"] == 12
    assert report["workload"]["n_requests"] == 60 and report["workload"]["input_len_max"] <= 2048
    assert report["search_wall_s"] > 0 and report["n_simulations"] == searched["sims"].sum() + 1
    assert result.metrics["per_gpu_goodput_rps"] == report["per_gpu_goodput_rps"]
    assert result.metrics["prefill_tp"] == chosen["prefill_tp"] and result.files["placement"] == PLACEMENT_FILE


def test_the_job_rejects_unknown_params(tmp_path) -> None:
    from harness.studies.placement_search import placement_params
    from harness.studies.variants import compose_variant

    cfg = compose_variant(["experiment=distserve_placement", "+study.params.bogus=1"])
    with pytest.raises(ConfigError, match="bogus"):
        placement_params(cfg.study)
