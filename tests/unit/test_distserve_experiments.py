"""DistServe's experiments as its artifact ran them: the presets compose to the artifact's settings, vLLM is
timed with DistServe's vLLM profile, and reduced runs of the sweeps end to end feed the claims."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import yaml

from figures.claims import distserve
from figures.claims.base import VERDICTS
from figures.sim_studies import plot_slo_attainment
from figures.slo_scale import plot_slo_scale
from figures.study_tables import JobFolder
from harness.results import RunFolder
from harness.studies import sim_sweep
from harness.studies.variants import compose_variant
from systems.sim.simulated_deployment import SimulatedDeployment
from vocab.result_files import CAPACITY_FILE, SLO_CROSSING_FILE, SLO_SCALE_FILE

TIGHTER = "experiment=distserve_tighter_slo"
GOODPUT = "experiment=distserve_slo_attainment"
PLACEMENT = "experiment=distserve_placement"


@pytest.mark.parametrize(("system", "role", "profile"), [
    ("system=vllm_baseline", "colocated", "vllm"),
    ("system=distserve", "prefill", "distserve"),
    ("system=distserve", "decode", "distserve"),
])
def test_vllm_is_timed_with_distserves_vllm_profile(compose, system, role, profile):
    cfg = compose([system, "model=opt_13b", "hardware=a100_80gb", "engine.perf_model=distserve"])
    perf = SimulatedDeployment(cfg).perf[role]
    assert perf.describe()["source"].endswith(f"profiler-a100-80g.{profile}.json")


def test_the_vllm_profile_is_slower_than_distserves_at_tp1(compose):
    common = ["model=opt_13b", "hardware=a100_80gb", "engine.perf_model=distserve"]
    vllm = SimulatedDeployment(compose(["system=vllm_baseline", *common])).perf["colocated"]
    ours = SimulatedDeployment(compose(["system=distserve", *common])).perf["prefill"]
    assert vllm.prefill_time_s(1000, 1000**2) > ours.prefill_time_s(1000, 1000**2)


def test_tighter_slo_preset_is_the_artifacts_fig8_lower_run(compose):
    cfg = compose([TIGHTER])
    study = cfg.study
    assert (cfg.model.name, cfg.slo.ttft_ms, cfg.slo.tpot_ms) == ("opt_13b", 250, 100)
    assert 1.5 in study.per_gpu_rates and list(study.slo_scales) == [1.6, 1.4, 1.2, 1.0, 0.8, 0.6, 0.4]
    # the artifact's run: 100 requests per GPU (the @n100 sensitivity run); judged: all of DistServe's requests
    for tag, counts in (("distserve_sharegpt@n100", (300, 100)), ("distserve_sharegpt", (1600, 1600))):
        ds = compose_variant([TIGHTER, *study.variants[f"{tag}/DistServe"]])
        vl = compose_variant([TIGHTER, *study.variants[f"{tag}/vLLM"]])
        assert ds.workload.name == vl.workload.name == "distserve_sharegpt"
        assert (ds.workload.max_requests, vl.workload.max_requests) == counts
    assert (ds.system.prefill_instances, ds.engine.prefill.tp, ds.system.decode_instances, ds.engine.decode.tp) == \
        (1, 2, 1, 1)
    assert (vl.system.colocated_instances, vl.engine.colocated.tp, vl.engine.chunked_prefill) == (1, 1, False)
    assert (vl.engine.max_num_batched_tokens, vl.engine.max_num_seqs) == (16384, 1024)
    assert SimulatedDeployment(ds).n_gpus == 3 and SimulatedDeployment(vl).n_gpus == 1


def test_goodput_preset_has_the_artifacts_runs_on_distserves_own_requests(compose):
    cfg = compose([GOODPUT])
    assert {0.25, 0.5, 1.0, 1.5, 2.0, 2.25, 2.5, 3.0} <= set(cfg.study.per_gpu_rates)
    for tag, workload in (("distserve_sharegpt", "distserve_sharegpt"), ("sharegpt", "sharegpt")):
        ds = compose_variant([GOODPUT, *cfg.study.variants[f"{tag}/DistServe"]])
        vl = compose_variant([GOODPUT, *cfg.study.variants[f"{tag}/vLLM"]])
        assert ds.workload.name == vl.workload.name == workload
        assert SimulatedDeployment(ds).n_gpus == 3 and SimulatedDeployment(vl).n_gpus == 1
        assert SimulatedDeployment(vl).perf["colocated"].describe()["engine"] == "vllm"
        assert ds.engine.kv_handoff == "pull"  # DistServe's decode pulls a KV when it has room
    assert distserve.JUDGED_WORKLOAD == "distserve_sharegpt"


def test_placement_preset_is_the_readme_search(compose):
    cfg = compose([PLACEMENT])
    params = cfg.study.params
    assert (params["method"], params["max_per_gpu_rate"], params["esp"], cfg.study.max_requests) == \
        ("simdistserve", 5.0, 0.25, 300)
    assert (cfg.workload.name, cfg.slo.ttft_ms, cfg.slo.tpot_ms, cfg.engine.iteration_overhead) == \
        ("distserve_sharegpt", 200, 100, "simdistserve")
    assert params["sensitivity"]["sarathi_sharegpt_lengths"] == {"workload": "sharegpt"}


def _run(tmp_path: Path, monkeypatch, *job: str) -> Path:
    """A preset's sweep as ``python -m harness`` runs it (the variants see the job's overrides)."""
    monkeypatch.setattr(sim_sweep, "job_overrides", lambda: list(job))
    cfg = compose_variant(list(job))
    sim_sweep.run_sim_sweep(cfg, RunFolder(tmp_path))
    config = {"experiment_name": cfg.experiment_name, "slo": {"ttft_ms": cfg.slo.ttft_ms, "tpot_ms": cfg.slo.tpot_ms},
              "workload": {"name": cfg.workload.name}, "study": {"figure": cfg.study.figure}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    return tmp_path


def test_reduced_tighter_slo_run_end_to_end(tmp_path, monkeypatch, shared_traces):
    job = _run(tmp_path, monkeypatch, TIGHTER, f"data_dir={shared_traces}", "engine.progress=false",
               "study.max_requests=30", "study.per_gpu_rates=[1.5]")
    scales = pd.read_csv(job / SLO_SCALE_FILE)
    variants = compose_variant([TIGHTER]).study.variants
    assert len(scales) == len(variants) * 7 and set(scales["per_gpu_rate"]) == {1.5}
    # a looser SLO never loses a request
    for _, part in scales.groupby("variant"):
        assert part.sort_values("slo_scale")["attainment"].is_monotonic_increasing
    crossings = pd.read_csv(job / SLO_CROSSING_FILE)
    assert set(crossings["variant"]) == set(variants) and set(crossings["bound"]) <= {"exact", "at_most", "above_range"}
    assert sorted(p.name for p in plot_slo_scale(job)) == ["slo_scale.csv", "slo_scale.png"]
    outcome = distserve.distserve_tighter_slo(JobFolder(job))
    assert outcome.verdict in VERDICTS and "distserve_sharegpt at 1.5 req/s/GPU" in outcome.value


def test_reduced_goodput_run_end_to_end(tmp_path, monkeypatch, shared_traces):
    job = _run(tmp_path, monkeypatch, GOODPUT, f"data_dir={shared_traces}", "engine.progress=false",
               "study.max_requests=20", "study.per_gpu_rates=[0.5,2.0,8.0]")
    table = pd.read_csv(job / "study.csv")
    assert {"distserve_sharegpt/vLLM", "distserve_sharegpt/DistServe", "sharegpt/vLLM"} <= set(table["variant"])
    assert (job / CAPACITY_FILE).exists()
    outcome = distserve.distserve_goodput(JobFolder(job))
    assert outcome.verdict in VERDICTS and outcome.value.startswith("distserve_sharegpt:")
    # the DistServe authors' measured runs are quoted in the reason and drawn on DistServe's own requests' panel
    assert "measured runs" in outcome.reason and "vLLM (real A100)" in outcome.reason
    plotted = pd.read_csv([p for p in plot_slo_attainment(job) if p.suffix == ".csv"][0])
    real = plotted[plotted["source"] == "measured"]
    assert len(real) == 24 and set(real["workload"]) == {"distserve_sharegpt"}
    assert set(plotted.loc[plotted["source"] == "simulated", "variant"]) == set(table["variant"])
