"""``job=sim_vs_real`` without servers: a scripted "real" deployment serves each design, the simulator
replays the very requests with a fitted profile, and calibration.csv compares them metric by metric."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from figures.calibration import plot_sim_vs_real
from harness.calibrate import sim_vs_real as svr
from harness.calibrate.job import build_profile
from harness.results import RunFolder
from tests.unit.test_host_saturation import QueueingDeployment
from vocab.errors import ConfigError
from vocab.result_files import CALIBRATION_FILE, STUDY_FILE

PRESET = "experiment=sim_vs_real_cpu"


def synthetic_samples() -> list[dict]:
    out = []
    for n in (64, 512, 1024, 2048):
        out.append({"phase": "prefill", "route": "router", "span": "send", "cell_batch": 1.0, "batch_size": 1.0,
                    "prompt_tokens": float(n), "sum_tokens": float(n), "sum_sq_tokens": float(n * n), "n_seqs": 1.0,
                    "time_ms": 8.0 + 0.02 * n})
    for ctx in (128, 2048):
        for b in (1, 4, 16):
            out.append({"phase": "decode", "route": "router", "batch_size": float(b), "context_tokens": float(ctx),
                        "sum_context": b * (ctx + 16.0), "time_ms": 2.0 + 0.05 * b})
    for n in (256, 1024, 2048):
        out.append({"phase": "kv_transfer", "prompt_tokens": float(n), "bytes": n * 1024.0,
                    "time_s": 5e-4 + n * 1024.0 / 1e9, "ttft_ms": 60.0})
    return out


@pytest.fixture
def profile_path(compose, tmp_path):
    cal = compose(["experiment=calibrate_cpu"])
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(build_profile(cal, synthetic_samples(), cores="0")))
    return path


def small(compose, *extra: str):
    overrides = [PRESET, "workload.num_groups=4", "workload.prompts_per_group=20", "sweep.saturation_requests=24",
                 "sweep.min_point_requests=20", "sweep.max_point_requests=40", "sweep.point_duration_s=2", *extra]
    return overrides, compose(overrides)


@pytest.mark.integration
def test_every_design_is_served_simulated_and_compared(compose, profile_path, tmp_path, monkeypatch) -> None:
    overrides, cfg = small(compose, f"sim_vs_real.profile={profile_path}", "~study.variants.mooncake",
                           "~study.variants.splitwise", "~sim_vs_real.design_sim_overrides.mooncake")
    monkeypatch.setattr(svr, "job_overrides", lambda: overrides)
    result = svr.run_sim_vs_real(cfg, RunFolder(tmp_path), lambda c, f: QueueingDeployment(slots=4))
    table = pd.read_csv(tmp_path / CALIBRATION_FILE)
    assert set(table["design"]) == {"vllm_baseline", "distserve"}
    assert sorted(table["saturation_fraction"].unique().tolist()) == pytest.approx([0.3, 0.6])
    assert "mean_kv_transfer_ms" in set(table[table["design"] == "distserve"]["metric"])
    assert "mean_kv_transfer_ms" not in set(table[table["design"] == "vllm_baseline"]["metric"])
    row = table[(table["design"] == "vllm_baseline") & (table["metric"] == "median_ttft_ms")].iloc[0]
    assert row["measured"] == pytest.approx(100.0)  # the scripted engine's TTFT: half its 200 ms service
    assert row["rel_error"] == pytest.approx((row["predicted"] - row["measured"]) / row["measured"])
    assert row["goal"] == 0.10 and not row["job_cpu_cores"] < 0  # measured (or nan for a very short point)
    assert table[table["metric"] == "goodput_rps"]["goal"].isna().all()  # only the goal metrics are gated
    study = pd.read_csv(tmp_path / STUDY_FILE)
    assert set(study["source"]) == {"real", "sim"} and len(study) == 8
    assert result.metrics["points"] == 4
    assert {p.name for p in plot_sim_vs_real(tmp_path)} == {"sim_vs_real.png", "sim_vs_real.csv"}


@pytest.mark.integration
def test_a_profile_that_does_not_cover_the_workload_fails_before_any_server(compose, profile_path, tmp_path,
                                                                              monkeypatch) -> None:
    overrides, cfg = small(compose, f"sim_vs_real.profile={profile_path}", "workload.shared_prefix_len=3008")
    monkeypatch.setattr(svr, "job_overrides", lambda: overrides)
    started = []
    with pytest.raises(ConfigError, match="covers prompts of 64..2048 tokens"):
        svr.run_sim_vs_real(cfg, RunFolder(tmp_path), lambda c, f: started.append(c) or QueueingDeployment())
    assert not started


def test_goal_rows(compose) -> None:
    _, cfg = small(compose)
    point = svr.ServedPoint(rate_rps=2.0, requests=None, result=None, validity={"valid": True, "reasons": []},
                            row={"saturation_fraction": 0.5})
    real = {m: 100.0 for m in svr.COMPARED} | {"mean_kv_transfer_ms": 10.0}
    sim = {m: 112.0 for m in svr.COMPARED} | {"mean_kv_transfer_ms": math.nan}
    colocated = svr.rows_for_point("b", False, point, real, sim, cfg)
    assert {r["metric"] for r in colocated} == set(svr.COMPARED)
    median = next(r for r in colocated if r["metric"] == "median_ttft_ms")
    assert median["rel_error"] == pytest.approx(0.12) and median["within_goal"] is False and median["goal"] == 0.10
    pd_rows = svr.rows_for_point("d", True, point, real, sim, cfg)
    assert next(r for r in pd_rows if r["metric"] == "median_tpot_ms")["within_goal"] is True  # 12% < 15%
    assert math.isnan(next(r for r in pd_rows if r["metric"] == "mean_kv_transfer_ms")["rel_error"])  # no prediction


def test_bad_settings_are_refused(compose, tmp_path, monkeypatch) -> None:
    overrides, cfg = small(compose, "sweep.saturation_fractions=[]", "sweep.rates_rps=[1.0]")
    monkeypatch.setattr(svr, "job_overrides", lambda: overrides)
    with pytest.raises(ConfigError, match="sweep.saturation_fractions"):
        svr.run_sim_vs_real(cfg, RunFolder(tmp_path))
    overrides, cfg = small(compose, "+sim_vs_real.design_sim_overrides.nope=['engine.max_num_seqs=2']")
    with pytest.raises(ConfigError, match="nope not among study.variants"):
        svr.run_sim_vs_real(cfg, RunFolder(tmp_path))
    with pytest.raises(ConfigError, match="sim_vs_real.goals.colocated"):
        compose([PRESET, "sim_vs_real.goals.colocated=0"])


def test_the_report_shows_the_simulator_check(tmp_path) -> None:
    from figures.report import simulator_check_section
    from figures.study_tables import JobFolder

    assert "Not run" in "\n".join(simulator_check_section({}))
    pd.DataFrame([
        {"design": "vllm_baseline", "saturation_fraction": 0.3, "metric": "median_ttft_ms", "measured": 10.0,
         "predicted": 11.0, "rel_error": 0.1, "valid": True, "within_goal": True},
        {"design": "distserve", "saturation_fraction": 0.6, "metric": "median_tpot_ms", "measured": 4.0,
         "predicted": 3.0, "rel_error": -0.25, "valid": False, "within_goal": False},
        {"design": "distserve", "saturation_fraction": 0.6, "metric": "goodput_rps", "measured": 4.0,
         "predicted": 4.0, "rel_error": 0.0, "valid": False, "within_goal": None},
    ]).to_csv(tmp_path / CALIBRATION_FILE, index=False)
    text = "\n".join(simulator_check_section({"sim_vs_real_cpu": JobFolder(tmp_path)}))
    assert "| vllm_baseline | 30% of saturation | median_ttft_ms | 10 | 11 | +10% | yes |" in text
    assert "| distserve | 60% of saturation | median_tpot_ms | 4 | 3 | -25% | INVALID point |" in text
    assert "goodput" not in text
