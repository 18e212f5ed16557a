"""Loads sized to the host: the saturation point's steady completion rate, the points derived from it, and the
refusals (the simulator, a workload too short for the saturation point, contradictory sweep settings); the
workload is built once."""

from __future__ import annotations

import math
import time

import pandas as pd
import pytest

from harness.host_saturation import point_request_count, saturation_requests, steady_completion_rate
from harness.results import RunFolder
from harness.serve_job import PHASES, plan_serve, run_serve
from systems.contract import EngineResult
from vocab.errors import ConfigError
from vocab.records import RequestRecord, RequestStatus
from vocab.result_files import POINTS_FILE

SERVICE_S = 0.2  # every request takes this long on the scripted deployment


class QueueingDeployment:
    """One server that serves ``slots`` requests at a time, each in ``SERVICE_S``: a closed loop completes
    ``slots / SERVICE_S`` requests per second, an open loop waits when all slots are busy."""

    context_limit = 4096
    kv_block_size = 16

    def __init__(self, slots: int = 4) -> None:
        self.slots = slots
        self.schedules: list[str] = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def run_point(self, requests, folder) -> EngineResult:
        self.schedules.append(requests.schedule.mode)
        free = [0.0] * self.slots
        closed = requests.schedule.mode == "closed"
        records = []
        for spec in requests.specs:
            slot = min(range(self.slots), key=free.__getitem__)
            start = free[slot] if closed else max(free[slot], spec.arrival_s)
            free[slot] = start + SERVICE_S
            first = start + SERVICE_S / 2
            records.append(RequestRecord(
                request_id=spec.request_id, status=RequestStatus.OK, arrival_s=spec.arrival_s if not closed else start,
                sent_s=spec.arrival_s if not closed else start, first_token_s=first, finish_s=start + SERVICE_S,
                input_length=spec.input_length, output_length=2, n_out=2, chunk_times_s=(first, start + SERVICE_S)))
        return EngineResult(records=tuple(records))

    def check_health(self) -> None:
        return None

    def describe(self) -> dict:
        return {}


WORKLOAD = ["engine=vllm", "workload=shared_prefix", "workload.num_groups=4", "workload.prompts_per_group=30",
            "workload.shared_prefix_len=64", "workload.question_len=16", "workload.output_len=2",
            "system.colocated_instances=1", "slo.ttft_ms=1000", "slo.tpot_ms=1000"]


def test_steady_rate_leaves_out_ramp_up_and_drain() -> None:
    recs = [RequestRecord(i, RequestStatus.OK, 0, 0, 0, 1.0 + 0.1 * i, 8, 1, 1) for i in range(40)]
    rate, span = steady_completion_rate(recs, concurrency=4)
    assert rate == pytest.approx(10.0) and span == pytest.approx(3.1)
    assert math.isnan(steady_completion_rate(recs[:9], concurrency=4)[0])  # too few completions for a steady stretch


def test_points_are_fractions_of_the_saturation_rate_measured_first(compose, tmp_path) -> None:
    cfg = compose([*WORKLOAD, "sweep.saturation_fractions=[0.5,0.8]", "sweep.saturation_concurrency=4",
                   "sweep.saturation_requests=40", "sweep.point_duration_s=5", "sweep.min_point_requests=10",
                   "sweep.max_point_requests=100"])
    deployment = QueueingDeployment(slots=4)
    result = run_serve(cfg, RunFolder(tmp_path), lambda c, f: deployment)
    assert deployment.schedules == ["closed", "open", "open"]  # the capacity point first
    assert result.metrics["saturation_rps"] == pytest.approx(4 / SERVICE_S)
    points = pd.read_csv(tmp_path / POINTS_FILE)
    assert points["rate_rps"].tolist() == pytest.approx([10.0, 16.0])
    assert points["saturation_fraction"].tolist() == pytest.approx([0.5, 0.8])
    assert points["n_issued"].tolist() == [50, 80]  # rate x point_duration_s
    assert points["saturation_rps"].tolist() == pytest.approx([20.0, 20.0])


def test_an_open_loop_beyond_saturation_is_reported_overloaded(compose, tmp_path) -> None:
    cfg = compose([*WORKLOAD, "sweep.saturation_fractions=[1.8]", "sweep.saturation_concurrency=2",
                   "sweep.saturation_requests=20", "sweep.point_duration_s=6", "sweep.max_point_requests=110",
                   "validity.overload_min_ttft_ms=100"])
    result = run_serve(cfg, RunFolder(tmp_path), lambda c, f: QueueingDeployment(slots=2))
    assert result.validity["valid"] is False
    assert any(r.startswith("overloaded") and "saturation rate of 10.0 req/s" in r for r in result.validity["reasons"])


