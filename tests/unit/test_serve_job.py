"""The serving job's orchestration, driven by a scripted deployment (a test double that fabricates
timings from the schedule): points, per-point metrics, partial records on failure, the figure."""

from __future__ import annotations

import pandas as pd
import pytest
from omegaconf import OmegaConf

from figures.serving import plot_latency_vs_rate
from harness.config import Config, validate
from harness.engines import DeploymentError, EngineResult
from harness.records import RequestRecord, RequestStatus
from harness.results import RunFolder, load_records
from harness.serve_job import POINTS_FILE, run_serve
from harness.slo import SLOConfig
from workloads.config import ArrivalConfig, SharedPrefixConfig


class ScriptedDeployment:
    """Serves every request in 50 ms TTFT and 10 ms per further token; can die after N points."""

    context_limit = 4096
    kv_block_size = 16

    def __init__(self, die_after_points: int | None = None) -> None:
        self.points_run = 0
        self.die_after_points = die_after_points
        self.closed = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.closed = True
        return False

    def run_point(self, requests, folder) -> EngineResult:
        self.points_run += 1
        records = []
        for spec in requests.specs:
            chunks = tuple(spec.arrival_s + 0.05 + 0.01 * k for k in range(spec.output_length))
            records.append(RequestRecord(
                request_id=spec.request_id, status=RequestStatus.OK, arrival_s=spec.arrival_s,
                sent_s=spec.arrival_s, first_token_s=chunks[0], finish_s=chunks[-1],
                input_length=spec.input_length, output_length=spec.output_length, n_out=spec.output_length,
                chunk_times_s=chunks, instance="fake0"))
        return EngineResult(records=tuple(records), info={"prefix_hit_rate": 0.5})

    def check_health(self) -> None:
        if self.die_after_points is not None and self.points_run >= self.die_after_points:
            raise DeploymentError("instance fake0 died")

    def describe(self) -> dict:
        return {}


def make_cfg(rates: list[float]) -> Config:
    workload = SharedPrefixConfig(name="shared_prefix", kind="shared_prefix", num_groups=2, prompts_per_group=5,
                                  shared_prefix_len=64, question_len=16, output_len=8,
                                  arrival=ArrivalConfig(kind="poisson", rate_rps=5.0))
    raw = OmegaConf.create({"job": "serve", "workload": OmegaConf.structured(workload),
                            "system": {"name": "vllm_baseline", "colocated_instances": 1},
                            "engine": {"name": "sim"}, "slo": OmegaConf.structured(SLOConfig(ttft_ms=100, tpot_ms=20)),
                            "model": {"name": "m", "num_layers": 1, "hidden_size": 8, "num_attention_heads": 1,
                                      "num_kv_heads": 1, "head_dim": 8, "intermediate_size": 8, "vocab_size": 100,
                                      "max_model_len": 4096, "params_billion": 0.001},
                            "hardware": {"name": "h", "peak_tflops_bf16": 1, "mem_bandwidth_gbps": 1, "mem_gib": 1},
                            "sweep": {"rates_rps": rates}})
    merged = OmegaConf.merge(OmegaConf.structured(Config), raw)
    return validate(merged)


def test_two_points_on_one_deployment(tmp_path):
    deployment = ScriptedDeployment()
    result = run_serve(make_cfg([2.0, 8.0]), RunFolder(tmp_path), lambda cfg, folder: deployment)
    assert deployment.points_run == 2 and deployment.closed
    points = pd.read_csv(tmp_path / POINTS_FILE)
    assert points["rate_rps"].tolist() == [2.0, 8.0]
    assert (points["median_ttft_ms"].round(6) == 50.0).all()
    assert (points["median_tpot_ms"].round(6) == 10.0).all()
    assert (points["slo_attainment"] == 1.0).all()
    assert points["engine_prefix_hit_rate"].tolist() == [0.5, 0.5]
    assert points["predicted_prefix_hit_rate"].between(0, 1).all()
    frame = pd.read_parquet(tmp_path / "requests.parquet")
    assert sorted(frame["point"].unique()) == [0, 1] and len(frame) == 20
    assert len(load_records(tmp_path / "requests.parquet")) == 20
    assert [p["rate_rps"] for p in result.metrics["points"]] == [2.0, 8.0]
    assert result.validity["valid"] in (True, False)
    written = plot_latency_vs_rate(tmp_path)
    assert {p.name for p in written} == {"latency_vs_rate.png", "latency_vs_rate.csv"}


def test_single_point_metrics_are_flat(tmp_path):
    result = run_serve(make_cfg([]), RunFolder(tmp_path), lambda cfg, folder: ScriptedDeployment())
    assert result.metrics["n_issued"] == 10
    assert result.metrics["rate_rps"] is None


def test_dead_component_keeps_partial_records_and_fails(tmp_path):
    deployment = ScriptedDeployment(die_after_points=1)
    with pytest.raises(DeploymentError, match="fake0 died"):
        run_serve(make_cfg([2.0, 8.0]), RunFolder(tmp_path), lambda cfg, folder: deployment)
    assert deployment.closed
    frame = pd.read_parquet(tmp_path / "requests.parquet")
    assert frame["point"].unique().tolist() == [0]
    assert len(pd.read_csv(tmp_path / POINTS_FILE)) == 1


def test_rate_sweep_needs_a_rate_driven_arrival(tmp_path):
    cfg = make_cfg([1.0])
    cfg.workload.arrival.kind = "closed_loop"
    cfg.workload.arrival.concurrency = 2
    with pytest.raises(ValueError, match="sweep.rates_rps"):
        run_serve(cfg, RunFolder(tmp_path), lambda c, f: ScriptedDeployment())
