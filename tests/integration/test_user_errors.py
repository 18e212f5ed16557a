"""Bad input stops ``python -m harness`` the same way every time: exit status 2, one line on stderr that
names the file, line or key, no traceback, and (where a job folder can exist) a ``summary.json`` with
``status: failed`` and the reason. Each case runs the app in a subprocess, as a user would."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from systems.compiled_core import FALLBACK_WARNING

pytestmark = pytest.mark.integration  # runs the app as a process

REPO = Path(__file__).resolve().parents[2]
SMALL = ["workload.num_groups=2", "workload.prompts_per_group=2"]


def run(args: list[str], cwd: Path = REPO, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if k not in ("PERF_PROFILES_DIR", "DATA_DIR")}
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env=full_env)


def assert_user_error(proc: subprocess.CompletedProcess, *needles: str) -> str:
    """Exit 2, exactly one line on stderr containing every needle, no traceback; returns the line."""
    lines = [line for line in proc.stderr.strip().splitlines() if FALLBACK_WARNING not in line]
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr[-3000:]
    assert len(lines) == 1, proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def failed_summary(results: Path) -> dict:
    (summary_path,) = results.rglob("summary.json")
    summary = json.loads(summary_path.read_text())
    assert summary["status"] == "failed"
    return summary


def test_a_missing_performance_profile(tmp_path):
    # a copy of the suite with no ../shared beside it: a fresh machine without the public profiles
    clone = tmp_path / "clone"
    for part in ("vocab", "workloads", "systems", "figures", "harness", "conf"):
        shutil.copytree(REPO / part, clone / part, ignore=shutil.ignore_patterns("__pycache__"))
    proc = run(["engine.perf_model=splitwise", "model=llama2_70b", "engine.colocated.tp=8", *SMALL,
                f"results_dir={tmp_path / 'results'}"], cwd=clone)
    line = assert_user_error(proc, "splitwise_sim/perf_model.csv", "not found")
    assert "Mutinifni/splitwise-sim" in line  # where it is published
    assert "splitwise_sim/perf_model.csv" in failed_summary(tmp_path / "results")["reason"]


def test_a_rate_sweep_over_a_trace_workload(tmp_path):
    proc = run(["workload=azure_code", "sweep.rates_rps=[1.0]", f"results_dir={tmp_path}"])
    assert_user_error(proc, "sweep.rates_rps", "workload.arrival.kind=trace")
    assert "sweep.rates_rps" in failed_summary(tmp_path)["reason"]


def test_a_trace_that_is_not_utf8(tmp_path):
    data = tmp_path / "data" / "mooncake_fast25"
    data.mkdir(parents=True)
    good = '{"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [1]}\n'
    (data / "conversation_trace.jsonl").write_bytes(good.encode() * 2 + b'{"timestamp": 5, "input_length": \xff\xfe}\n')
    proc = run(["job=workload", "workload=mooncake_conversation", f"data_dir={tmp_path / 'data'}",
                f"results_dir={tmp_path / 'results'}"])
    assert_user_error(proc, "conversation_trace.jsonl:3: encoding", "0xff", "UTF-8")
    assert "conversation_trace.jsonl:3" in failed_summary(tmp_path / "results")["reason"]


def test_results_dir_under_a_regular_file(tmp_path):
    blocker = tmp_path / "not_a_folder"
    blocker.write_text("a file where the results folder should go")
    proc = run(["job=workload", f"results_dir={blocker / 'results'}"])
    assert_user_error(proc, f"results_dir={blocker / 'results'}", "is a file, not a folder")
    assert blocker.read_text().startswith("a file")  # untouched; no summary can exist under a file


def test_results_dir_under_a_regular_file_in_a_multirun(tmp_path):
    blocker = tmp_path / "not_a_folder"
    blocker.write_text("")
    proc = run(["-m", "job=workload", "workload=shared_prefix,azure_code", f"results_dir={blocker}"])
    assert_user_error(proc, f"results_dir={blocker}", "is a file, not a folder")


@pytest.mark.parametrize(("overrides", "needles"), [
    (["system=distserve", "system.router=conductor"], ["system.router=conductor", "system=mooncake"]),
    (["system=vllm_baseline", "system.prefill_instances=1"], ["system.prefill_instances: must be 0"]),
    (["system=splitwise", "engine=sglang"], ["engine=sglang: cannot run system=splitwise"]),
])
def test_a_deployment_the_topology_refuses_fails_before_any_work(tmp_path, overrides, needles):
    proc = run([*overrides, *SMALL, f"results_dir={tmp_path}"])
    assert_user_error(proc, *needles)
    summary = failed_summary(tmp_path)
    assert summary["reason"].startswith("ConfigError") and not summary.get("metrics")
    assert not list(tmp_path.rglob("requests.parquet"))