def test_saturation_sizing_refusals(compose) -> None:
    with pytest.raises(ConfigError, match="simulator takes fixed sweep.rates_rps"):
        plan_serve(compose([*WORKLOAD[1:], "engine=sim", "sweep.saturation_fractions=[0.5]"]))
    with pytest.raises(ConfigError, match="has only 8 requests"):
        plan_serve(compose([*WORKLOAD, "workload.prompts_per_group=2", "sweep.saturation_fractions=[0.5]",
                            "sweep.saturation_requests=48"]))
    for bad, match in ((["sweep.saturation_fractions=[0.5]", "sweep.rates_rps=[1.0]"], "not both"),
                       (["sweep.saturation_fractions=[2.5]"], r"in \(0, 2\]"),
                       (["sweep.saturation_fractions=[0.5]", "sweep.saturation_requests=10"], "at least 3 x"),
                       (["sweep.min_point_requests=50", "sweep.max_point_requests=20"], "exceeds")):
        with pytest.raises(ConfigError, match=match):
            compose([*WORKLOAD, *bad])


def test_saturation_requests_are_a_closed_loop_over_the_first_requests(compose) -> None:
    cfg = compose([*WORKLOAD, "sweep.saturation_fractions=[0.5]", "sweep.saturation_concurrency=6",
                   "sweep.saturation_requests=30", "sweep.min_point_requests=40", "sweep.max_point_requests=60",
                   "sweep.point_duration_s=10"])
    plan = plan_serve(cfg)
    assert plan.points == [] and plan.saturation_requests is not None
    closed = plan.saturation_requests
    assert closed.schedule.mode == "closed" and closed.schedule.concurrency == 6 and len(closed.specs) == 30
    assert closed.specs == saturation_requests(cfg, plan.workload).specs
    assert [point_request_count(cfg, r) for r in (1.0, 5.0, 100.0)] == [40, 50, 60]


@pytest.mark.parametrize("sweep, built", [
    (["sweep.rates_rps=[1.0,2.0,3.0]"], 3),  # one build per point, all before the deployment starts
    (["sweep.saturation_fractions=[0.5,0.8]", "sweep.saturation_concurrency=4", "sweep.saturation_requests=40",
      "sweep.point_duration_s=5", "sweep.min_point_requests=10", "sweep.max_point_requests=100"], 3),
])
def test_a_serving_job_builds_each_workload_once(compose, tmp_path, monkeypatch, sweep, built) -> None:
    """The workload config is typed once, each point's requests are built once (with saturation fractions: the
    saturation point's before the deployment starts, each sized point once its rate is known), none is
    thrown away."""
    import harness.host_saturation as host_saturation
    import harness.serve_job as serve_job

    calls: list[str] = []
    for module in (serve_job, host_saturation):
        real = module.build_workload
        monkeypatch.setattr(module, "build_workload",
                            lambda wcfg, data_dir=None, real=real: calls.append(wcfg.arrival.kind) or real(wcfg, data_dir))
    typed: list[object] = []
    real_typed = serve_job.to_workload_config
    monkeypatch.setattr(serve_job, "to_workload_config", lambda node: typed.append(node) or real_typed(node))
    cfg = compose([*WORKLOAD, *sweep])
    deployment = QueueingDeployment(slots=4)
    run_serve(cfg, RunFolder(tmp_path), lambda c, f: deployment)
    assert len(typed) == 1 and len(calls) == built
    assert len(deployment.schedules) == built  # every request built was served


class SlowPhases(QueueingDeployment):
    """The scripted deployment with a start-up, a shut-down and a time per point of known length."""

    def __init__(self) -> None:
        super().__init__(slots=4)

    def __enter__(self):
        time.sleep(0.3)
        return self

    def __exit__(self, *exc):
        time.sleep(0.2)
        return False

    def run_point(self, requests, folder) -> EngineResult:
        time.sleep(0.1)
        return super().run_point(requests, folder)


def test_the_job_reports_where_its_wall_time_went(compose, tmp_path) -> None:
    cfg = compose([*WORKLOAD, "sweep.saturation_fractions=[0.5,0.8]", "sweep.saturation_concurrency=4",
                   "sweep.saturation_requests=40", "sweep.point_duration_s=5", "sweep.min_point_requests=10",
                   "sweep.max_point_requests=100"])
    start = time.perf_counter()
    result = run_serve(cfg, RunFolder(tmp_path), lambda c, f: SlowPhases())
    total = time.perf_counter() - start
    phases = {k: result.metrics[k] for k in PHASES}
    assert phases["startup_wall_s"] >= 0.3 and phases["shutdown_wall_s"] >= 0.2
    assert phases["capacity_probe_wall_s"] >= 0.1 and phases["points_wall_s"] >= 0.2  # one closed loop, two points
    assert sum(phases.values()) <= total
