"""The worker nodes of the loopback Ray cluster (``tests.clusters.ray_node``, ``ray_local`` add-node /
kill-node / remove-node), without Ray: option parsing and its errors, the node specs, the node id read back
from the daemon's log, and the hard kill / graceful removal of a node's session on real child processes that
leave their process group the way Ray workers do."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from systems.launch import procfs
from tests.clusters import ray_local, ray_node
from tests.clusters.daemons import ClusterError, DaemonRecord, DaemonSet, wait_for
from vocab.errors import ConfigError

# --- parsing ------------------------------------------------------------------------------------------------


def test_resources_parse_to_floats():
    assert ray_node.parse_resources('{"host_b": 1, "nic": 0.5}') == {"host_b": 1.0, "nic": 0.5}
    assert ray_node.parse_resources("") == {} and ray_node.parse_resources(None) == {}


def test_bad_resources_json_names_the_option_and_the_value():
    with pytest.raises(ConfigError) as info:
        ray_node.parse_resources('{"host_b": 1')
    assert "--resources" in str(info.value) and "'{\"host_b\": 1'" in str(info.value)
    assert "not valid JSON" in str(info.value)


@pytest.mark.parametrize("text, needle", [
    ('["host_b"]', "not a JSON object"),
    ('{"host_b": -1}', "needs a number >= 0"),
    ('{"host_b": "one"}', "needs a number >= 0"),
    ('{"host_b": true}', "needs a number >= 0"),
    ('{"host_b": NaN}', "needs a number >= 0"),
    ('{"CPU": 2}', "--num-cpus"),
    ('{"": 1}', "non-empty"),
])
def test_bad_resources_are_refused(text, needle):
    with pytest.raises(ConfigError) as info:
        ray_node.parse_resources(text, option="--resources")
    assert needle in str(info.value) and "--resources" in str(info.value)


def test_labels_parse_and_format_back():
    labels = ray_node.parse_labels(" hw=a100 , zone=z-1,example.com/rack=r7")
    assert labels == {"hw": "a100", "zone": "z-1", "example.com/rack": "r7"}
    assert ray_node.parse_labels(ray_node.format_labels(labels)) == labels
    assert ray_node.parse_labels("") == {} and ray_node.parse_labels("empty=") == {"empty": ""}


@pytest.mark.parametrize("text, needle", [
    ("hw", "is not key=value"),
    ("=a100", "is not key=value"),
    ("hw=a100,hw=h100", "given twice"),
    ("disagg_node=x", "reserved"),
    ("ray.io/node-id=x", "reserved"),
    ("hw=a 100", "bad value"),
    ("h w=a100", "bad label key"),
    ("hw=-a100", "bad value"),
])
def test_bad_labels_name_the_option_and_what_is_wrong(text, needle):
    with pytest.raises(ConfigError) as info:
        ray_node.parse_labels(text)
    assert needle in str(info.value) and "--labels" in str(info.value) and repr(text) in str(info.value)


@pytest.mark.parametrize("name", ["", "a/b", "a b", "-b", "b-", "x" * 17, "ü"])
def test_bad_node_names_are_refused(name):
    with pytest.raises(ConfigError, match="node name"):
        ray_node.NodeSpec(name=name)


def test_node_spec_adds_its_name_label_and_checks_its_fields():
    spec = ray_node.NodeSpec(name="host-b.1", num_cpus=2, resources={"host_b": 1}, labels={"hw": "a100"})
    assert spec.ray_labels() == {"hw": "a100", "disagg_node": "host-b.1"}
    with pytest.raises(ConfigError, match="num_cpus"):
        ray_node.NodeSpec(name="b", num_cpus=-1)
    with pytest.raises(ConfigError, match="num_cpus"):
        ray_node.NodeSpec(name="b", num_cpus=True)
    with pytest.raises(ConfigError, match="node b: labels"):
        ray_node.NodeSpec(name="b", labels={"disagg_node": "c"})


@pytest.mark.parametrize("address", ["0.0.0.0:6379", "localhost:6379", "127.0.0.1", "127.0.0.1:0",
                                     "127.0.0.1:70000", "127.0.0.1:port"])
def test_only_a_loopback_head_address_is_accepted(address):
    with pytest.raises(ConfigError, match="127.0.0.1:PORT"):
        ray_node.check_address(address)
    assert ray_node.check_address("127.0.0.1:6390") == "127.0.0.1:6390"


def test_node_program_exits_2_on_bad_options_before_starting_anything(capsys):
    assert ray_node.main(["--address", "127.0.0.1:6390", "--name", "b", "--temp-dir", "/nonexistent",
                          "--resources", "{bad"]) == ray_node.EXIT_USAGE
    err = capsys.readouterr().err
    assert "--resources" in err and "'{bad'" in err
    assert ray_node.main(["--address", "127.0.0.1:6390", "--name", "b"]) == ray_node.EXIT_USAGE
    assert "--temp-dir" in capsys.readouterr().err


def test_cli_add_node_refuses_bad_options_with_exit_2(tmp_path, capsys):
    code = ray_local.main(["add-node", "b", "--dir", str(tmp_path), "--labels", "hw"])
    assert code == ray_local.EXIT_USAGE and "--labels" in capsys.readouterr().err
    assert ray_local.main(["kill-node", "--dir", str(tmp_path)]) == ray_local.EXIT_USAGE
    assert "NAME is required" in capsys.readouterr().err
    assert ray_local.main(["nodes", "b", "--dir", str(tmp_path)]) == ray_local.EXIT_USAGE
    assert not (tmp_path / "pids").exists()  # nothing was started


def test_cli_add_node_without_a_head_says_so(tmp_path, capsys):
    assert ray_local.main(["add-node", "b", "--dir", str(tmp_path)]) == 1
    assert "no Ray head runs in" in capsys.readouterr().err


def test_node_specs_from_tuples_and_mappings():
    spec = ray_local.as_spec("b", (1, {"host_b": 1}, {"hw": "a100"}))
    assert spec == ray_node.NodeSpec(name="b", num_cpus=1, resources={"host_b": 1.0}, labels={"hw": "a100"})
    assert ray_local.as_spec("c", {"resources": {"host_c": 1}}).resources == {"host_c": 1.0}
    assert ray_local.as_spec("d", (2,)).num_cpus == 2
    with pytest.raises(ConfigError, match="node e: unknown field"):
        ray_local.as_spec("e", {"cpus": 1})
    with pytest.raises(ConfigError, match="node f: expected"):
        ray_local.as_spec("f", [1, {}, {}])
    with pytest.raises(ConfigError, match="named 'x'"):
        ray_local.as_spec("g", ray_node.NodeSpec(name="x"))


def test_nodes_table_hides_rays_bookkeeping():
    table = ray_local.format_nodes([
        ray_local.NodeInfo(name="head", node_id="a" * 56, pgid=10, resources={"CPU": 1.0, "memory": 9.0,
                           "node:127.0.0.1": 1.0}, is_head=True),
        ray_local.NodeInfo(name="c", node_id="b" * 56, pgid=None, alive=False, resources={"CPU": 1, "host_c": 1},
                           labels={"disagg_node": "c", "hw": "h100", "ray.io/node-id": "b" * 56})])
    lines = table.splitlines()
    assert lines[0].split() == ["NAME", "STATE", "NODE", "ID", "PGID", "RESOURCES", "LABELS"]
    assert lines[1].split() == ["head", "alive", "a" * 16, "10", "CPU=1", "-"]
    assert lines[2].split() == ["c", "dead", "b" * 16, "-", "CPU=1,host_c=1", "disagg_node=c,hw=h100"]


def test_up_refuses_port_zero(tmp_path):
    with pytest.raises(ConfigError, match="--port"):
        ray_local.up(tmp_path, port=0)


# --- node id from the daemon's log ----------------------------------------------------------------------------


def record_for(tmp_path: Path, log_text: str, name: str = "ray_node_b") -> DaemonRecord:
    log = tmp_path / "node_b.log"
    log.write_text(log_text)
    return DaemonRecord(name=name, pid=1, start_time=0, boot_id="", command=("x",), log=str(log))


def test_node_id_comes_from_the_latest_start_in_the_log(tmp_path):
    first = "\n=== 2026-01-01 00:00:00 x\nnode b up: " + "ab" * 28 + "\n"
    assert ray_local._up_node_id(record_for(tmp_path, first)) == "ab" * 28
    restarted = first + "node b: stopped\n\n=== 2026-01-01 00:01:00 x\nstarting\n"
    assert ray_local._up_node_id(record_for(tmp_path, restarted)) is None  # the old id is not the new node's
    assert ray_local._up_node_id(record_for(tmp_path, restarted + "node b up: " + "cd" * 28)) == "cd" * 28
    assert ray_local._up_node_id(record_for(tmp_path, "node bb up: " + "ef" * 28)) is None  # another node


# --- hard kill and graceful removal, on real processes ----------------------------------------------------------

# The shape of a node daemon: it logs its "up" line, then starts a worker that moves to a process group of its
# own (as Ray does with its workers, so that killing the daemon's group alone would miss it), and waits. The
# leader ends on SIGTERM; the worker runs its first argument first (e.g. to ignore SIGTERM).
NODE_LIKE = textwrap.dedent("""
    import os, signal, subprocess, sys, time
    worker = subprocess.Popen([sys.executable, "-c",
        "import os, signal, time; os.setpgid(0, 0); " + sys.argv[1] +
        "print('WORKER_PID=%d' % os.getpid(), flush=True); time.sleep(600)"])
    print("node x up: " + "12" * 28, flush=True)
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
    time.sleep(600)
