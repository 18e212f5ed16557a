"""The serving job's orchestration, driven by a scripted deployment (a test double that fabricates
timings from the schedule): points, per-point metrics, partial records on failure, the figure, and the
last point's records written in the background."""

from __future__ import annotations

import pandas as pd
import pytest

from figures.serving import plot_latency_vs_rate
from harness.config import Config
from harness.results import RunFolder, load_records
from harness.serve_job import run_serve
from systems.contract import DeploymentError, EngineResult
from vocab.errors import ConfigError
from vocab.records import RequestRecord, RequestStatus
from vocab.result_files import POINTS_FILE, REQUESTS_FILE


class ScriptedDeployment:
    """Serves every request in 50 ms TTFT and 10 ms per further token, sending it ``send_lag_s`` after its
    scheduled arrival; can die after N points."""

    context_limit = 4096
    kv_block_size = 16

    def __init__(self, die_after_points: int | None = None, send_lag_s: float = 0.0) -> None:
        self.points_run = 0
        self.die_after_points = die_after_points
        self.send_lag_s = send_lag_s
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
                sent_s=spec.arrival_s + self.send_lag_s, first_token_s=chunks[0], finish_s=chunks[-1],
                input_length=spec.input_length, output_length=spec.output_length, n_out=spec.output_length,
                chunk_times_s=chunks, instance="fake0"))
        return EngineResult(records=tuple(records), info={"prefix_hit_rate": 0.5})

    def check_health(self) -> None:
        if self.die_after_points is not None and self.points_run >= self.die_after_points:
            raise DeploymentError("instance fake0 died")

    def describe(self) -> dict:
        return {}


WORKLOAD = ["workload=shared_prefix", "workload.num_groups=2", "workload.prompts_per_group=5",
            "workload.shared_prefix_len=64", "workload.question_len=16", "workload.output_len=8",
            "workload.arrival.rate_rps=5.0", "system.colocated_instances=1", "slo.ttft_ms=100", "slo.tpot_ms=20"]


@pytest.fixture
def make_cfg(compose):
    def make(rates: list[float], *overrides: str) -> Config:
        return compose([*WORKLOAD, f"sweep.rates_rps=[{','.join(str(r) for r in rates)}]", *overrides])

    return make


def test_two_points_on_one_deployment(make_cfg, tmp_path):
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
    frame = pd.read_parquet(tmp_path / REQUESTS_FILE)
    assert sorted(frame["point"].unique()) == [0, 1] and len(frame) == 20
    assert len(load_records(tmp_path / REQUESTS_FILE)) == 20
    assert [p["rate_rps"] for p in result.metrics["points"]] == [2.0, 8.0]
    assert result.validity["valid"] is True  # every request left on schedule and finished
    assert [p["valid"] for p in result.validity["points"]] == [True, True]
    written = plot_latency_vs_rate(tmp_path)
    assert {p.name for p in written} == {"latency_vs_rate.png", "latency_vs_rate.csv"}


def test_single_point_metrics_are_flat(make_cfg, tmp_path):
    result = run_serve(make_cfg([]), RunFolder(tmp_path), lambda cfg, folder: ScriptedDeployment())
    assert result.metrics["n_issued"] == 10
    assert result.metrics["rate_rps"] is None


def test_dead_component_keeps_partial_records_and_fails(make_cfg, tmp_path):
    deployment = ScriptedDeployment(die_after_points=1)
    with pytest.raises(DeploymentError, match="fake0 died"):
        run_serve(make_cfg([2.0, 8.0]), RunFolder(tmp_path), lambda cfg, folder: deployment)
    assert deployment.closed
    frame = pd.read_parquet(tmp_path / REQUESTS_FILE)
    assert frame["point"].unique().tolist() == [0]
    assert len(pd.read_csv(tmp_path / POINTS_FILE)) == 1


def test_late_sends_make_the_points_invalid(make_cfg, tmp_path):
    result = run_serve(make_cfg([2.0, 8.0]), RunFolder(tmp_path), lambda cfg, folder: ScriptedDeployment(send_lag_s=0.5))
    assert result.validity["valid"] is False
    assert all(not p["valid"] for p in result.validity["points"])
    assert pd.read_csv(tmp_path / POINTS_FILE)["valid"].tolist() == [False, False]


def test_rate_sweep_needs_a_rate_driven_arrival(make_cfg):
    with pytest.raises(ConfigError, match="sweep.rates_rps: sets the rate of a poisson or gamma arrival process"):
        make_cfg([1.0], "workload.arrival.kind=closed_loop", "workload.arrival.concurrency=2")


def test_the_serving_figure_is_drawn_from_points_csv_alone(make_cfg, tmp_path):
    run_serve(make_cfg([2.0, 8.0]), RunFolder(tmp_path), lambda cfg, folder: ScriptedDeployment())
    (tmp_path / REQUESTS_FILE).unlink()
    assert {p.name for p in plot_latency_vs_rate(tmp_path)} == {"latency_vs_rate.png", "latency_vs_rate.csv"}


def test_a_last_point_that_fails_after_its_records_keeps_them(make_cfg, tmp_path, monkeypatch):
    """A failure in the last point's summary still leaves the records measured written when run_serve raises."""
    import harness.serve_job as serve_job

    calls = []
    real_summarize = serve_job.summarize

    def summarize(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("summary failed")
        return real_summarize(*args, **kwargs)

    monkeypatch.setattr(serve_job, "summarize", summarize)
    with pytest.raises(RuntimeError, match="summary failed"):
        run_serve(make_cfg([2.0, 8.0]), RunFolder(tmp_path), lambda cfg, folder: ScriptedDeployment())
    assert pd.read_parquet(tmp_path / REQUESTS_FILE)["point"].unique().tolist() == [0, 1]
    assert len(pd.read_csv(tmp_path / POINTS_FILE)) == 1


@pytest.mark.integration
def test_a_failed_write_fails_the_job(compose, tmp_path, monkeypatch):
    """``python -m harness job=serve``: a ``requests.parquet`` that cannot be written (disk full) ends the
    job ``failed`` with the reason, and no partial file is left."""
    import json

    from harness.app import JobContext, run_job

    real_to_parquet = pd.DataFrame.to_parquet

    def to_parquet(self, path, *args, **kwargs):
        if f".{REQUESTS_FILE}." in str(path):
            raise OSError(28, "No space left on device")
        return real_to_parquet(self, path, *args, **kwargs)

    monkeypatch.setattr(pd.DataFrame, "to_parquet", to_parquet)
    overrides = [*WORKLOAD, "engine=sim", "figures=false"]
    ctx = JobContext(folder=RunFolder(tmp_path), experiment="e", job="job", choices={}, overrides=overrides)
    with pytest.raises(OSError, match="No space left"):
        run_job(compose(overrides, validated=False), ctx)
    summary = json.loads((tmp_path / "summary.json").read_text(encoding="utf-8"))
    assert summary["status"] == "failed"
    assert "No space left on device" in summary["reason"]
    assert (tmp_path / POINTS_FILE).is_file() and not (tmp_path / REQUESTS_FILE).exists()
    assert not [p for p in tmp_path.iterdir() if ".tmp" in p.name]
