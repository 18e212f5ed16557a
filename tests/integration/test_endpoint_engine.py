"""``engine=endpoint`` end to end against a running OpenAI-compatible service (the suite's mock
server with injected delays, started here in its own process group on 127.0.0.1)."""

from __future__ import annotations

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

from systems.launch.ports import free_port

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.integration


@pytest.fixture
def mock_endpoint():
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "harness.loadgen.mock_server", "--port", str(port),
                             "--ttft-ms", "20", "--itl-ms", "5"], cwd=REPO, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(f"{url}/health", timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    pytest.fail("mock server did not start")
                time.sleep(0.1)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)


def test_endpoint_engine_replays_a_workload(tmp_path, mock_endpoint):
    args = ["engine=endpoint", f"engine.url={mock_endpoint}", "model=tiny_llama", "workload=shared_prefix",
            "workload.num_groups=2", "workload.prompts_per_group=5", "workload.output_len=8",
            "workload.arrival.rate_rps=20", "slo=cpu_tiny", "engine.load.progress=false", f"results_dir={tmp_path}"]
    proc = subprocess.run([sys.executable, "-m", "harness", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (summary_path,) = list(tmp_path.rglob("summary.json"))
    summary = json.loads(summary_path.read_text())
    metrics = summary["metrics"]
    assert summary["status"] == "ok" and metrics["n_ok"] == 10
    # The mock injects 20 ms before the first token and 5 ms between tokens.
    assert 19 <= metrics["median_ttft_ms"] <= 60
    assert 4.5 <= metrics["median_tpot_ms"] <= 15
    assert metrics["engine_metrics_scraped"] is False  # the mock has no /metrics
    frame = pd.read_parquet(summary_path.parent / "requests.parquet")
    assert frame["n_out"].eq(8).all() and frame["instance"].eq("mock-0").all()


def test_unreachable_endpoint_is_a_clear_error(tmp_path):
    url = f"http://127.0.0.1:{free_port()}"
    proc = subprocess.run([sys.executable, "-m", "harness", "engine=endpoint", f"engine.url={url}",
                           f"results_dir={tmp_path}"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "not reachable" in proc.stderr and url in proc.stderr
    (summary_path,) = list(tmp_path.rglob("summary.json"))
    assert json.loads(summary_path.read_text())["status"] == "failed"
