"""The Hydra app end to end, as a user runs it: ``python -m harness ...`` in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

pytestmark = pytest.mark.integration  # runs the app as a process

REPO = Path(__file__).resolve().parents[2]


def run_harness(args: list[str], tmp_path: Path, env: dict[str, str | None] | None = None,
                timeout: float = 300) -> subprocess.CompletedProcess:
    """Run the app; ``env`` entries set to None are removed from the environment."""
    full_env = dict(os.environ)
    for key, value in (env or {}).items():
        if value is None:
            full_env.pop(key, None)
        else:
            full_env[key] = value
    return subprocess.run([sys.executable, "-m", "harness", *args, f"results_dir={tmp_path}"], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout, env=full_env)


def job_dirs(root: Path) -> list[Path]:
    return sorted(p.parent for p in root.rglob("summary.json"))


@pytest.mark.slow
def test_cache_study_experiment_end_to_end(tmp_path, shared_traces):
    proc = run_harness(["experiment=mooncake_cache_hit"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (job,) = job_dirs(tmp_path / "mooncake_cache_hit")
    summary = json.loads((job / "summary.json").read_text())
    assert summary["status"] == "ok"
    assert summary["kind"] == "cache_study"
    assert summary["git_sha"] != "" or not (REPO / ".git").exists()
    assert "numpy" in summary["package_versions"]
    for name in ("config.yaml", "requests.parquet", "cache_hit.csv", "global_local.csv",
                 "figures/cache_hit.png", "figures/cache_hit.csv", "figures/global_local.png", "harness.log"):
        assert (job / name).is_file(), name
    curve = pd.read_csv(job / "cache_hit.csv")
    assert len(curve) == 2 * 3 * 6
    assert curve["hit_rate_blocks"].between(0, 1).all()
    inf = curve[curve["capacity"] == "inf"]
    # Infinite capacity: eviction policy cannot matter.
    assert inf.groupby("trace")["hit_rate_blocks"].nunique().eq(1).all()
    lru = curve[curve["policy"] == "lru"].sort_values("capacity_blocks", na_position="last")
    for _, rows in lru.groupby("trace"):
        assert rows["hit_rate_blocks"].is_monotonic_increasing
    config_text = (job / "config.yaml").read_text()
    assert "experiment=mooncake_cache_hit" in config_text and "choices:" in config_text


def test_missing_trace_fails_cleanly(tmp_path):
    proc = run_harness(["experiment=mooncake_cache_hit",
                        "cache_study.traces={conversation: no_such_dir/missing_trace.jsonl}"], tmp_path)
    assert proc.returncode == 2
    assert "missing_trace.jsonl" in proc.stderr and "Traceback" not in proc.stderr
    (job,) = job_dirs(tmp_path)
    summary = json.loads((job / "summary.json").read_text())
    assert summary["status"] == "failed"
    assert "missing_trace.jsonl" in summary["reason"]
    assert not (job / "cache_hit.csv").exists()


def test_unknown_key_stops_before_any_work(tmp_path):
    proc = run_harness(["workload.no_such_key=1"], tmp_path)
    assert proc.returncode != 0
    assert "no_such_key" in proc.stderr
    assert job_dirs(tmp_path) == []


def test_missing_required_value_names_key_and_leaves_failed_summary(tmp_path):
    proc = run_harness(["engine=endpoint"], tmp_path)
    assert proc.returncode == 2
    assert "engine.url" in proc.stderr
    (job,) = job_dirs(tmp_path)
    assert json.loads((job / "summary.json").read_text())["status"] == "failed"


def test_sglang_without_a_gpu_is_a_clear_failure(tmp_path):
    if Path("/dev/nvidia0").exists():
        pytest.skip("this host has a GPU")
    proc = run_harness(["engine=sglang", "workload.num_groups=2", "workload.prompts_per_group=2"], tmp_path)
    assert proc.returncode != 0
    assert "engine=sglang" in proc.stderr and "GPU" in proc.stderr
    (job,) = job_dirs(tmp_path)
    summary = json.loads((job / "summary.json").read_text())
    assert summary["status"] == "failed" and "engine=sglang" in summary["reason"]


def test_show_resolved_config(tmp_path):
    proc = run_harness(["--cfg", "job", "workload=azure_code"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "AzureLLMInferenceTrace_code.csv" in proc.stdout
    assert job_dirs(tmp_path) == []


def test_multirun_writes_one_folder_per_job(tmp_path, shared_traces):
    proc = run_harness(["-m", "job=workload", "workload=shared_prefix,azure_code"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    jobs = job_dirs(tmp_path / "default")
    assert len(jobs) == 2
    names = set()
    for job in jobs:
        summary = json.loads((job / "summary.json").read_text())
        assert summary["status"] == "ok"
        names.add(summary["choices"]["workload"])
        assert (job / "workload.parquet").is_file()
    assert names == {"shared_prefix", "azure_code"}


@pytest.mark.slow
def test_wandb_logger_runs_offline_without_key(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    env = {"HOME": str(home), "WANDB_API_KEY": None, "WANDB_MODE": None, "NETRC": str(home / ".netrc")}
    proc = run_harness(["job=workload", "workload=shared_prefix", "logger=wandb"], tmp_path / "res",
                       env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "wandb sync" in proc.stdout + proc.stderr
    (job,) = job_dirs(tmp_path / "res")
    offline_runs = list((job / "wandb").glob("offline-run-*"))
    assert len(offline_runs) == 1
    assert list(offline_runs[0].glob("*.wandb")), "offline run holds no W&B data file"
