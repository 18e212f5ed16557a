"""The Mooncake capacity presets: ``mooncake_capacity`` (FAST'25's metric, the share of effective requests at
the trace's own load, four systems with vLLM v0.5.1's defaults) and ``mooncake_capacity_rate`` (our rate
sweep) compose as documented, the Mooncake presets read DRAM at 128 GB/s (FAST'25 Table 1), and both run end
to end at a reduced size, with their figures and the report's capacity claims."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest
import yaml

from figures.claims.base import VERDICTS
from figures.claims.mooncake_capacity import CLAIMS
from figures.effective_capacity import plot_effective_capacity
from figures.sim_studies import plot_capacity
from figures.study_tables import JobFolder
from harness.results import RunFolder
from harness.studies import sim_sweep
from harness.studies.variants import compose_variant

PRESET = "experiment=mooncake_capacity"
RATE_PRESET = "experiment=mooncake_capacity_rate"
SYSTEMS = ("mooncake", "vllm", "vllm_prefix_caching", "vllm_chunked_prefill")
# system -> (system.name, prefix caching, chunked prefill, max_num_batched_tokens); None: not a colocated engine knob
EXPECTED = {"vllm": ("vllm_baseline", False, False, 131072),
            "vllm_prefix_caching": ("vllm_baseline", True, False, 131072),
            "vllm_chunked_prefill": ("vllm_baseline", False, True, 512)}


def _variant(preset: str, label: str):
    cfg = compose_variant([preset])
    return compose_variant([preset, *cfg.study.variants[label]])


def test_the_preset_measures_the_share_at_the_traces_own_load(compose):
    cfg = compose([PRESET])
    assert cfg.job == "sim_study" and cfg.study.figure == "effective_capacity"
    assert not (cfg.study.speedups or cfg.study.rates_rps or cfg.study.per_gpu_rates)  # one point: own timestamps
    assert list(cfg.study.tbt_thresholds_ms) == [float(x) for x in range(100, 1001, 100)]
    assert (cfg.slo.ttft_ms, cfg.model.name, cfg.hardware.name) == (30000, "llama3_1_70b", "a800_80gb")
    assert sorted(cfg.study.variants) == sorted(f"{t}/{s}" for t in ("conversation", "synthetic") for s in SYSTEMS)


@pytest.mark.parametrize("trace", ["conversation", "synthetic"])
@pytest.mark.parametrize("system", list(EXPECTED))
def test_the_vllm_baselines_use_vllm_0_5_1_defaults(trace, system):
    cfg = _variant(PRESET, f"{trace}/{system}")
    name, prefix, chunked, budget = EXPECTED[system]
    assert (cfg.system.name, cfg.system.colocated_instances, cfg.system.router) == (name, 16, "round_robin")
    assert (cfg.system.prefix_caching, cfg.engine.chunked_prefill, cfg.engine.max_num_batched_tokens) == \
        (prefix, chunked, budget)
    assert cfg.engine.max_num_seqs == 256 and cfg.engine.colocated.tp == 8
    assert cfg.workload.name == f"mooncake_{trace}"
    if not chunked:  # v0.5.1: max(max_model_len, 2048) without chunked prefill
        assert budget == max(cfg.model.max_model_len, 2048)


def test_the_mooncake_variant_is_8p_8d_with_the_pool():
    cfg = _variant(PRESET, "conversation/mooncake")
    assert (cfg.system.name, cfg.system.prefill_instances, cfg.system.decode_instances) == ("mooncake", 8, 8)
    assert cfg.system.router == "conductor" and cfg.engine.layerwise_transfer
    assert cfg.engine.kv_pool.dram_tokens_per_node == 3_000_000


@pytest.mark.parametrize("preset", ["mooncake_capacity", "mooncake_capacity_rate", "mooncake_scheduling",
                                    "mooncake_rejection"])
def test_mooncake_presets_read_dram_at_128_gbps(compose, preset):
    assert compose([f"experiment={preset}"]).engine.kv_pool.dram_bandwidth_gbps == 128.0  # FAST'25 Table 1


def test_other_presets_keep_the_default_dram_bandwidth(compose):
    assert compose([]).engine.kv_pool.dram_bandwidth_gbps == 25.0


def test_the_rate_preset_is_the_same_deployments_swept_over_speed(compose):
    cfg, base = compose([RATE_PRESET]), compose([PRESET])
    assert cfg.experiment_name == "mooncake_capacity_rate" and cfg.study.figure == "capacity"
    assert 1.0 in cfg.study.speedups and len(cfg.study.speedups) > 1
    assert list(cfg.study.tbt_thresholds_ms) == [100.0, 200.0, 300.0]
    assert dict(cfg.study.variants) == dict(base.study.variants)


def _run(tmp_path: Path, monkeypatch, preset: str, *overrides: str, data_dir: Path) -> Path:
    """The preset's sweep as ``python -m harness`` runs it (the variants see the job's overrides)."""
    job = [preset, f"data_dir={data_dir}", "engine.progress=false", *overrides]
    monkeypatch.setattr(sim_sweep, "job_overrides", lambda: list(job))
    cfg = compose_variant(job)
    sim_sweep.run_sim_sweep(cfg, RunFolder(tmp_path))
    config = {"experiment_name": cfg.experiment_name, "slo": {"ttft_ms": cfg.slo.ttft_ms},
              "study": {"figure": cfg.study.figure}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    return tmp_path


def test_reduced_run_end_to_end(tmp_path, monkeypatch, shared_traces):
    job = _run(tmp_path, monkeypatch, PRESET, "study.max_requests=40", data_dir=shared_traces)
    table = pd.read_csv(job / "study.csv")
    assert len(table) == 8 and (table["n_issued"] == 40).all()
    assert not (job / "capacity.csv").exists()  # no load sweep: no rate capacity
    paths = plot_effective_capacity(job)
    assert sorted(p.name for p in paths) == ["effective_capacity.csv", "effective_capacity.png"]
    plotted = pd.read_csv(job / "figures" / "effective_capacity.csv")
    assert set(plotted.loc[plotted["source"] == "paper", "trace"]) == {"conversation", "synthetic"}  # paper gains
    plotted = plotted[plotted["measure"] == "effective_share"]
    assert len(plotted) == 2 * 4 * 10  # trace x system x threshold
    one = plotted[(plotted["variant"] == "conversation/vllm") & (plotted["tbt_threshold_ms"] == 200)]
    assert one["effective_share"].tolist() == pytest.approx(
        table.loc[table["variant"] == "conversation/vllm", "attainment_tbt_200ms"].tolist())  # read, not recomputed
    shares = plotted.groupby("variant")["effective_share"]
    assert (shares.apply(lambda s: s.is_monotonic_increasing)).all()  # a looser TBT bound never loses requests
    for claim in CLAIMS:
        outcome = claim.compute(JobFolder(job))
        assert outcome.verdict in VERDICTS and "over" in outcome.value


def test_reduced_rate_sweep_end_to_end(tmp_path, monkeypatch, shared_traces):
    job = _run(tmp_path, monkeypatch, RATE_PRESET, "study.max_requests=30", "study.speedups=[0.5,1.0]",
               data_dir=shared_traces)
    table = pd.read_csv(job / "study.csv")
    assert len(table) == 8 * 2 and set(table["speedup"]) == {0.5, 1.0}
    paths = plot_capacity(job)
    assert {p.name for p in paths} >= {"capacity.png", "capacity_attainment.png"}
    cap = pd.read_csv(job / "capacity.csv")
    assert set(cap["variant"]) == set(table["variant"]) and not math.isnan(cap["capacity"].max())
    assert all(claim.compute(JobFolder(job)).verdict in VERDICTS for claim in CLAIMS)  # judged at speedup 1
