"""Sweeps as a user runs them (``python -m harness --multirun``): one failed job does not stop the sweep and
the exit status counts the failures; a sweep killed halfway and started again runs only the jobs that are
not ``ok``; a dry run lists what would run and writes nothing; a changed config is refused, not mixed in."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from tests.integration.test_cli import REPO, run_harness
from tests.integration.test_sim_cli import SMALL

pytestmark = pytest.mark.integration

P1D1 = ["system.prefill_instances=1", "system.decode_instances=1"]
RATES = "workload.arrival.rate_rps=4,6,8,10,12"


def _summaries(sweep: Path) -> dict[str, bytes]:
    return {p.parent.name: p.read_bytes() for p in sorted(sweep.glob("*/summary.json"))}


def _status(sweep: Path) -> dict[str, str]:
    return {name: json.loads(data)["status"] for name, data in _summaries(sweep).items()}


def test_a_failed_job_does_not_stop_the_sweep_and_is_counted(tmp_path: Path) -> None:
    # system=vllm_baseline refuses prefill/decode instances: that job fails, the two others run
    args = ["-m", *SMALL, *P1D1, "system=distserve,vllm_baseline,mooncake", "experiment_name=sw"]
    proc = run_harness(args, tmp_path)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "sweep job system=vllm_baseline" in proc.stderr and "1 of 3 sweep job(s)" in proc.stderr
    sweep = tmp_path / "sw"
    assert _status(sweep) == {"system=distserve": "ok", "system=mooncake": "ok", "system=vllm_baseline": "failed"}
    table = pd.read_csv(sweep / "sweep.csv")
    assert list(table["folder"]) == ["system=distserve", "system=vllm_baseline", "system=mooncake"]
    assert list(table["status"]) == ["ok", "failed", "ok"]
    assert "system.prefill_instances" in table.loc[1, "reason"]
    assert table.loc[0, "median_ttft_ms"] > 0
    before = _summaries(sweep)
    again = run_harness(args, tmp_path)  # the ok jobs are kept, the failed one runs (and fails) again
    assert again.returncode == 1, again.stderr[-3000:]
    after = _summaries(sweep)
    assert after["system=distserve"] == before["system=distserve"] and after["system=mooncake"] == before["system=mooncake"]
    assert after["system=vllm_baseline"] != before["system=vllm_baseline"]
    assert pd.read_csv(sweep / "sweep.csv")["resumed"].tolist() == [True, False, True]


def test_a_sweep_killed_halfway_finishes_only_the_missing_jobs(tmp_path: Path) -> None:
    args = [sys.executable, "-m", "harness", "-m", *SMALL, *P1D1, "system=distserve", RATES, "experiment_name=k",
            f"results_dir={tmp_path}"]
    sweep = tmp_path / "k"
    proc = subprocess.Popen(args, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while "ok" not in _status(sweep).values() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        os.killpg(proc.pid, signal.SIGKILL)  # a hard kill: the job in flight keeps summary "running"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    killed = _status(sweep)
    done = {name for name, status in killed.items() if status == "ok"}
    assert done and len(done) < 5, f"the kill should land mid-sweep: {killed}"
    kept = {name: _summaries(sweep)[name] for name in done}
    files_before = sorted((p, p.stat().st_mtime_ns) for p in sweep.rglob("*"))

    plan = run_harness(["-m", *SMALL, *P1D1, "system=distserve", RATES, "experiment_name=k", "dry_run=true"], tmp_path)
    assert plan.returncode == 0, plan.stderr[-3000:]
    assert f"{len(done)} skip" in plan.stdout and "dry run: 5 job(s)" in plan.stdout
    assert sorted((p, p.stat().st_mtime_ns) for p in sweep.rglob("*")) == files_before  # the dry run wrote nothing

    proc2 = run_harness(["-m", *SMALL, *P1D1, "system=distserve", RATES, "experiment_name=k"], tmp_path)
    assert proc2.returncode == 0, proc2.stderr[-3000:]
    final = _summaries(sweep)
    assert len(final) == 5 and all(json.loads(d)["status"] == "ok" for d in final.values())
    assert all(final[name] == data for name, data in kept.items())  # the ok jobs were not run again
    table = pd.read_csv(sweep / "sweep.csv")
    assert sorted(table[table["resumed"]]["folder"]) == sorted(done)


def test_a_changed_config_is_refused_not_mixed_in(tmp_path: Path) -> None:
    args = ["-m", *SMALL, *P1D1, "system=distserve,mooncake", "experiment_name=c"]
    assert run_harness(args, tmp_path).returncode == 0
    sweep = tmp_path / "c"
    before = _summaries(sweep)
    changed = run_harness([*args, "seed=7"], tmp_path)  # seed is constant: same folders, other configs
    assert changed.returncode == 2, changed.stderr[-3000:]
    assert "holds the ok results of another config" in changed.stderr
    assert _summaries(sweep) == before
    assert set(pd.read_csv(sweep / "sweep.csv")["status"]) == {"refused"}
    replaced = run_harness([*args, "seed=7", "overwrite=true"], tmp_path)
    assert replaced.returncode == 0, replaced.stderr[-3000:]
    assert all(json.loads(d)["seeds"]["seed"] == 7 for d in _summaries(sweep).values())


@pytest.mark.slow
def test_a_sweeps_jobs_form_one_wandb_group(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = {"HOME": str(home), "WANDB_API_KEY": None, "WANDB_MODE": None, "NETRC": str(home / ".netrc")}
    proc = run_harness(["-m", "job=workload", "workload=shared_prefix", "seed=0,1", "logger=wandb",
                        "logger.group=grp-sweep-7f3", "experiment_name=wb"], tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    sweep = tmp_path / "wb"
    runs = {folder: list((sweep / folder / "wandb").glob("offline-run-*/*.wandb")) for folder in ("seed=0", "seed=1", ".")}
    assert all(len(found) == 1 for found in runs.values()), runs  # one run per job, one for the sweep table
    for (found,) in runs.values():
        assert b"grp-sweep-7f3" in found.read_bytes()  # the group is in each run's record
    assert b"sweep" in runs["."][0].read_bytes()
