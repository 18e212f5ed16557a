"""``engine=sim`` through the Hydra app, as a user runs it: every system, determinism, multirun and the
configurations that must be refused before anything runs."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from tests.integration.test_cli import job_dirs, run_harness

pytestmark = pytest.mark.integration  # runs the app as a process

SMALL = ["engine=sim", "model=llama3_8b", "hardware=a100_80gb", "workload=shared_prefix", "workload.num_groups=4",
         "workload.prompts_per_group=25", "workload.arrival.rate_rps=8", "slo=distserve_chatbot_13b",
         "engine.progress=false"]
SYSTEMS = {
    "vllm_baseline": ["system=vllm_baseline", "system.colocated_instances=2", "system.router=cache_aware"],
    "distserve": ["system=distserve", "system.prefill_instances=1", "system.decode_instances=1"],
    "mooncake": ["system=mooncake", "system.prefill_instances=2", "system.decode_instances=1",
                 "engine.kv_pool.dram_tokens_per_node=100000"],
    "splitwise": ["system=splitwise", "system.prefill_instances=1", "system.decode_instances=1",
                  "system.mixed_instances=1", "engine.prefill.hardware=h100_80gb", "engine.layerwise_transfer=true"],
}


@pytest.mark.parametrize("system", sorted(SYSTEMS))
def test_every_system_simulates_end_to_end(tmp_path: Path, system: str) -> None:
    proc = run_harness([*SMALL, *SYSTEMS[system]], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (job,) = job_dirs(tmp_path)
    summary = json.loads((job / "summary.json").read_text())
    assert summary["status"] == "ok"
    metrics = summary["metrics"]
    assert metrics["n_issued"] == 100 and metrics["n_ok"] == 100
    assert 0 < metrics["median_ttft_ms"] < 10_000
    frame = pd.read_parquet(job / "requests.parquet")
    assert len(frame) == 100 and (frame["n_out"] == frame["output_length"]).all()
    load = pd.read_csv(job / "load.csv")
    assert {"time_s", "instance", "role", "kv_utilization"} <= set(load.columns)
    if system != "vllm_baseline":
        assert frame["instance"].str.contains("->").any()  # handed off prefill -> decode
    if system in ("vllm_baseline", "mooncake"):
        assert metrics["engine_prefix_hit_rate_tokens"] > 0.3  # 4 groups share 1024-token prefixes


def test_same_seed_and_config_give_byte_identical_records(tmp_path: Path) -> None:
    args = [*SMALL, *SYSTEMS["mooncake"], "system.router=conductor"]
    digests = []
    for run in ("a", "b"):
        proc = run_harness([*args, "experiment_name=det"], tmp_path / run)
        assert proc.returncode == 0, proc.stderr[-3000:]
        (job,) = job_dirs(tmp_path / run)
        digests.append((job / "requests.parquet").read_bytes())
    assert digests[0] == digests[1]


def test_multirun_sweeps_systems(tmp_path: Path) -> None:
    proc = run_harness(["-m", *SMALL, "system=distserve,mooncake", "experiment_name=mr"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    jobs = job_dirs(tmp_path / "mr")
    assert len(jobs) == 2
    systems = {json.loads((j / "summary.json").read_text())["choices"]["system"] for j in jobs}
    assert systems == {"distserve", "mooncake"}


@pytest.mark.parametrize(("overrides", "message"), [
    (["model=llama3_70b", "system=distserve", "engine.prefill.tp=1"], "does not fit"),
    (["system=distserve", "system.prefill_instances=3", "system.decode_instances=2", "system.gpu_budget=4"],
     "system.gpu_budget"),
    (["system=distserve", "engine.prefill.hardware=b200"], "unknown hardware 'b200'"),
    (["system=distserve", "engine.kv_link=carrier_pigeon"], "engine.kv_link"),
    (["system=distserve", "engine.perf_model=distserve"], "engine.prefill (distserve model)"),
    (["system=vllm_baseline", "system.prefill_instances=1"], "system=vllm_baseline"),
    (["system=mooncake", "system.router=nearest_star"], "system.router"),
])
def test_impossible_deployments_stop_before_running(tmp_path: Path, overrides: list[str], message: str) -> None:
    proc = run_harness([*SMALL, *overrides], tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr
    (job,) = job_dirs(tmp_path)
    summary = json.loads((job / "summary.json").read_text())
    assert summary["status"] == "failed" and message in summary["reason"]
    assert not (job / "requests.parquet").exists()


def test_requests_that_can_never_fit_fail_and_count_against_attainment(tmp_path: Path) -> None:
    # Llama-3-8B on one A40 (48 GB): about 0.2M tokens of KV; a 300k-token prompt can never fit.
    proc = run_harness([*SMALL, "system=vllm_baseline", "system.colocated_instances=1", "hardware=a40",
                        "model.max_model_len=400000", "workload.shared_prefix_len=300000", "workload.num_groups=1",
                        "workload.prompts_per_group=3", "workload.block_size=1000", "workload.question_len=1000"],
                       tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (job,) = job_dirs(tmp_path)
    summary = json.loads((job / "summary.json").read_text())
    metrics = summary["metrics"]
    assert metrics["n_failed"] == 3 and metrics["slo_attainment"] == 0
    frame = pd.read_parquet(job / "requests.parquet")
    assert frame["error"].str.contains("can never fit").all()