""")
WORKER_PID = re.compile(r"WORKER_PID=(\d+)")


def fake_cluster(tmp_path: Path) -> ray_local.RayCluster:
    (tmp_path / ray_local.LAYOUT_FILE).write_text(json.dumps({"port": 1, "num_cpus": 1}))
    cluster = ray_local.load_cluster(tmp_path)
    assert cluster is not None
    return cluster


@contextlib.contextmanager
def node_like(cluster: ray_local.RayCluster, worker_first: str = "") -> Iterator[tuple[DaemonRecord, int]]:
    """Start the daemon; its record and its worker's pid; kill both (by group) at the end in any case."""
    record = cluster.daemons.start("ray_node_x", [sys.executable, "-c", NODE_LIKE, worker_first],
                                   cluster.root / "node_x.log")
    worker = None
    try:
        wait_for(lambda: WORKER_PID.search(Path(record.log).read_text()) is not None, what="the worker",
                 timeout_s=120, watch=[record])
        worker = int(WORKER_PID.search(Path(record.log).read_text())[1])
        stat = procfs.proc_stat(worker)
        assert stat is not None and stat.pgid != record.pid and stat.sid == record.pid  # left the group only
        yield record, worker
    finally:
        for pgid in (record.pid, worker):
            if pgid is not None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pgid, signal.SIGKILL)


