"""The real-run replay study (harness/studies/real_replay.py): its metrics on known answers, the error table on
synthetic "measured" runs made by the simulator itself (zero error; a perturbed run's known error), the layout
mapping and choice, the fit, the figures and the report section; and the preset against the real runs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from figures.real_replay import plot_replay_attainment, plot_replay_overload, plot_replay_quantiles
from figures.real_runs import highest_rate_meeting, measured_attainment
from figures.replay_section import real_replay_section
from figures.study_tables import JobFolder
from harness.results import RunFolder
from harness.studies import real_replay
from harness.studies.real_replay import (
    Latencies,
    ReplayParams,
    RunReplayer,
    fit_adjust,
    overloaded,
    predicted_latencies,
    relative_error,
    run_metrics,
)
from harness.studies.simulate import load_requests, simulate
from harness.studies.variants import compose_variant
from systems.engine_config import ProfileAdjustConfig
from systems.sim.simulated_deployment import SimulatedDeployment
from vocab.errors import ConfigError
from vocab.result_files import REPLAY_FILE, REPLAY_FIT_FILE, REPLAY_RUNS_FILE
from workloads.distserve_runs import parse_run_name

PRESET = "experiment=distserve_real_replay"


# -- metrics on known answers ------------------------------------------------------------------------------

def test_run_metrics_quantiles_and_joint_attainment():
    lat = Latencies(np.array([100.0, 200.0, 300.0, 400.0]), np.array([50.0, 150.0, 50.0, 50.0]))
    m = run_metrics(lat, [(250.0, 100.0), (350.0, 200.0)])
    assert m["ttft_p50"] == pytest.approx(250.0) and m["tpot_p50"] == pytest.approx(50.0)
    assert m["attainment_250_100"] == pytest.approx(25.0)  # only the first: the second misses TPOT
    assert m["attainment_350_200"] == pytest.approx(75.0)


def test_a_request_without_a_token_counts_as_infinitely_late():
    lat = Latencies(np.array([100.0, math.nan]), np.array([10.0, math.nan]))
    m = run_metrics(lat, [(1e9, 1e9)])
    assert m["attainment_1e+09_1e+09"] == pytest.approx(50.0) and m["ttft_p99"] == math.inf


def test_relative_error_and_overload():
    assert relative_error(110.0, 100.0) == pytest.approx(0.10) and relative_error(5.0, 5.0) == 0.0
    flat = np.full(100, 200.0)
    growing = np.linspace(100.0, 5000.0, 100)
    assert not overloaded(flat, 2.0, 0.5) and overloaded(growing, 2.0, 0.5)
    assert not overloaded(np.linspace(100.0, 400.0, 100), 2.0, 0.5)  # grows 4x but stays under 0.5 s


def test_params_name_the_bad_key():
    good = {"runs_dir": "x", "untagged_candidates": ["c21d11"], "fit_runs": {"vllm": []}, "slo_pairs_ms": [[200, 100]]}
    layouts = ["vllm", "c21d12", "c21d11"]
    assert ReplayParams.from_config(good, layouts).slo_pairs_ms == ((200.0, 100.0),)
    with pytest.raises(ConfigError, match="study.params: unknown key"):
        ReplayParams.from_config({**good, "colour": 1}, layouts)
    with pytest.raises(ConfigError, match="no layout named c99d99"):
        ReplayParams.from_config({**good, "untagged_candidates": ["c99d99"]}, layouts)
    with pytest.raises(ConfigError, match="study.params.fit_runs: keys are systems"):
        ReplayParams.from_config({**good, "fit_runs": {"sglang": []}}, layouts)


# -- the whole study on synthetic measured runs -----------------------------------------------------------

LAYOUT_OF = {"vllm-20-1": "vllm", "vllm-20-2": "vllm", "vllm-30-3": "vllm", "distserve-c21d12-20-2": "c21d12",
             "distserve-c21d12-30-3": "c21d12", "distserve-20-1": "c21d11"}


def _write_run(root: Path, name: str, layout: str, layouts: dict, rng: np.random.Generator, ttft_scale: float = 1.0):
    """A workload file of random requests and a "measured" file that is the simulator's own prediction (its
    TTFTs scaled by ``ttft_scale``), in the published files' formats."""
    run = parse_run_name(name)
    n, rate = run.n_requests, run.rate_rps
    starts = np.cumsum(rng.exponential(1.0 / rate, n))
    starts -= starts[0]
    rows = [{"prompt_len": int(rng.integers(50, 1500)), "output_len": int(rng.integers(1, 300)),
             "start_time": float(t)} for t in starts]
    (root / "workload").mkdir(parents=True, exist_ok=True)
    (root / "measured").mkdir(parents=True, exist_ok=True)
    (root / "workload" / f"{name}.exp").write_text(json.dumps(rows), encoding="utf-8")
    cfg = compose_variant([PRESET, *layouts[layout], f"workload.file={root / 'workload' / (name + '.exp')}",
                           "workload.arrival.kind=trace", "workload.max_requests=null"])
    point = simulate(SimulatedDeployment(cfg), load_requests(cfg, cfg.workload))
    t0 = 1000.0
    measured = []
    for r in sorted(point.records, key=lambda r: r.request_id):
        first = r.arrival_s + (r.first_token_s - r.arrival_s) * ttft_scale
        measured.append({"prompt_len": r.input_length, "output_len": r.output_length, "issue_time": t0 + r.arrival_s,
                         "first_token_time": t0 + first, "complete_time": t0 + first + (r.finish_s - r.first_token_s),
                         "ttft_ms": 0.0, "tpot_ms": 0.0, "latency_ms": 0.0})
    (root / "measured" / f"{name}.exp").write_text(repr(measured) + "\n{\n\tnum_requests: " + str(n) + "\n}\n",
                                                   encoding="utf-8")


