"""The Mooncake presets of Fig. 5, Fig. 10 and Table 3: each composes to the paper's setup, and each runs end
to end at a reduced size (tables, load samples, figures, summary) into a folder its claims can be judged on."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from figures.claims import CLAIMS
from figures.claims.base import VERDICTS, MissingData
from figures.study_tables import JobFolder
from harness.app import JobContext, run_job
from harness.config import compose_config
from harness.results import RunFolder

CLAIMS_BY_KEY = {c.key: c for c in CLAIMS}


def variant_overrides(cfg: Any, label: str) -> dict[str, str]:
    return dict(o.split("=", 1) for o in cfg.study.variants[label])


def test_scheduling_preset_is_the_papers_setup(compose):
    cfg = compose(["experiment=mooncake_scheduling"])
    assert (cfg.system.prefill_instances, cfg.system.decode_instances) == (8, 8)  # 16 nodes
    assert cfg.workload.name == "mooncake_conversation" and cfg.hardware.name == "a800_80gb"
    assert cfg.engine.prefill.tp == cfg.engine.decode.tp == 8
    assert cfg.engine.kv_pool.dram_tokens_per_node == 3_000_000
    assert cfg.engine.kv_pool.dram_bandwidth_gbps == 128  # FAST'25 Table 1
    assert list(cfg.study.variants) == ["random", "load_balancing", "local_cache_aware", "global_cache_aware"]


def test_global_cache_preset_is_the_papers_fig10_setup(compose):
    cfg = compose(["experiment=mooncake_global_cache"])
    assert cfg.system.prefill_instances == 10
    assert cfg.engine.kv_pool.dram_tokens_per_node == 3_000_000
    assert cfg.study.figure == "global_cache"
    labels = set(cfg.study.variants)
    caches = ("local", "global", "local_load_aware", "local_round_robin")
    assert labels == {f"{w}/{c}" for w in ("conversation", "synthetic") for c in caches}
    routers = {"local": "prefix_match", "global": "conductor", "local_load_aware": "local_cache_aware",
               "local_round_robin": "round_robin"}
    for label in labels:
        overrides = variant_overrides(cfg, label)
        assert overrides["workload.output_length"] == "1"
        assert overrides["system.router"] == routers[label.split("/")[1]]
        variant = compose(["experiment=mooncake_global_cache", *cfg.study.variants[label]])
        assert variant.workload.output_length == 1 and variant.workload.name == f"mooncake_{label.split('/')[0]}"


def test_rejection_preset_is_the_papers_table3_setup(compose):
    cfg = compose(["experiment=mooncake_rejection"])
    assert (cfg.system.prefill_instances, cfg.system.decode_instances) == (8, 8)
    assert list(cfg.study.speedups) == [2.0]
    assert cfg.slo.ttft_ms == 30_000 and cfg.slo.tbt_ms == 100
    modes = ("none", "baseline", "early", "predictive")
    assert {f"8P8D/{m}" for m in modes} <= set(cfg.study.variants)
    for label in cfg.study.variants:
        variant = compose(["experiment=mooncake_rejection", *cfg.study.variants[label]])
        assert variant.engine.rejection == label.split("/")[1]
        assert variant.system.decode_instances == (1 if label.startswith("8P1D") else 8)


def test_cache_hit_preset_sizes_the_global_local_replay_as_fig10(compose):
    cfg = compose(["experiment=mooncake_cache_hit"])
    assert cfg.cache_study.global_local.n_instances == 10
    assert list(cfg.cache_study.global_local.cache_sizes_per_instance) == [3_000_000 // 512]


def test_output_length_fixes_every_output_of_a_trace(compose):
    from workloads.registry import build_workload

    cfg = compose(["workload=mooncake_synthetic", "workload.output_length=1", "workload.max_requests=50"])
    specs = build_workload(cfg.workload, data_dir=cfg.data_dir).requests().specs
    assert len(specs) == 50 and {s.output_length for s in specs} == {1}
    with pytest.raises(Exception, match="output_length"):
        compose(["workload=mooncake_synthetic", "workload.output_length=0"])


# ---------------------------------------------------------------------------------------------- end to end

def run_experiment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, overrides: list[str]) -> Path:
    """``python -m harness <overrides>`` in process: the job's overrides reach every study variant."""
    monkeypatch.setattr("harness.studies.sim_sweep.job_overrides", lambda: list(overrides))
    raw = compose_config(overrides)
    folder = RunFolder(tmp_path / str(raw.experiment_name) / "job")
    ctx = JobContext(folder=folder, experiment=str(raw.experiment_name), job="job", choices={}, overrides=overrides)
    run_job(raw, ctx)
    assert json.loads((folder.path / "summary.json").read_text())["status"] == "ok"
    return folder.path


