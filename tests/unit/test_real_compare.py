"""``job=compare`` (experiment=disagg_cpu) without starting servers: every variant composes into a real
deployment this host can hold, a study row is computed from a run's metrics, and the comparison figure
is drawn from ``study.csv`` with failed variants left as gaps."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from figures.disagg_compare import comparison_table, plot_disagg_comparison
from harness.studies.real_compare import _row
from harness.studies.variants import compose_variant


@pytest.fixture
def experiment(compose):
    return compose(["experiment=disagg_cpu"])


def test_every_disagg_cpu_variant_is_a_real_deployment_within_five_instances(experiment) -> None:
    cfg = experiment
    assert cfg.job == "compare"
    systems = set()
    for label, overrides in cfg.study.variants.items():
        vcfg = compose_variant(["experiment=disagg_cpu", *overrides, "job=serve"])
        assert vcfg.engine.name == "vllm" and vcfg.engine.device == "cpu", label
        assert vcfg.system.n_instances <= vcfg.engine.max_instances, label
        systems.add(vcfg.system.name)
    assert systems == {"vllm_baseline", "distserve", "mooncake", "splitwise"}


def test_row_uses_engine_counters_and_prices(tmp_path: Path) -> None:
    vcfg = compose_variant(["experiment=disagg_cpu", "system=mooncake", "system.prefill_instances=2",
                            "system.router=conductor", "job=serve"])
    metrics = {"median_ttft_ms": 100.0, "p99_ttft_ms": 300.0, "goodput_rps": 2.0, "output_throughput_tps": 36.0,
               "engine_local_hit_rate": 0.5, "engine_pool_hit_rate": 0.25, "engine_prefill_compute_saved": 0.75,
               "engine_deployment_price_per_hour_usd": 0.1, "engine_deployment_power_w": 6.0}
    requests = pd.DataFrame({"extra": [json.dumps({"kv_transfer_s": 0.01, "kv_transfer_bytes": 1000.0}),
                                       json.dumps({"kv_transfer_s": 0.03, "kv_transfer_bytes": 3000.0})]})
    row = _row("mooncake", vcfg, metrics, requests)
    assert row["system"] == "mooncake" and row["prefill"] == 2
    assert row["pool_hit_rate"] == 0.25 and row["prefill_compute_saved"] == 0.75
    assert row["tokens_per_usd"] == pytest.approx(36.0 * 3600 / 0.1)
    assert row["tokens_per_joule"] == pytest.approx(6.0)
    assert row["mean_kv_transfer_s"] == pytest.approx(0.02) and row["mean_kv_transfer_bytes"] == pytest.approx(2000)
    assert math.isnan(row["mean_prefill_s"])


def test_colocated_row_counts_every_hit_as_local() -> None:
    vcfg = compose_variant(["experiment=disagg_cpu", "job=serve"])
    row = _row("vllm_baseline", vcfg, {"engine_prefix_hit_rate": 0.6, "engine_prefix_cache_queries": 1000.0,
                                       "engine_prefix_cache_hits": 600.0}, pd.DataFrame({"extra": []}))
    assert row["local_hit_rate"] == 0.6 and row["pool_hit_rate"] == 0.0
    assert row["prefill_computed_tokens"] == 400.0 and row["prefill_compute_saved"] == 0.6


def test_figure_from_study_csv_leaves_failed_variants_blank(tmp_path: Path) -> None:
    pd.DataFrame([
        {"variant": "vllm_baseline", "status": "ok", "median_ttft_ms": 80, "p99_ttft_ms": 200, "median_tpot_ms": 10,
         "p99_tpot_ms": 30, "offered_rate_rps": 3, "goodput_rps": 2.5, "local_hit_rate": 0.6, "pool_hit_rate": 0.0},
        {"variant": "mooncake", "status": "failed", "reason": "boom"},
    ]).to_csv(tmp_path / "study.csv", index=False)
    long = comparison_table(tmp_path)
    assert long[long["variant"] == "mooncake"]["value"].isna().all()
    base = long[(long["variant"] == "vllm_baseline") & (long["measure"] == "goodput")]
    assert base["value"].tolist() == [2.5]
    written = plot_disagg_comparison(tmp_path)
    assert {p.name for p in written} == {"disagg_comparison.png", "disagg_comparison.csv"}
    assert all(p.stat().st_size > 0 for p in written)