@pytest.fixture(scope="module")
def synthetic_job(tmp_path_factory, shared_traces):
    root = tmp_path_factory.mktemp("runs")
    layouts = dict(compose_variant([PRESET]).study.variants)
    rng = np.random.default_rng(7)
    for name, layout in LAYOUT_OF.items():
        _write_run(root, name, layout, layouts, rng, ttft_scale=1.5 if name == "vllm-30-3" else 1.0)
    overrides = [PRESET, f"study.params.runs_dir={root}", "engine.progress=false",
                 "study.params.untagged_candidates=[c11d11,c21d11,c21d21]",
                 "study.params.fit_runs.vllm=[vllm-20-1,vllm-20-2]",
                 "study.params.fit_runs.distserve=[distserve-c21d12-20-2]"]
    job = tmp_path_factory.mktemp("job")
    mp = pytest.MonkeyPatch()
    mp.setattr(real_replay, "job_overrides", lambda: overrides)
    try:
        result = real_replay.run_real_replay(compose_variant(overrides), RunFolder(job))
    finally:
        mp.undo()
    (job / "config.yaml").write_text(yaml.safe_dump({"experiment_name": "distserve_real_replay"}), encoding="utf-8")
    return job, result


def test_the_error_table_has_known_answers(synthetic_job):
    job, result = synthetic_job
    table = pd.read_csv(job / REPLAY_FILE)
    runs = pd.read_csv(job / REPLAY_RUNS_FILE).set_index("run")
    assert set(runs.index) == set(LAYOUT_OF)
    # every run but the perturbed one is its own prediction: zero error on every metric
    exact = table[table["run"] != "vllm-30-3"]
    assert np.allclose(exact["error"].astype(float), 0.0, atol=1e-9)
    # vllm-30-3's measured TTFTs are 1.5x the prediction: every TTFT quantile is off by exactly 1/1.5 - 1
    perturbed = table[(table["run"] == "vllm-30-3") & table["metric"].str.startswith("ttft")]
    assert np.allclose(perturbed["error"].astype(float), 1 / 1.5 - 1, atol=1e-9)
    checked = perturbed[perturbed["metric"].isin(["ttft_p50", "ttft_p90"])]  # p99 has no target
    assert set(checked["within"]) == {False} and perturbed.loc[perturbed["metric"] == "ttft_p99", "within"].isna().all()
    assert runs.loc["vllm-30-3", "within_targets"] in (False, "False")
    assert runs.loc["distserve-c21d12-30-3", "within_targets"] in (True, "True")
    assert result.metrics["n_runs_in_target_scope"] == 2 and result.metrics["n_runs_within_targets"] == 1


def test_layouts_roles_and_the_fit(synthetic_job):
    job, result = synthetic_job
    runs = pd.read_csv(job / REPLAY_RUNS_FILE).set_index("run")
    assert dict(runs["layout"]) == LAYOUT_OF  # tagged names map to their layout; the untagged run's is chosen
    assert result.metrics["untagged_layout"] == "c21d11"
    assert dict(runs["role"]) == {"vllm-20-1": "profile fit", "vllm-20-2": "profile fit",
                                  "distserve-c21d12-20-2": "profile fit", "distserve-20-1": "layout choice",
                                  "vllm-30-3": "scored", "distserve-c21d12-30-3": "scored"}
    assert set(runs["n_gpus"]) == {1, 3, 4}
    fit = pd.read_csv(job / REPLAY_FIT_FILE)
    corrections = fit[fit["system"].isin(["vllm", "distserve"])]
    # the "measured" runs are the shipped profile's own predictions: the best correction is none
    assert (corrections["prefill_scale"] == 1.0).all() and (corrections[["step_ms", "seq_ms"]] == 0.0).all().all()
    assert (corrections["objective"] < 1e-20).all()


def test_the_figures_and_the_report_section(synthetic_job):
    job, _ = synthetic_job
    names = sorted(p.name for f in (plot_replay_quantiles, plot_replay_attainment, plot_replay_overload)
                   for p in f(job))
    assert names == ["replay_attainment.csv", "replay_attainment.png", "replay_overload.csv", "replay_overload.png",
                     "replay_quantiles.csv", "replay_quantiles.png"]
    points = pd.read_csv(job / "figures" / "replay_quantiles.csv")
    assert len(points) == len(LAYOUT_OF) * 2 * 3  # runs x (TTFT, TPOT) x (p50, p90, p99)
    section = real_replay_section({"distserve_real_replay": JobFolder(job)})
    assert "**1 of 2 target runs meet every target**" in section.body
    assert section.body.count("| `") == len(LAYOUT_OF) and all(p.exists() for p in section.figures)
    assert "Not run" in real_replay_section({}).body