def judged(key: str, job: Path) -> str:
    try:
        outcome = CLAIMS_BY_KEY[key].compute(JobFolder(job))
    except MissingData as exc:
        pytest.fail(f"{key}: {exc}")
    assert outcome.verdict in VERDICTS
    return outcome.value


@pytest.mark.integration
def test_global_cache_runs_end_to_end(tmp_path, monkeypatch, shared_traces):
    job = run_experiment(tmp_path, monkeypatch, ["experiment=mooncake_global_cache", "study.max_requests=200",
                                                 "engine.progress=false"])
    table = pd.read_csv(job / "study.csv").set_index("variant")
    assert len(table) == 8 and table.loc["conversation/local", "router"] == "prefix_match"
    workloads = [label.partition("/")[0] for label in table.index]
    theoretical = table.groupby(workloads)["workload_prefix_hit_rate_tokens"].nunique()
    assert (theoretical == 1).all()  # one theoretical hit rate per workload, whatever the routing
    assert (table["n_ok"] == 200).all() and (table["n_output_tokens"] == 200).all()  # one token each
    assert (table["sim_utilization_decode"].fillna(0) == 0).all()  # the decode instance stays idle
    local = [v for v in table.index if "/local" in v]
    assert (table.loc[local, "sim_pool_fetched_tokens"] == 0).all()  # local caches never read the pool
    assert (job / "figures" / "global_cache.png").is_file()
    for workload in ("conversation", "synthetic"):
        assert "local routing" in judged(f"mooncake_hit_global_local_{workload}", job)
        assert "node-h" in judged(f"mooncake_prefill_global_local_{workload}", job)


@pytest.mark.integration
def test_rejection_runs_end_to_end(tmp_path, monkeypatch, shared_traces):
    job = run_experiment(tmp_path, monkeypatch, ["experiment=mooncake_rejection", "study.max_requests=300",
                                                 "engine.progress=false"])
    table = pd.read_csv(job / "study.csv").set_index("variant")
    assert len(table) == 8 and (table["n_issued"] == 300).all()
    assert (table.loc[["8P8D/none", "8P1D/none"], "n_rejected"] == 0).all()
    early = [v for v in table.index if v.endswith(("/early", "/predictive"))]
    assert (table.loc[early, "sim_wasted_prefill_tokens"] == 0).all()  # only the baseline rejects after prefill
    load = pd.read_csv(job / "load.csv")
    assert load.loc[load["role"] == "decode", "step_s"].notna().all()
    assert (job / "figures" / "rejection_load.png").is_file()
    value = judged("mooncake_rejection", job)
    assert value.startswith("8P8D: ") and "sensitivity 8P1D" in value and "goodput" in value


@pytest.mark.integration
def test_scheduling_runs_end_to_end(tmp_path, monkeypatch, shared_traces):
    job = run_experiment(tmp_path, monkeypatch, ["experiment=mooncake_scheduling", "study.max_requests=200",
                                                 "engine.progress=false"])
    assert len(pd.read_csv(job / "study.csv")) == 4
    for key in ("mooncake_scheduling", "mooncake_global_vs_local", "mooncake_hit_rate"):
        judged(key, job)