@pytest.mark.integration
def test_kill_node_kills_the_whole_session_at_once(tmp_path):
    cluster = fake_cluster(tmp_path)
    with node_like(cluster) as (record, worker):
        assert sorted(ray_local.cluster_processes(tmp_path)) == sorted([record.pid, worker])
        assert ray_local.kill_node(tmp_path, "x") == "12" * 28
        assert not procfs.is_running(record.pid) and not procfs.is_running(worker)
        assert cluster.daemons.record("ray_node_x") is None and ray_local.cluster_processes(tmp_path) == []
        with pytest.raises(ClusterError, match="no node x"):
            ray_local.kill_node(tmp_path, "x")


@pytest.mark.integration
def test_remove_node_stops_the_leader_then_what_left_its_group(tmp_path):
    cluster = fake_cluster(tmp_path)
    with node_like(cluster, "signal.signal(signal.SIGTERM, signal.SIG_IGN); ") as (record, worker):
        assert ray_local.remove_node(tmp_path, "x", grace_s=2.0)
        assert not procfs.is_running(record.pid) and not procfs.is_running(worker)
        assert DaemonSet(tmp_path).record("ray_node_x") is None


@pytest.mark.integration
def test_down_stops_added_nodes_too(tmp_path):
    cluster = fake_cluster(tmp_path)
    with node_like(cluster) as (record, worker):
        assert ray_local.down(tmp_path)
        assert not procfs.is_running(record.pid) and not procfs.is_running(worker)