def test_a_workload_file_that_does_not_match_its_measured_run_is_refused(tmp_path, shared_traces):
    layouts = dict(compose_variant([PRESET]).study.variants)
    _write_run(tmp_path, "vllm-20-1", "vllm", layouts, np.random.default_rng(1))
    measured = tmp_path / "measured" / "vllm-20-1.exp"
    lines = measured.read_text(encoding="utf-8").splitlines()
    rows = eval(lines[0])  # noqa: S307 (our own file, written above)
    measured.write_text(repr(rows[:-1]) + "\n", encoding="utf-8")
    cfg = compose_variant([PRESET, *layouts["vllm"], f"workload.file={tmp_path / 'workload' / 'vllm-20-1.exp'}",
                           "workload.arrival.kind=trace"])
    with pytest.raises(ConfigError, match="19 requests measured, but its workload file has 20"):
        RunReplayer(parse_run_name("vllm-20-1"), "vllm", cfg, measured, [(200.0, 100.0)])


# -- the preset on the real runs ----------------------------------------------------------------------------

def _replayer(name: str, layout: str, root: Path) -> RunReplayer:
    layouts = dict(compose_variant([PRESET]).study.variants)
    cfg = compose_variant([PRESET, *layouts[layout], f"workload.file={root / 'workload' / (name + '.exp')}",
                           "workload.arrival.kind=trace", "workload.max_requests=null"])
    return RunReplayer(parse_run_name(name), layout, cfg, root / "measured" / f"{name}.exp", [(200.0, 100.0)])


@pytest.mark.parametrize("system, suffix", [("vllm", "/vLLM"), ("distserve", "/DistServe")])
def test_the_distserve_presets_carry_the_correction_the_replay_fits(system, suffix, shared_traces, compose):
    """The DistServe presets type in the replay's fitted correction: every variant of the system must carry what a
    fresh fit gives, except the shipped-profile sensitivity runs, which carry none."""
    root = shared_traces / "distserve_opt13b_a100"
    names = compose([PRESET]).study.params["fit_runs"][system]
    fitted, _, _ = fit_adjust([_replayer(n, "vllm" if system == "vllm" else "c21d12", root) for n in names])
    want = ProfileAdjustConfig(round(fitted.prefill_scale, 6), round(fitted.step_ms, 6), round(fitted.seq_ms, 6))
    checked = 0
    for experiment in ("distserve_slo_attainment", "distserve_tighter_slo"):
        variants = compose([f"experiment={experiment}"]).study.variants
        for label in [v for v in variants if v.endswith(suffix) and "/" in v]:
            if label.split("/")[0] in ("shared_prefix_chat", "azure_conv") and experiment == "distserve_slo_attainment":
                continue  # the four-system comparison on other workloads keeps the shipped profiles
            used = compose_variant([f"experiment={experiment}", *variants[label]]).engine.profile_adjust
            assert used == (ProfileAdjustConfig() if "shipped_profile" in label else want), (experiment, label)
            checked += 1
    assert checked >= 6


def test_predicted_latencies_follow_distserves_definitions(shared_traces):
    rep = _replayer("distserve-c21d12-400-4", "c21d12", shared_traces / "distserve_opt13b_a100")
    lat, metrics, point = rep.predict(ProfileAdjustConfig())
    records = sorted(point.records, key=lambda r: r.request_id)
    r = next(r for r in records if r.n_out > 2)
    i = records.index(r)
    assert lat.ttft_ms[i] == pytest.approx((r.first_token_s - r.arrival_s) * 1e3)
    assert lat.tpot_ms[i] == pytest.approx((r.finish_s - r.first_token_s) * 1e3 / (r.n_out - 1))
    one = [k for k, r in enumerate(records) if r.n_out == 1]
    assert all(lat.tpot_ms[k] == 0.0 for k in one)
    assert predicted_latencies(records).ttft_ms.shape == (400,)


def test_the_measured_runs_attainment_for_the_figures_and_the_report(shared_traces):
    real = measured_attainment(250.0, 100.0, str(shared_traces))
    assert len(real) == 24 and set(real.groupby("system")["n_gpus"].first()) == {1, 3, 4}
    vllm = real[real["run"] == "vllm-100-1"].iloc[0]
    assert vllm["per_gpu_rate"] == 1.0 and vllm["slo_attainment"] == pytest.approx(0.86)
    best, lowest = highest_rate_meeting(real, "vLLM (real A100)", 0.9)
    assert best is None and lowest == 1.0  # no measured vLLM run reaches 90% at 250/100 ms
    best, _ = highest_rate_meeting(real, "DistServe c21d12 (real A100)", 0.9)
    assert best == 1.5  # distserve-c21d12-600-6: 6 req/s on 4 GPUs
    assert measured_attainment(250.0, 100.0, str(shared_traces / "nowhere")).empty
