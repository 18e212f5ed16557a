"""SIGTERM during any job (here a simulator run, no deployment) leaves ``summary.json`` ``failed`` with the
reason, and the process exits non-zero (143 = 128 + SIGTERM) with one line and no traceback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration  # starts processes or opens sockets (tests/conftest.py)

ROOT = Path(__file__).resolve().parents[2]

# 200,000 requests: tens of seconds of simulation here, far longer than it takes to see "running" and signal
LONG_SIM_JOB = ["job=serve", "engine=sim", "workload.num_groups=400", "workload.prompts_per_group=500",
                "workload.arrival.rate_rps=50"]


def _status(summary: Path) -> str | None:
    try:
        return json.loads(summary.read_text(encoding="utf-8"))["status"]
    except (OSError, ValueError, KeyError):
        return None  # not written yet


def test_sigterm_during_a_simulator_job_leaves_a_failed_summary(tmp_path: Path) -> None:
    folder = tmp_path / "job"
    summary = folder / "summary.json"
    err = tmp_path / "stderr.txt"
    cmd = [sys.executable, "-m", "harness", *LONG_SIM_JOB, f"hydra.run.dir={folder}"]
    with err.open("wb") as stderr:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=stderr, start_new_session=True)
        try:
            deadline = time.monotonic() + 600  # generous: only bounds a hung start
            while _status(summary) != "running":
                assert proc.poll() is None, f"the job ended before it was signalled: {err.read_text()}"
                assert time.monotonic() < deadline, "the job never wrote a running summary"
                time.sleep(0.05)
            os.kill(proc.pid, signal.SIGTERM)
            code = proc.wait(timeout=600)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    stderr_text = err.read_text()
    written = json.loads(summary.read_text(encoding="utf-8"))
    assert written["status"] == "failed", written
    assert written["reason"] == "terminated by SIGTERM"
    assert written["finished_at"]
    assert code == 128 + signal.SIGTERM, stderr_text
    assert "error: terminated by SIGTERM" in stderr_text
    assert "Traceback" not in stderr_text
