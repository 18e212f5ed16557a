"""A loopback Ray cluster of a head and two worker nodes that stand for hosts (``ray_local.local_ray_cluster``):
a driver sees each node's resources and labels, an actor pinned to a node's resource runs there, a hard kill
of that node takes the actor with it and the head declares the node dead, every server listens on 127.0.0.1
only, and nothing of the cluster is left running afterwards."""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from systems.launch import procfs
from tests.clusters import ray_local

pytestmark = [pytest.mark.integration, pytest.mark.ray]

NODES = {"b": (1, {"host_b": 1}, {"hw": "a100"}), "c": (1, {"host_c": 1}, {"hw": "h100"})}

# the driver: ray.nodes() as JSON, then a detached actor pinned to host_c (it outlives the driver) and its pid
DRIVER = textwrap.dedent("""
    import json, os, ray
    ray.init()
    print("NODES=" + json.dumps([{k: n[k] for k in ("NodeID", "Alive", "Resources", "Labels", "NodeManagerAddress")}
                                 for n in ray.nodes()]), flush=True)

    @ray.remote(num_cpus=0)
    class Pinned:
        def where(self):
            return os.getpid(), ray.get_runtime_context().get_node_id()

    actor = Pinned.options(resources={"host_c": 0.01}, lifetime="detached", name="pinned").remote()
    pid, node_id = ray.get(actor.where.remote(), timeout=120)
    print("ACTOR=" + json.dumps({"pid": pid, "node_id": node_id}), flush=True)
""")


def tagged(stdout: str, tag: str) -> object:
    for line in stdout.splitlines():
        if line.startswith(tag + "="):
            return json.loads(line[len(tag) + 1:])
    raise AssertionError(f"no {tag}= line in the driver's output:\n{stdout}")


def listening_addresses(pids: list[int]) -> set[str]:
    """The local addresses of the TCP sockets ``pids`` listen on (from /proc/net/tcp{,6})."""
    listening: dict[str, str] = {}
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        for row in Path(table).read_text().splitlines()[1:]:
            fields = row.split()
            if fields[3] == "0A":  # LISTEN
                listening[fields[9]] = fields[1].split(":")[0].rjust(width, "0")
    found = set()
    for pid in pids:
        try:
            links = [Path(f"/proc/{pid}/fd/{fd}").readlink().name for fd in Path(f"/proc/{pid}/fd").iterdir()]
        except OSError:
            continue
        for link in links:
            if link.startswith("socket:[") and (inode := link[8:-1]) in listening:
                found.add(listening[inode])
    return found


LOOPBACK_HEX = {"0100007F", "0000000000000000FFFF00000100007F"}  # 127.0.0.1, ::ffff:127.0.0.1 (host order)


def processes_naming(folder: Path) -> list[int]:
    pids = []
    for stat in procfs.all_stats():
        try:
            cmdline = Path(f"/proc/{stat.pid}/cmdline").read_bytes()
        except OSError:
            continue
        if not stat.zombie and str(folder).encode() in cmdline:
            pids.append(stat.pid)
    return pids


def test_head_and_two_hosts_then_one_host_is_lost(caplog):
    caplog.set_level(logging.INFO)
    folder = Path(tempfile.mkdtemp(prefix="rn-", dir="/tmp"))  # short: Ray's unix sockets live under it
    actor_pid = None
    try:
        with ray_local.local_ray_cluster(folder, NODES, head_cpus=1) as cluster:
            assert set(listening_addresses(ray_local.cluster_processes(folder))) <= LOOPBACK_HEX
            driver = subprocess.run([sys.executable, "-c", DRIVER], env=cluster.client_env(), capture_output=True,
                                    text=True, timeout=300, stdin=subprocess.DEVNULL)
            assert driver.returncode == 0, driver.stderr[-3000:]
            seen = {n["Labels"].get("disagg_node", "head"): n for n in tagged(driver.stdout, "NODES")}
            assert set(seen) == {"head", "b", "c"}
            assert all(n["Alive"] and n["NodeManagerAddress"] == "127.0.0.1" for n in seen.values())
            for name, (cpus, resources, labels) in NODES.items():
                assert seen[name]["Resources"]["CPU"] == cpus
                assert {k: seen[name]["Resources"].get(k) for k in resources} == resources
                assert {k: seen[name]["Labels"].get(k) for k in labels} == labels
            assert "host_c" not in seen["b"]["Resources"] and "host_b" not in seen["c"]["Resources"]

            actor = tagged(driver.stdout, "ACTOR")
            actor_pid = actor["pid"]
            assert actor["node_id"] == seen["c"]["NodeID"]
            assert procfs.is_running(actor_pid) and actor_pid in ray_local.cluster_processes(folder)

            listed = {n.name: n for n in ray_local.nodes(folder)}
            assert listed["c"].alive and listed["c"].pgid is not None and listed["head"].is_head

            assert ray_local.kill_node(folder, "c") == seen["c"]["NodeID"]
            assert not procfs.is_running(actor_pid)
            lost = ray_local.wait_node_dead(folder, seen["c"]["NodeID"], timeout_s=180)
            assert not lost.alive and lost.labels.get("disagg_node") == "c"
            after = {n.name: n for n in ray_local.nodes(folder)}
            assert after["b"].alive and after["head"].alive
        assert processes_naming(folder) == [] and ray_local.cluster_processes(folder) == []
    finally:
        ray_local.down(folder)
        shutil.rmtree(folder, ignore_errors=True)
    up_line = [r.getMessage() for r in caplog.records if "node(s) up in" in r.getMessage() and "head" in
               r.getMessage()]
    print(*up_line)
